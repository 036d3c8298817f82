package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ClickHouseTLS configures TLS to ClickHouse's native port. TLS is on when
// Enabled is set or any other field is: a CA file or a client certificate
// only makes sense over TLS.
type ClickHouseTLS struct {
	// Enabled turns TLS on with the system's roots when no CAFile is given
	// (ClickHouse Cloud, a server with a public certificate).
	Enabled bool `yaml:"enabled" env:"DRIFTGUARD_CLICKHOUSE_TLS_ENABLED"`
	// CAFile is a PEM bundle of the CAs the server's certificate is
	// checked against, instead of the system's roots.
	CAFile string `yaml:"ca_file" env:"DRIFTGUARD_CLICKHOUSE_TLS_CA_FILE"`
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// servers that require one (mTLS); both or neither.
	CertFile string `yaml:"cert_file" env:"DRIFTGUARD_CLICKHOUSE_TLS_CERT_FILE"`
	KeyFile  string `yaml:"key_file" env:"DRIFTGUARD_CLICKHOUSE_TLS_KEY_FILE"`
	// ServerName is the name the server's certificate must carry. Default:
	// the host of the address dialled.
	ServerName string `yaml:"server_name" env:"DRIFTGUARD_CLICKHOUSE_TLS_SERVER_NAME"`
}

// On reports whether connections use TLS.
func (t ClickHouseTLS) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != ""
}

// Config is the client's TLS configuration, nil when TLS is off. Its
// errors name the setting at fault.
func (t ClickHouseTLS) Config() (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	return ClientTLS("clickhouse.tls", t.CAFile, t.CertFile, t.KeyFile, t.ServerName)
}

// ClientTLS builds a client's TLS configuration from PEM files: caFile
// replaces the system's roots when set, certFile and keyFile are a client
// certificate (both or neither), serverName overrides the dialled host.
// Errors name the setting under path (e.g. "clickhouse.tls") at fault.
func ClientTLS(path, caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("in %s.ca_file: %w", path, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("in %s.ca_file: %s holds no PEM certificate", path, caFile)
		}
	}
	switch {
	case certFile != "" && keyFile == "":
		return nil, fmt.Errorf("in %s.cert_file: a client certificate needs its key in %s.key_file", path, path)
	case certFile == "" && keyFile != "":
		return nil, fmt.Errorf("in %s.key_file: a client key needs its certificate in %s.cert_file", path, path)
	case certFile != "":
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("in %s.cert_file and %s.key_file: %w", path, path, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Addrs returns the addresses of clickhouse.addr, a comma-separated list.
func (c ClickHouse) Addrs() []string { return SplitList(c.Addr) }

// validate checks the ClickHouse settings, each error prefixed with its path.
func (c ClickHouse) validate() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("in %s: %s", path, fmt.Sprintf(format, args...)))
	}
	if !validIdent(c.Database) {
		add("clickhouse.database", "%q must be letters, digits and underscores, starting with a letter", c.Database)
	}
	if len(c.Addrs()) == 0 {
		add("clickhouse.addr", "is empty: give host:port, or several separated by commas")
	}
	for _, a := range c.Addrs() {
		if !strings.Contains(a, ":") {
			add("clickhouse.addr", "%q needs host:port", a)
		}
	}
	if c.Username == "" {
		add("clickhouse.username", "is empty")
	}
	if c.PasswordFile != "" {
		if c.Password != "" {
			add("clickhouse.password_file", "is set, and so is clickhouse.password (DRIFTGUARD_CLICKHOUSE_PASSWORD): give one")
		} else if _, err := readSecretFile(c.PasswordFile); err != nil {
			add("clickhouse.password_file", "%v", err)
		}
	}
	if _, err := c.TLS.Config(); err != nil {
		errs = append(errs, err)
	}
	if c.Cluster != "" && !validIdent(c.Cluster) {
		add("clickhouse.cluster", "%q must be letters, digits and underscores, starting with a letter (a cluster of the servers' remote_servers)", c.Cluster)
	}
	return errs
}

// readPasswordFile sets Password from PasswordFile, when one is given.
func (c *ClickHouse) readPasswordFile() error {
	if c.PasswordFile == "" {
		return nil
	}
	p, err := readSecretFile(c.PasswordFile)
	if err != nil {
		return fmt.Errorf("in clickhouse.password_file: %w", err)
	}
	c.Password = p
	return nil
}

// readSecretFile reads a secret mounted as a file, without the trailing
// newline that editors and `echo` leave.
func readSecretFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	secret := strings.TrimRight(string(data), "\r\n")
	if secret == "" {
		return "", errors.New(path + " is empty")
	}
	return secret, nil
}
