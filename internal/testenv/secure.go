package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
)

// The variables `scripts/kafka.sh secure start` prints, which the test
// task exports.
const (
	EnvSecureSASLSSL       = "DRIFTGUARD_TEST_KAFKA_SECURE_SASL_SSL"
	EnvSecureMTLS          = "DRIFTGUARD_TEST_KAFKA_SECURE_MTLS"
	EnvSecureSASLPlaintext = "DRIFTGUARD_TEST_KAFKA_SECURE_SASL_PLAINTEXT"
	EnvSecureCAFile        = "DRIFTGUARD_TEST_KAFKA_SECURE_CA_FILE"
	EnvSecureCertFile      = "DRIFTGUARD_TEST_KAFKA_SECURE_CERT_FILE"
	EnvSecureKeyFile       = "DRIFTGUARD_TEST_KAFKA_SECURE_KEY_FILE"
	EnvSecureUser          = "DRIFTGUARD_TEST_KAFKA_SECURE_USER"
	EnvSecurePassword      = "DRIFTGUARD_TEST_KAFKA_SECURE_PASSWORD"
)

// SecureKafka is the secure test broker: one node with a SASL_SSL
// listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), an SSL listener that
// requires client certificates, a SASL_PLAINTEXT one, and the standard
// authorizer. User is its super user, whose client certificate (CertFile,
// KeyFile) maps to the same principal.
type SecureKafka struct {
	SASLSSL, MTLS, SASLPlaintext string
	CAFile, CertFile, KeyFile    string
	User, Password               string
}

// Secure returns the secure test broker.
func Secure(t testing.TB) SecureKafka {
	t.Helper()
	k := SecureKafka{
		SASLSSL: os.Getenv(EnvSecureSASLSSL), MTLS: os.Getenv(EnvSecureMTLS), SASLPlaintext: os.Getenv(EnvSecureSASLPlaintext),
		CAFile: os.Getenv(EnvSecureCAFile), CertFile: os.Getenv(EnvSecureCertFile), KeyFile: os.Getenv(EnvSecureKeyFile),
		User: os.Getenv(EnvSecureUser), Password: os.Getenv(EnvSecurePassword),
	}
	if k.SASLSSL == "" || k.CAFile == "" || k.Password == "" {
		missing(t, "the secure Kafka broker (scripts/kafka.sh secure start)", "the DRIFTGUARD_TEST_KAFKA_SECURE_* variables it prints")
	}
	return k
}

// SCRAM points cfg at the SASL_SSL listener as user with SCRAM-SHA-512.
func (k SecureKafka) SCRAM(cfg *config.Config, user, password string) {
	cfg.Kafka.Brokers = []string{k.SASLSSL}
	cfg.Kafka.TLS = config.TLS{CAFile: k.CAFile}
	cfg.Kafka.SASL = config.KafkaSASL{Mechanism: config.SASLScramSHA512, Username: user, Password: password}
}

// Admin points cfg at the SASL_SSL listener as the super user.
func (k SecureKafka) Admin(cfg *config.Config) { k.SCRAM(cfg, k.User, k.Password) }

// MutualTLS points cfg at the listener that requires client certificates,
// with the super user's.
func (k SecureKafka) MutualTLS(cfg *config.Config) {
	cfg.Kafka.Brokers = []string{k.MTLS}
	cfg.Kafka.TLS = config.TLS{CAFile: k.CAFile, CertFile: k.CertFile, KeyFile: k.KeyFile}
	cfg.Kafka.SASL = config.KafkaSASL{}
}

// ForeignCA writes the PEM certificate of a CA made now, which signed
// nothing any test server presents, and returns its file: a client that
// trusts only it must refuse the server.
func ForeignCA(t testing.TB) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "a CA no test server uses"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return WriteFile(t, t.TempDir(), "foreign-ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
}
