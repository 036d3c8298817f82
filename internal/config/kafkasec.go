package config

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// The SASL mechanisms of kafka.sasl.mechanism.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
	SASLOAuthBearer = "OAUTHBEARER"
	SASLAWSMSKIAM   = "AWS_MSK_IAM"
)

// SASLMechanisms are the mechanisms kafka.sasl.mechanism accepts.
var SASLMechanisms = []string{SASLPlain, SASLScramSHA256, SASLScramSHA512, SASLOAuthBearer, SASLAWSMSKIAM}

// KafkaSASL configures SASL authentication to the brokers. Secrets come
// from the environment or from files, which is what a Kubernetes Secret
// mounts; a password in the config file works but is warned about.
type KafkaSASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or
	// AWS_MSK_IAM; empty: no SASL.
	Mechanism string `yaml:"mechanism" env:"DRIFTGUARD_KAFKA_SASL_MECHANISM"`
	// Username and Password for PLAIN and SCRAM.
	Username string `yaml:"username" env:"DRIFTGUARD_KAFKA_SASL_USERNAME"`
	Password string `yaml:"password" env:"DRIFTGUARD_KAFKA_SASL_PASSWORD" redact:"true"`
	// PasswordFile holds the password (a trailing newline is dropped); it
	// is read when the configuration is loaded, into Password.
	PasswordFile string `yaml:"password_file" env:"DRIFTGUARD_KAFKA_SASL_PASSWORD_FILE"`
	// TokenFile holds the OAUTHBEARER token. It is read again at every
	// authentication, so a token the platform rotates in place is picked
	// up by the next connection.
	TokenFile string `yaml:"token_file" env:"DRIFTGUARD_KAFKA_SASL_TOKEN_FILE"`
}

// readSecretFiles reads kafka.sasl.password_file and
// clickhouse.password_file into their passwords: a missing or unreadable
// file stops the start with the key named, rather than every connection
// failing later. It also spells the mechanism as Kafka does (scram-sha-512
// is SCRAM-SHA-512).
func (c *Config) readSecretFiles() error {
	s := &c.Kafka.SASL
	s.Mechanism = strings.ToUpper(strings.TrimSpace(s.Mechanism))
	return errors.Join(
		passwordFromFile(&s.Password, s.PasswordFile, "kafka.sasl.password"),
		passwordFromFile(&c.ClickHouse.Password, c.ClickHouse.PasswordFile, "clickhouse.password"),
		passwordFromFile(&c.Telemetry.AdminToken, c.Telemetry.AdminTokenFile, "telemetry.admin_token"))
}

// passwordFromFile sets *password, the setting at key, from the file of
// key_file, when one is named; both set is an error, as one would silently
// win.
func passwordFromFile(password *string, file, key string) error {
	if file == "" {
		return nil
	}
	if *password != "" {
		return fmt.Errorf("in %s_file: is set, and so is %s (%s or the file): keep one", key, key, envName(key))
	}
	p, err := ReadSecretFile(file)
	if err != nil {
		return fmt.Errorf("in %s_file: %w", key, err)
	}
	*password = p
	return nil
}

// String shows the settings, the password redacted.
func (s KafkaSASL) String() string { return redactedString(s) }

// LogValue logs the settings, the password redacted.
func (s KafkaSASL) LogValue() slog.Value { return slog.StringValue(s.String()) }

// validateSecurity checks kafka.tls and kafka.sasl; add reports a problem at a
// config path.
func (k Kafka) validateSecurity(add func(path, format string, args ...any)) {
	t, s := k.TLS, k.SASL
	if (t.CertFile == "") != (t.KeyFile == "") {
		if t.CertFile == "" {
			add("kafka.tls.cert_file", "is required with kafka.tls.key_file")
		} else {
			add("kafka.tls.key_file", "is required with kafka.tls.cert_file")
		}
	}
	switch s.Mechanism {
	case "":
		for path, v := range map[string]string{"username": s.Username, "password": s.Password, "password_file": s.PasswordFile, "token_file": s.TokenFile} {
			if v != "" {
				add("kafka.sasl.mechanism", "is empty but kafka.sasl.%s is set: name one of %s", path, strings.Join(SASLMechanisms, ", "))
				break
			}
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.Username == "" {
			add("kafka.sasl.username", "is required with kafka.sasl.mechanism %s", s.Mechanism)
		}
		if s.Password == "" {
			add("kafka.sasl.password", "is required with kafka.sasl.mechanism %s: set DRIFTGUARD_KAFKA_SASL_PASSWORD or kafka.sasl.password_file", s.Mechanism)
		}
		if s.TokenFile != "" {
			add("kafka.sasl.token_file", "is only read with kafka.sasl.mechanism %s, not %s", SASLOAuthBearer, s.Mechanism)
		}
	case SASLOAuthBearer:
		if s.TokenFile == "" {
			add("kafka.sasl.token_file", "is required with kafka.sasl.mechanism %s", s.Mechanism)
		}
		if s.Username != "" || s.Password != "" {
			add("kafka.sasl.username", "and kafka.sasl.password are not used with kafka.sasl.mechanism %s (the token is): remove them", s.Mechanism)
		}
	case SASLAWSMSKIAM:
		if s.Username != "" || s.Password != "" || s.TokenFile != "" {
			add("kafka.sasl.mechanism", "%s takes its credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN: remove kafka.sasl.username, password and token_file", s.Mechanism)
		}
		if !t.On() {
			add("kafka.tls.enabled", "must be true with kafka.sasl.mechanism %s: MSK serves IAM on its TLS listener only", s.Mechanism)
		}
	default:
		add("kafka.sasl.mechanism", "%q is not one of %s", s.Mechanism, strings.Join(SASLMechanisms, ", "))
	}
}

// warnSecurity warns of settings that work but expose secrets: a password
// sent without TLS, or kept in the config file.
func (c *Config) warnSecurity(passwordInFile bool) {
	s := c.Kafka.SASL
	if slices.Contains([]string{SASLPlain, SASLScramSHA256, SASLScramSHA512, SASLOAuthBearer}, s.Mechanism) && !c.Kafka.TLS.On() {
		c.Warnings = append(c.Warnings, fmt.Sprintf("kafka.sasl.mechanism %s without kafka.tls: credentials and records cross the network unencrypted; use TLS outside tests", s.Mechanism))
	}
	if passwordInFile {
		c.Warnings = append(c.Warnings, "kafka.sasl.password is in the config file: prefer DRIFTGUARD_KAFKA_SASL_PASSWORD or kafka.sasl.password_file (a mounted Secret)")
	}
}
