package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/driftguard/driftguard/internal/config"
)

// Conn is how every client reaches the cluster: the seed brokers, and the
// TLS and SASL of kafka.tls and kafka.sasl. Build it once per component
// with Connect; a Conn of brokers alone is a plaintext, unauthenticated
// one (the embedded broker of dev, tests).
type Conn struct {
	Brokers []string
	tls     *tls.Config
	sasl    sasl.Mechanism
	// who names the principal in errors: the SASL user, or the client
	// certificate.
	who string
	// tlsOn and caFile shape the errors that name kafka.tls settings.
	tlsOn  bool
	caFile string
	// compression is kafka.compression; empty keeps franz-go's default
	// (snappy).
	compression string
}

// Connect builds the Conn of cfg's kafka.tls and kafka.sasl for brokers,
// or the configured brokers when brokers is empty. It reads the TLS files
// now, so that a missing or unparsable one stops the component at start
// with the key named.
func Connect(cfg *config.Config, brokers []string) (Conn, error) {
	k := cfg.Kafka
	c := Conn{Brokers: cfg.BrokersOr(brokers), tlsOn: k.TLS.On(), caFile: k.TLS.CAFile, compression: k.Compression}
	if c.tlsOn {
		t, err := k.TLS.Config("kafka.tls")
		if err != nil {
			return Conn{}, err
		}
		c.tls = t
		if k.TLS.CertFile != "" {
			c.who = "the client certificate " + k.TLS.CertFile
		}
	}
	m, err := mechanism(k.SASL)
	if err != nil {
		return Conn{}, err
	}
	c.sasl = m
	if k.SASL.Username != "" {
		c.who = fmt.Sprintf("user %q", k.SASL.Username)
	}
	return c, nil
}

// compression is the codec of kafka.compression, falling back to none
// for a batch it would not make smaller; nil for the default. Each client
// gets a slice of its own: franz-go dedupes the codecs in place as it
// builds one, and a Conn's clients are built at once.
func compression(name string) []kgo.CompressionCodec {
	switch name {
	case config.CompressionNone:
		return []kgo.CompressionCodec{kgo.NoCompression()}
	case config.CompressionSnappy:
		return []kgo.CompressionCodec{kgo.SnappyCompression(), kgo.NoCompression()}
	case config.CompressionLZ4:
		return []kgo.CompressionCodec{kgo.Lz4Compression(), kgo.NoCompression()}
	case config.CompressionZstd:
		return []kgo.CompressionCodec{kgo.ZstdCompression(), kgo.NoCompression()}
	case config.CompressionGzip:
		return []kgo.CompressionCodec{kgo.GzipCompression(), kgo.NoCompression()}
	}
	return nil
}

// mechanism is the franz-go SASL mechanism of kafka.sasl, nil for none.
// The OAUTHBEARER token and the AWS credentials are read at every
// authentication, so that rotated ones are used by the next connection.
func mechanism(s config.KafkaSASL) (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case config.SASLPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism(), nil
	case config.SASLScramSHA256:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism(), nil
	case config.SASLScramSHA512:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism(), nil
	case config.SASLOAuthBearer:
		token := func(context.Context) (oauth.Auth, error) {
			tok, err := readToken(s.TokenFile)
			return oauth.Auth{Token: tok}, err
		}
		// Read once now: a missing file stops the start, not every login.
		if _, err := token(context.Background()); err != nil {
			return nil, err
		}
		return oauth.Oauth(token), nil
	case config.SASLAWSMSKIAM:
		creds := func(context.Context) (aws.Auth, error) { return awsCredentials(os.Getenv) }
		if _, err := creds(context.Background()); err != nil {
			return nil, err
		}
		return aws.ManagedStreamingIAM(creds), nil
	}
	return nil, fmt.Errorf("kafka.sasl.mechanism: %q is not one of %s", s.Mechanism, strings.Join(config.SASLMechanisms, ", "))
}

func readToken(path string) (string, error) {
	tok, err := config.ReadSecretFile(path)
	if err != nil {
		return "", fmt.Errorf("kafka.sasl.token_file: %w", err)
	}
	return tok, nil
}

// awsCredentials are the static AWS credentials of the standard
// environment variables. Role credentials (IRSA, instance profiles) need
// the AWS SDK's providers, which this build does not carry: the process
// that mounts them must export these variables.
func awsCredentials(getenv func(string) string) (aws.Auth, error) {
	a := aws.Auth{AccessKey: getenv("AWS_ACCESS_KEY_ID"), SecretKey: getenv("AWS_SECRET_ACCESS_KEY"), SessionToken: getenv("AWS_SESSION_TOKEN")}
	if a.AccessKey == "" || a.SecretKey == "" {
		return a, fmt.Errorf("kafka.sasl.mechanism %s: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set", config.SASLAWSMSKIAM)
	}
	return a, nil
}

// ConnectClient is Connect and a client of the Conn with opts, for a
// one-off tool or check.
func ConnectClient(cfg *config.Config, brokers []string, opts ...kgo.Opt) (Conn, *kgo.Client, error) {
	conn, err := Connect(cfg, brokers)
	if err != nil {
		return Conn{}, nil, err
	}
	cl, err := NewClient(conn, opts...)
	return conn, cl, err
}

// securityOptions are the franz-go options of c's TLS and SASL.
func (c Conn) securityOptions() []kgo.Opt {
	var opts []kgo.Opt
	if c.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(c.tls))
	}
	if c.sasl != nil {
		opts = append(opts, kgo.SASL(c.sasl))
	}
	return opts
}

// Access is what a component reads and writes, so that Check can tell,
// before the component starts, which ACL its principal lacks.
// Each needs the operation named, which implies DESCRIBE, which is what
// Check asks for.
type Access struct {
	// ReadTopics it consumes (READ) and WriteTopics it produces to (WRITE).
	ReadTopics, WriteTopics []string
	// Groups it consumes in (READ).
	Groups []string
	// TransactionalIDs it produces with (WRITE).
	TransactionalIDs []string
}

// checkTimeout bounds Check: a broker that is away is no reason to wait
// at start (ingest answers 503 until it is back).
const checkTimeout = 10 * time.Second

// eofRetry is how long Check waits before it asks again a broker that
// closed the connection at once.
const eofRetry = time.Second

// Check asks the brokers what a component needs before it starts: one
// metadata request proves the TLS settings and the credentials, then its
// topics, groups and transactional ids are described, which the brokers
// refuse without the ACLs. A refusal returns an error naming the setting
// or the ACL to grant; brokers that cannot be reached are not an error
// (the clients keep trying, as they would later).
func (c Conn) Check(ctx context.Context, cl *kgo.Client, need Access) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	err := cl.Ping(ctx)
	if errors.Is(err, io.EOF) {
		// A broker going down closes connections too: only a second
		// close, a moment later, says TLS.
		select {
		case <-ctx.Done():
		case <-time.After(eofRetry):
			err = cl.Ping(ctx)
		}
	}
	if err != nil {
		if explained := c.Explain(err); explained != err {
			return explained
		}
		return nil
	}
	adm := kadm.NewClient(cl)
	// One request for every topic, the ones read first; each refusal is
	// named with the operation it was needed for. The raw request: kadm
	// folds a refused topic into one error that names none.
	var names []string
	opOf := map[string]string{}
	for _, topics := range []struct {
		op    string
		names []string
	}{{"READ", need.ReadTopics}, {"WRITE", need.WriteTopics}} {
		for _, name := range topics.names {
			if _, seen := opOf[name]; !seen {
				opOf[name] = topics.op
				names = append(names, name)
			}
		}
	}
	if len(names) > 0 {
		req := kmsg.NewPtrMetadataRequest()
		for _, name := range names {
			t := kmsg.NewMetadataRequestTopic()
			t.Topic = kmsg.StringPtr(name)
			req.Topics = append(req.Topics, t)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil
		}
		refused := map[string]error{}
		for _, t := range resp.Topics {
			if err := kerr.ErrorForCode(t.ErrorCode); errors.Is(err, kerr.TopicAuthorizationFailed) && t.Topic != nil {
				refused[*t.Topic] = err
			}
		}
		for _, name := range names {
			if err := refused[name]; err != nil {
				return c.Denied(err, opOf[name], "TOPIC", name)
			}
		}
	}
	if len(need.Groups) > 0 {
		groups, err := adm.DescribeGroups(ctx, need.Groups...)
		if errors.Is(err, kerr.GroupAuthorizationFailed) {
			return c.Denied(err, "READ", "GROUP", need.Groups[0])
		}
		for _, g := range groups.Sorted() {
			if errors.Is(g.Err, kerr.GroupAuthorizationFailed) {
				return c.Denied(g.Err, "READ", "GROUP", g.Group)
			}
		}
	}
	if len(need.TransactionalIDs) > 0 {
		txns, err := adm.DescribeTransactions(ctx, need.TransactionalIDs...)
		if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			return c.Denied(err, "WRITE", "TRANSACTIONAL_ID", need.TransactionalIDs[0])
		}
		for _, t := range txns.Sorted() {
			if errors.Is(t.Err, kerr.TransactionalIDAuthorizationFailed) {
				return c.Denied(t.Err, "WRITE", "TRANSACTIONAL_ID", t.TxnID)
			}
		}
	}
	// Anything else (a broker away, a coordinator loading) is met, and
	// retried, by the component's own clients.
	return nil
}

// Explain returns err with the setting that caused it named, when it is
// one the brokers refused for a security reason; else err itself.
func (c Conn) Explain(err error) error {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		header    tls.RecordHeaderError
		alert     tls.AlertError
		op        *net.OpError
		firstEOF  *kgo.ErrFirstReadEOF
	)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("kafka.sasl: the brokers refused %s: check kafka.sasl.mechanism, kafka.sasl.username and the password: %w", c.principal(), err)
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		return fmt.Errorf("kafka.sasl.mechanism: the brokers do not accept it on this listener: %w", err)
	case errors.As(err, &unknownCA):
		where := "the system's roots (set kafka.tls.ca_file to the brokers' CA)"
		if c.caFile != "" {
			where = c.caFile
		}
		return fmt.Errorf("kafka.tls.ca_file: the brokers' certificate is signed by a CA not in %s: %w", where, err)
	case errors.As(err, &hostname):
		return fmt.Errorf("kafka.tls.server_name: the brokers' certificate is not for the name dialed; set the name it carries: %w", err)
	case errors.As(err, &header):
		return fmt.Errorf("kafka.tls: the brokers do not speak TLS on this port: unset kafka.tls or use their TLS listener: %w", err)
	case errors.As(err, &alert), errors.As(err, &op) && op.Op == "remote error":
		// The broker's TLS alert, such as "certificate required".
		return fmt.Errorf("kafka.tls: the brokers refused the TLS handshake (a client certificate they require, kafka.tls.cert_file and key_file, or one they do not trust): %w", err)
	case !c.tlsOn && strings.Contains(err.Error(), "speaking to a tls endpoint"):
		// franz-go's reading of a TLS alert where it expected a response.
		return fmt.Errorf("kafka.tls: the brokers speak TLS on this port: set kafka.tls.enabled (and kafka.tls.ca_file for a private CA): %w", err)
	case errors.As(err, &firstEOF) && c.tlsOn:
		return fmt.Errorf("kafka.tls: the brokers closed the connection at once, as a plaintext listener does to a TLS client: unset kafka.tls, or use their TLS listener: %w", err)
	case errors.As(err, &firstEOF):
		// franz-go's guess for a connection closed before any answer; a
		// connection lost later (a broker going down) is no setting's.
		return fmt.Errorf("kafka.tls or kafka.sasl: the brokers closed the connection at once, as a TLS listener does to a plaintext client and a SASL one to a client without kafka.sasl: %w", err)
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		// A producer meets it without WRITE on any topic: Kafka then
		// wants IDEMPOTENT_WRITE on the cluster, which WRITE implies.
		return fmt.Errorf("kafka: %s was refused an operation on the cluster: a producer needs WRITE on its topics, `topics` DESCRIBE_CONFIGS on the cluster (docs/deploy.md lists each component's ACLs): %w", c.principal(), err)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return fmt.Errorf("kafka: %s lacks an ACL that docs/deploy.md lists for this component: %w", c.principal(), err)
	}
	return err
}

// Denied is a refused request's error naming the resource and the ACL
// (operation op on it) that its principal lacks.
func (c Conn) Denied(err error, op, resourceType, name string) error {
	flag := "--" + strings.ToLower(strings.ReplaceAll(resourceType, "_", "-"))
	if name != "" {
		flag += " " + name
	}
	return fmt.Errorf("kafka: %s lacks the ACL ALLOW %s on %s %q (kafka-acls --add --allow-principal User:<principal> --operation %s %s; docs/deploy.md lists each component's): %w",
		c.principal(), op, resourceType, name, op, flag, err)
}

func (c Conn) principal() string {
	if c.who == "" {
		return "the client (no kafka.sasl user, no client certificate)"
	}
	return c.who
}
