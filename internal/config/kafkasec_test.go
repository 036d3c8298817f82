package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

func TestLoadKafkaSecurityFromEnvironmentAndFiles(t *testing.T) {
	dir := t.TempDir()
	passwordFile := filepath.Join(dir, "password")
	if err := os.WriteFile(passwordFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := testenv.WriteConfig(t, "", `
kafka:
  tls: {ca_file: /file/ca.pem}
  sasl: {mechanism: scram-sha-512, username: fromfile}
`)
	cfg := mustLoad(t, path, []string{
		"DRIFTGUARD_KAFKA_TLS_CERT_FILE=/env/tls.crt",
		"DRIFTGUARD_KAFKA_TLS_KEY_FILE=/env/tls.key",
		"DRIFTGUARD_KAFKA_TLS_SERVER_NAME=kafka.internal",
		"DRIFTGUARD_KAFKA_SASL_USERNAME=fromenv",
		"DRIFTGUARD_KAFKA_SASL_PASSWORD_FILE=" + passwordFile,
	})
	checkFields(t, []field{
		{"TLS.On()", cfg.Kafka.TLS.On(), true},
		{"TLS.CAFile", cfg.Kafka.TLS.CAFile, "/file/ca.pem"},
		{"TLS.CertFile", cfg.Kafka.TLS.CertFile, "/env/tls.crt"},
		{"TLS.KeyFile", cfg.Kafka.TLS.KeyFile, "/env/tls.key"},
		{"TLS.ServerName", cfg.Kafka.TLS.ServerName, "kafka.internal"},
		{"SASL.Mechanism", cfg.Kafka.SASL.Mechanism, config.SASLScramSHA512},
		{"SASL.Username", cfg.Kafka.SASL.Username, "fromenv"},
		// The file's content, without its newline, read at load time.
		{"SASL.Password", cfg.Kafka.SASL.Password, "s3cret"},
	})
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings %q for secrets from the environment and files over TLS", cfg.Warnings)
	}

	env := mustLoad(t, "", []string{"DRIFTGUARD_KAFKA_TLS_ENABLED=true", "DRIFTGUARD_KAFKA_SASL_MECHANISM=PLAIN",
		"DRIFTGUARD_KAFKA_SASL_USERNAME=u", "DRIFTGUARD_KAFKA_SASL_PASSWORD=p", "DRIFTGUARD_KAFKA_SASL_TOKEN_FILE="})
	if !env.Kafka.TLS.Enabled || env.Kafka.SASL.Password != "p" {
		t.Errorf("from the environment: %+v", env.Kafka)
	}
}

// `driftguard config` and a log line of the Kafka settings show the SASL
// password redacted.
func TestKafkaPasswordIsRedacted(t *testing.T) {
	cfg := mustLoad(t, "", []string{"DRIFTGUARD_KAFKA_TLS_ENABLED=true", "DRIFTGUARD_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"DRIFTGUARD_KAFKA_SASL_USERNAME=svc", "DRIFTGUARD_KAFKA_SASL_PASSWORD=hunter2-kafka"})
	out, err := cfg.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"driftguard config": string(out), "%v of Kafka": fmt.Sprint(cfg.Kafka), "%v of SASL": fmt.Sprint(cfg.Kafka.SASL)} {
		if strings.Contains(text, "hunter2-kafka") || !strings.Contains(text, config.Redacted) {
			t.Errorf("%s shows the password, or no redaction:\n%s", what, text)
		}
	}
}

func TestLoadKafkaSecurityErrorsNameTheKey(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent")
	cases := []struct {
		name    string
		environ []string
		want    []string
	}{
		{"unknown mechanism", []string{"DRIFTGUARD_KAFKA_SASL_MECHANISM=GSSAPI"}, []string{`in kafka.sasl.mechanism: "GSSAPI" is not one of PLAIN, SCRAM-SHA-256`}},
		{"username without password", []string{"DRIFTGUARD_KAFKA_SASL_MECHANISM=SCRAM-SHA-256", "DRIFTGUARD_KAFKA_SASL_USERNAME=u"},
			[]string{"in kafka.sasl.password: is required with kafka.sasl.mechanism SCRAM-SHA-256"}},
		{"password without username", []string{"DRIFTGUARD_KAFKA_SASL_MECHANISM=PLAIN", "DRIFTGUARD_KAFKA_SASL_PASSWORD=p"},
			[]string{"in kafka.sasl.username: is required with kafka.sasl.mechanism PLAIN"}},
		{"credentials without mechanism", []string{"DRIFTGUARD_KAFKA_SASL_USERNAME=u"}, []string{"in kafka.sasl.mechanism: is empty but kafka.sasl.username is set"}},
		{"cert without key", []string{"DRIFTGUARD_KAFKA_TLS_CERT_FILE=/c.pem"}, []string{"in kafka.tls.key_file: is required with kafka.tls.cert_file"}},
		{"key without cert", []string{"DRIFTGUARD_KAFKA_TLS_KEY_FILE=/k.pem"}, []string{"in kafka.tls.cert_file: is required with kafka.tls.key_file"}},
		{"OAUTHBEARER without token file", []string{"DRIFTGUARD_KAFKA_SASL_MECHANISM=OAUTHBEARER"}, []string{"in kafka.sasl.token_file: is required with kafka.sasl.mechanism OAUTHBEARER"}},
		{"token file with SCRAM", []string{"DRIFTGUARD_KAFKA_SASL_MECHANISM=SCRAM-SHA-512", "DRIFTGUARD_KAFKA_SASL_USERNAME=u", "DRIFTGUARD_KAFKA_SASL_PASSWORD=p", "DRIFTGUARD_KAFKA_SASL_TOKEN_FILE=/t"},
			[]string{"in kafka.sasl.token_file: is only read with kafka.sasl.mechanism OAUTHBEARER"}},
		{"IAM without TLS", []string{"DRIFTGUARD_KAFKA_SASL_MECHANISM=AWS_MSK_IAM"}, []string{"in kafka.tls.enabled: must be true with kafka.sasl.mechanism AWS_MSK_IAM"}},
		{"missing password file", []string{"DRIFTGUARD_KAFKA_SASL_PASSWORD_FILE=" + missing}, []string{"kafka.sasl.password_file: open " + missing}},
		{"password and password file", []string{"DRIFTGUARD_KAFKA_SASL_PASSWORD=p", "DRIFTGUARD_KAFKA_SASL_PASSWORD_FILE=" + missing},
			[]string{"in kafka.sasl.password_file: is set, and so is kafka.sasl.password", "DRIFTGUARD_KAFKA_SASL_PASSWORD"}},
		{"bad TLS switch", []string{"DRIFTGUARD_KAFKA_TLS_ENABLED=yes please"}, []string{`DRIFTGUARD_KAFKA_TLS_ENABLED (kafka.tls.enabled): "yes please" is not true or false`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Load("", c.environ)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, want := range c.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestLoadWarnsOfExposedKafkaCredentials(t *testing.T) {
	cfg := mustLoad(t, "", []string{"DRIFTGUARD_KAFKA_SASL_MECHANISM=PLAIN", "DRIFTGUARD_KAFKA_SASL_USERNAME=u", "DRIFTGUARD_KAFKA_SASL_PASSWORD=p"})
	if !strings.Contains(strings.Join(cfg.Warnings, "\n"), "kafka.sasl.mechanism PLAIN without kafka.tls") {
		t.Errorf("no warning of PLAIN over plaintext: %q", cfg.Warnings)
	}
	path := testenv.WriteConfig(t, "", "kafka: {tls: {enabled: true}, sasl: {mechanism: SCRAM-SHA-512, username: u, password: in-the-file}}")
	cfg = mustLoad(t, path, nil)
	if w := strings.Join(cfg.Warnings, "\n"); !strings.Contains(w, "kafka.sasl.password is in the config file") || strings.Contains(w, "without kafka.tls") {
		t.Errorf("warnings %q: want the one of a password in the file only", cfg.Warnings)
	}
}
