package main

// The pipeline on a broker that authenticates and authorizes its clients
// (scripts/kafka.sh secure start): SCRAM-SHA-512 over TLS with each
// component holding only the ACLs docs/deploy.md lists, mTLS, and the
// errors that name the setting when one is wrong.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
	"github.com/driftguard/driftguard/processors"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
	"github.com/driftguard/driftguard/sinks/realtime"
)

const secureBridgeSecret = "secure-test-bridge-secret-of-32-bytes-at-least"

func TestSecureKafka(t *testing.T) {
	k := testenv.Secure(t)
	chAddr := testenv.ClickHouse(t)
	ctx := testenv.Context(t, 5*time.Minute)
	admin := secureAdmin(t, ctx, k)

	// Each component as a user of its own holding only the ACLs
	// docs/deploy.md lists: by prefix on a shared cluster's names, and by
	// name without prefixes.
	for _, run := range []struct {
		name, prefix, mechanism string
		listener                func(*config.Config)
	}{
		{"SCRAM-SHA-512 over TLS, prefix team-a., PREFIXED ACLs", "team-a.", config.SASLScramSHA512, func(*config.Config) {}},
		{"SCRAM-SHA-256 over plaintext, no prefix, ACLs by name", "", config.SASLScramSHA256, func(c *config.Config) {
			c.Kafka.Brokers, c.Kafka.TLS = []string{k.SASLPlaintext}, config.TLS{}
		}},
	} {
		t.Run(run.name, func(t *testing.T) {
			// A stream of each policy, one with ephemeral types (chat):
			// every kind of ACL the docs list is granted and needed.
			cfg := secureStream(t, chAddr, "presence", "workflow", "chat")
			cfg.Kafka.TopicPrefix, cfg.Kafka.GroupPrefix = run.prefix, run.prefix
			users := map[string]*config.Config{}
			for _, component := range kafka.Components {
				user, password := testenv.UniqueName("dg-"+component), testenv.UniqueName("pw")
				createUser(t, ctx, admin, user, password)
				acls := kafka.ACLs(component, cfg)
				if run.prefix != "" && slices.ContainsFunc(acls, func(a kafka.ACL) bool { return a.Resource != "CLUSTER" && a.Pattern != "PREFIXED" }) {
					t.Fatalf("%s: ACLs by name with prefixes: %+v", component, acls)
				}
				grant(t, ctx, admin, "User:"+user, acls)
				c := *cfg
				k.SCRAM(&c, user, password)
				c.Kafka.SASL.Mechanism = run.mechanism
				run.listener(&c)
				users[component] = &c
			}
			runSecurePipeline(t, ctx, func(component string) *config.Config { return users[component] })
		})
	}

	t.Run("mTLS", func(t *testing.T) {
		cfg := secureStream(t, chAddr, "presence")
		k.MutualTLS(cfg)
		runSecurePipeline(t, ctx, func(string) *config.Config { return cfg })
	})

	t.Run("errors name the setting", func(t *testing.T) {
		cfg := secureStream(t, chAddr, "presence")
		k.Admin(cfg)
		testenv.Topics(t, ctx, cfg, nil).Close()
		in := kafka.ACLs(kafka.ComponentIngest, cfg)[0].Name

		wrong := *cfg
		wrong.Kafka.SASL.Password = "not-the-password"
		expectStartError(t, ctx, &wrong, everywhere("kafka.sasl: the brokers refused user"))

		foreign := *cfg
		foreign.Kafka.TLS.CAFile = testenv.ForeignCA(t)
		expectStartError(t, ctx, &foreign, everywhere("kafka.tls.ca_file: the brokers' certificate is signed by a CA not in "+foreign.Kafka.TLS.CAFile))

		user, password := testenv.UniqueName("dg-none"), testenv.UniqueName("pw")
		createUser(t, ctx, admin, user, password)
		none := *cfg
		k.SCRAM(&none, user, password)
		names := cfg.Kafka.Naming().For(presenceOf(cfg))
		expectStartError(t, ctx, &none, map[string]string{
			"ingest":  fmt.Sprintf(`user %q lacks the ACL ALLOW WRITE on TOPIC %q`, user, names.In),
			"process": fmt.Sprintf(`user %q lacks the ACL ALLOW READ on TOPIC %q`, user, names.In),
			"bridge":  fmt.Sprintf(`user %q lacks the ACL ALLOW READ on TOPIC %q`, user, names.State),
			"sink":    fmt.Sprintf(`user %q lacks the ACL ALLOW READ on TOPIC %q`, user, names.State),
		})

		// DESCRIBE but not WRITE: the edge starts, and refuses every
		// webhook with 503 instead of acknowledging what was not written:
		// first refused a producer id (no WRITE on any topic), then, with
		// WRITE on another topic, refused the write itself (an edge
		// started anew: the first one's producer id stays refused).
		grant(t, ctx, admin, "User:"+user, []kafka.ACL{{Resource: "TOPIC", Pattern: "LITERAL", Name: in, Operations: []string{"DESCRIBE"}}})
		for i, also := range [][]kafka.ACL{nil, {{Resource: "TOPIC", Pattern: "LITERAL", Name: in + "-other", Operations: []string{"WRITE"}}}} {
			grant(t, ctx, admin, "User:"+user, also)
			url := startIngest(t, ctx, &none, telemetry.NewOps())
			pub := &webhook.Publisher{URL: url + "/v1/webhooks/" + presenceOf(cfg), Secret: testSecret}
			id := fmt.Sprintf("denied-%d", i)
			resp, err := pub.Post(ctx, id, testenv.Presence{EventID: id, User: "bob", Version: int64(i + 1), Timestamp: 1_700_000_000}.Body())
			if err != nil || resp.Status != http.StatusServiceUnavailable {
				t.Errorf("%s, a webhook the broker refuses to store: status %d err %v body %s; want 503", id, resp.Status, err, resp.Body)
			}
		}
		if n := written(t, ctx, admin, in); n != 0 {
			t.Errorf("%s took %d records, all refused", in, n)
		}

		checkTopicsFromEnvironment(t, ctx, k)

		// A listener's protocol mistaken: each named.
		for _, c := range []struct {
			name, want string
			edit       func(*config.Config)
		}{
			{"plaintext to the TLS listener", "kafka.tls: the brokers speak TLS on this port", func(c *config.Config) { c.Kafka.TLS = config.TLS{} }},
			{"TLS to the plaintext listener", "kafka.tls: the brokers closed the connection at once", func(c *config.Config) { c.Kafka.Brokers = []string{k.SASLPlaintext} }},
			{"no client certificate on the mTLS listener", "kafka.tls: the brokers refused the TLS handshake", func(c *config.Config) {
				c.Kafka.Brokers, c.Kafka.SASL = []string{k.MTLS}, config.KafkaSASL{}
			}},
		} {
			mistaken := *cfg
			c.edit(&mistaken)
			if err := checkConn(ctx, &mistaken); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
			}
		}

		// The other mechanisms of the issue reach the same broker.
		for _, m := range []struct{ mechanism, addr string }{
			{config.SASLPlain, k.SASLSSL}, {config.SASLScramSHA256, k.SASLSSL}, {config.SASLScramSHA512, k.SASLPlaintext},
		} {
			c := *cfg
			c.Kafka.Brokers = []string{m.addr}
			c.Kafka.SASL.Mechanism = m.mechanism
			if m.addr == k.SASLPlaintext {
				c.Kafka.TLS = config.TLS{}
			}
			if err := checkConn(ctx, &c); err != nil {
				t.Errorf("%s on %s: %v", m.mechanism, m.addr, err)
			}
		}
	})
}

// The command line takes the settings from the environment, the password
// from a file: `topics --check` reaches the broker (and finds the shipped
// catalogue's topics missing there), and names kafka.sasl when the file
// holds a wrong password.
func checkTopicsFromEnvironment(t *testing.T, ctx context.Context, k testenv.SecureKafka) {
	passwordFile := filepath.Join(t.TempDir(), "password")
	for name, value := range map[string]string{"DRIFTGUARD_KAFKA_BROKERS": k.SASLSSL, "DRIFTGUARD_KAFKA_TLS_CA_FILE": k.CAFile,
		"DRIFTGUARD_KAFKA_SASL_MECHANISM": config.SASLScramSHA512, "DRIFTGUARD_KAFKA_SASL_USERNAME": k.User,
		"DRIFTGUARD_KAFKA_SASL_PASSWORD_FILE": passwordFile, "DRIFTGUARD_CONFIG": ""} {
		t.Setenv(name, value)
	}
	for _, c := range []struct{ password, want string }{
		{k.Password, "topic presence.in is missing"},
		{"not-the-password", `kafka.sasl: the brokers refused user "admin"`},
	} {
		if err := os.WriteFile(passwordFile, []byte(c.password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		code := run(ctx, []string{"topics", "--check"}, &out, &out)
		if code == 0 || !strings.Contains(out.String(), c.want) {
			t.Errorf("topics --check with the password file holding %q: exit %d, output:\n%s\nwant it to contain %q", c.password, code, out.String(), c.want)
		}
	}
}

// secureStream is the configuration of fresh copies of the shipped
// streams, a database and a sink group, with no Kafka address yet.
func secureStream(t *testing.T, chAddr string, shipped ...string) *config.Config {
	t.Helper()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Streams = map[string]*config.Stream{}
	for _, name := range shipped {
		s := testenv.Shipped(t, name)
		s.Name = testenv.UniqueName("secure_" + name)
		s.Signature.Secrets = []string{testSecret}
		s.Limits.Partitions = 2
		cfg.Streams[s.Name] = s
	}
	cfg.ClickHouse.Addr = chAddr
	cfg.ClickHouse.Database = testenv.UniqueName("dg_test")
	cfg.ClickHouse.BatchPeriod = 100 * time.Millisecond
	cfg.ClickHouse.ConsumerGroup = testenv.UniqueName("dg-sink")
	cfg.Bridge.Secret = secureBridgeSecret
	return cfg
}

// runSecurePipeline creates the topics as `topics` does, runs ingest,
// the processors, the sink and the bridge, each with the configuration
// as gives its component, and follows one webhook to ClickHouse and the
// bridge.
func runSecurePipeline(t *testing.T, ctx context.Context, as func(component string) *config.Config) {
	cfg := as(kafka.ComponentIngest)
	for _, component := range kafka.Components {
		if err := as(component).Validate(); err != nil {
			t.Fatalf("%s: %v", component, err)
		}
	}
	conn := openDroppedAtEnd(t, ctx, cfg.ClickHouse)
	if _, err := sinkch.Migrate(ctx, conn, cfg.ClickHouse, nil); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := runTopics(ctx, &environment{cfg: as(kafka.ComponentTopics), log: testenv.Logger(t), stdout: &out, stderr: io.Discard}, true); err != nil {
		t.Fatalf("topics: %v\n%s", err, out.String())
	}
	log := testenv.Logger(t)
	ops := telemetry.NewOps()
	bln := listen(t)
	bridge, err := realtime.New(realtime.Options{Config: as(kafka.ComponentBridge), Logger: log, Listener: bln, OpsListener: listen(t)})
	if err != nil {
		t.Fatal(err)
	}
	url := startIngest(t, ctx, cfg, ops,
		processors.NewService(processors.ServiceOptions{Config: as(kafka.ComponentProcess), Logger: log, Ops: ops, InMemoryTables: true}),
		sinkch.New(sinkch.Options{Config: as(kafka.ComponentSink), Conn: conn, Logger: log, Ops: ops}),
		bridge)
	p := &pipeline{cfg: cfg, stream: presenceOf(cfg), url: url, ch: conn}
	p.waitReady(t, ctx)

	p.send(t, ctx, []delivery{{ID: "carol-7", Key: "carol", Version: 7,
		Body: testenv.Presence{EventID: "carol-7", User: "carol", Version: 7, Timestamp: 1_700_000_007}.Body()}})
	// Both tables, so that the sink is idle when the test ends: the
	// database is dropped then, which an insert cut off midway would hold.
	testenv.WaitFor(t, ctx, "the decision and the state in ClickHouse", func() bool {
		var outcome string
		var version uint64
		err := conn.QueryRow(ctx, fmt.Sprintf("SELECT outcome FROM %s.events WHERE stream = '%s' AND event_id = 'carol-7'", cfg.ClickHouse.Database, p.stream)).Scan(&outcome)
		if err != nil || outcome != "applied" {
			return false
		}
		err = conn.QueryRow(ctx, fmt.Sprintf("SELECT version FROM %s.entity_state FINAL WHERE stream = '%s' AND entity_key = 'carol'", cfg.ClickHouse.Database, p.stream)).Scan(&version)
		return err == nil && version == 7
	})
	tok, err := realtime.Sign([]byte(secureBridgeSecret), "watcher", []string{p.stream}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "the entity on the bridge", func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+bln.Addr().String()+"/v1/streams/"+p.stream+"/entities/carol", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var e struct{ Version int64 }
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&e) == nil && e.Version > 0
	})
}

// presenceOf is the name of cfg's copy of the presence stream.
func presenceOf(cfg *config.Config) string {
	for _, name := range cfg.StreamNames() {
		if strings.HasPrefix(name, "secure_presence") {
			return name
		}
	}
	panic("no presence stream")
}

// startIngest runs ingest with cfg, and more services, until the test
// ends, with ops on the webhook listener, and returns its URL.
func startIngest(t *testing.T, ctx context.Context, cfg *config.Config, ops *telemetry.Ops, more ...service.Service) string {
	t.Helper()
	ln := listen(t)
	svcs := append([]service.Service{ingest.NewService(ingest.ServiceOptions{Config: cfg, Logger: testenv.Logger(t), Ops: ops, Listener: ln, OpsOnListener: true})}, more...)
	runServices(t, ctx, "secure pipeline", svcs...)
	return "http://" + ln.Addr().String()
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// everywhere is the same error expected of every component.
func everywhere(want string) map[string]string {
	return map[string]string{"ingest": want, "process": want, "bridge": want, "sink": want}
}

// expectStartError runs ingest, the processors, the sink and the bridge
// with cfg and expects each to stop at start, before the sink touches
// ClickHouse, with an error containing want[its name].
func expectStartError(t *testing.T, ctx context.Context, cfg *config.Config, want map[string]string) {
	t.Helper()
	bridge, err := realtime.New(realtime.Options{Config: cfg, Listener: listen(t), OpsListener: listen(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range []service.Service{
		ingest.NewService(ingest.ServiceOptions{Config: cfg, Listener: listen(t)}),
		processors.NewService(processors.ServiceOptions{Config: cfg, InMemoryTables: true}),
		sinkch.New(sinkch.Options{Config: cfg}),
		bridge,
	} {
		runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := svc.Run(runCtx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), want[svc.Name()]) {
			t.Errorf("%s: got %v, want an error containing %q", svc.Name(), err, want[svc.Name()])
		}
	}
}

// checkConn connects with cfg and checks the connection as a component
// does at start.
func checkConn(ctx context.Context, cfg *config.Config) error {
	conn, cl, err := kafka.ConnectClient(cfg, nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	return conn.Check(ctx, cl, kafka.Access{})
}

// secureAdmin is a client of the super user.
func secureAdmin(t *testing.T, ctx context.Context, k testenv.SecureKafka) *kadm.Client {
	t.Helper()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	k.Admin(cfg)
	if err := checkConn(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, cl, err := kafka.ConnectClient(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// createUser makes a SCRAM user, with SCRAM-SHA-256 and SCRAM-SHA-512
// credentials.
func createUser(t *testing.T, ctx context.Context, adm *kadm.Client, user, password string) {
	t.Helper()
	// One mechanism a request: Kafka refuses a user twice in one.
	for _, m := range []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512} {
		res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: m, Iterations: 4096, Password: password}})
		if err == nil {
			err = res.Error()
		}
		if err != nil {
			t.Fatalf("creating SCRAM user %s: %v", user, err)
		}
	}
}

// grant creates acls for principal, each as its own ACL binding.
func grant(t *testing.T, ctx context.Context, adm *kadm.Client, principal string, acls []kafka.ACL) {
	t.Helper()
	for _, acl := range acls {
		var ops []kadm.ACLOperation
		for _, op := range acl.Operations {
			o, err := kmsg.ParseACLOperation(op)
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, o)
		}
		pattern, err := kmsg.ParseACLResourcePatternType(acl.Pattern)
		if err != nil {
			t.Fatal(err)
		}
		b := kadm.NewACLs().Allow(principal).AllowHosts("*").Operations(ops...).ResourcePatternType(pattern)
		switch acl.Resource {
		case "TOPIC":
			b.Topics(acl.Name)
		case "GROUP":
			b.Groups(acl.Name)
		case "TRANSACTIONAL_ID":
			b.TransactionalIDs(acl.Name)
		case "CLUSTER":
			b.Clusters()
		default:
			t.Fatalf("no ACL resource %q", acl.Resource)
		}
		res, err := adm.CreateACLs(ctx, b)
		for _, r := range res {
			err = errors.Join(err, r.Err)
		}
		if err != nil {
			t.Fatalf("granting %+v to %s: %v", acl, principal, err)
		}
	}
}

// written is how many records topic ever took: the sum of its end
// offsets.
func written(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}
