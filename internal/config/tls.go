package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLS configures a client's TLS: to the Kafka brokers (kafka.tls) and to
// ClickHouse's native port (clickhouse.tls). TLS is on when Enabled is set
// or any other field is: a CA file, a client certificate or a server name
// only makes sense over TLS. Each use names its variables' start with an
// `envprefix` tag (DRIFTGUARD_KAFKA_TLS_, DRIFTGUARD_CLICKHOUSE_TLS_).
type TLS struct {
	// Enabled turns TLS on, with the system's roots when no CAFile is
	// given (a managed service with a public certificate).
	Enabled bool `yaml:"enabled" env:"ENABLED"`
	// CAFile is a PEM bundle of the CAs the server's certificate is
	// checked against, instead of the system's roots.
	CAFile string `yaml:"ca_file" env:"CA_FILE"`
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that require one (mTLS); both or neither.
	CertFile string `yaml:"cert_file" env:"CERT_FILE"`
	KeyFile  string `yaml:"key_file" env:"KEY_FILE"`
	// ServerName is the name the server's certificate must carry. Default:
	// the host of the address dialled.
	ServerName string `yaml:"server_name" env:"SERVER_NAME"`
}

// On reports whether connections use TLS.
func (t TLS) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != ""
}

// Config is the client's TLS configuration, nil when TLS is off; path is
// the settings' config path (kafka.tls, clickhouse.tls), which its errors
// name.
func (t TLS) Config(path string) (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("in %s.ca_file: %w", path, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("in %s.ca_file: %s holds no PEM certificate", path, t.CAFile)
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return nil, fmt.Errorf("in %s.cert_file: a client certificate needs its key in %s.key_file", path, path)
	case t.CertFile == "" && t.KeyFile != "":
		return nil, fmt.Errorf("in %s.key_file: a client key needs its certificate in %s.cert_file", path, path)
	case t.CertFile != "":
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("in %s.cert_file and %s.key_file: %w", path, path, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
