package kafka

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/driftguard/driftguard/internal/config"
)

func TestConnectNamesTheTLSFileItCannotUse(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		tls  config.TLS
		want string
	}{
		{config.TLS{CAFile: filepath.Join(dir, "absent.pem")}, "kafka.tls.ca_file: open "},
		{config.TLS{CAFile: notPEM}, "kafka.tls.ca_file: " + notPEM + " holds no PEM certificate"},
		{config.TLS{CertFile: notPEM, KeyFile: notPEM}, "in kafka.tls.cert_file and kafka.tls.key_file: "},
	}
	for _, c := range cases {
		cfg := &config.Config{}
		cfg.Kafka.TLS = c.tls
		if _, err := Connect(cfg, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.tls, err, c.want)
		}
	}
}

// The token file is read at every authentication: a token rotated in
// place is what the next connection presents.
func TestOAuthBearerRereadsTheTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(tok string) {
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first-token")
	cfg := &config.Config{}
	cfg.Kafka.SASL = config.KafkaSASL{Mechanism: config.SASLOAuthBearer, TokenFile: path}
	c, err := Connect(cfg, []string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"first-token", "rotated-token"} {
		write(tok)
		_, msg, err := c.sasl.Authenticate(context.Background(), "127.0.0.1:1")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(msg), "auth=Bearer "+tok+"\x01") {
			t.Errorf("first message %q does not carry %s", msg, tok)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.sasl.Authenticate(context.Background(), "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "kafka.sasl.token_file: ") {
		t.Errorf("a removed token file: %v", err)
	}
	if _, err := Connect(cfg, nil); err == nil || !strings.Contains(err.Error(), "kafka.sasl.token_file: ") {
		t.Errorf("Connect with no token file: %v", err)
	}
}

func TestAWSCredentialsFromTheStandardVariables(t *testing.T) {
	env := map[string]string{"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "session"}
	a, err := awsCredentials(func(k string) string { return env[k] })
	if err != nil || a.AccessKey != "AKIA1" || a.SecretKey != "secret" || a.SessionToken != "session" {
		t.Errorf("got %+v, %v", a, err)
	}
	delete(env, "AWS_SECRET_ACCESS_KEY")
	if _, err := awsCredentials(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("without a secret key: %v", err)
	}
}

func TestExplainNamesTheSetting(t *testing.T) {
	c := Conn{who: `user "svc"`, tlsOn: true, caFile: "/etc/ca.pem"}
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("auth: %w", kerr.SaslAuthenticationFailed), `kafka.sasl: the brokers refused user "svc"`},
		{fmt.Errorf("dial: %w", x509.UnknownAuthorityError{}), "kafka.tls.ca_file: the brokers' certificate is signed by a CA not in /etc/ca.pem"},
		{x509.HostnameError{Certificate: &x509.Certificate{}, Host: "10.0.0.1"}, "kafka.tls.server_name: "},
		{kerr.ClusterAuthorizationFailed, "a producer needs WRITE on its topics"},
	}
	for _, tc := range cases {
		got := c.Explain(tc.err)
		if !strings.Contains(got.Error(), tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("Explain(%v) = %v, want %q and the cause kept", tc.err, got, tc.want)
		}
	}
	plain := errors.New("dial tcp: connection refused")
	if got := c.Explain(plain); got != plain {
		t.Errorf("Explain changed an error that is no setting's: %v", got)
	}
}

func TestACLCommand(t *testing.T) {
	got := ACL{Resource: "TRANSACTIONAL_ID", Pattern: "PREFIXED", Name: "driftguard-presence-", Operations: []string{"WRITE", "DESCRIBE_CONFIGS"}}.Command("User:process")
	want := "kafka-acls --bootstrap-server $BROKERS --command-config admin.properties --add --allow-principal User:process --operation Write --operation DescribeConfigs --transactional-id driftguard-presence- --resource-pattern-type prefixed"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
