package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

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
	if _, err := c.TLS.Config("clickhouse.tls"); err != nil {
		errs = append(errs, err)
	}
	if c.Cluster != "" && !validIdent(c.Cluster) {
		add("clickhouse.cluster", "%q must be letters, digits and underscores, starting with a letter (a cluster of the servers' remote_servers)", c.Cluster)
	}
	errs = append(errs, c.Retention.validate()...)
	return errs
}

// ReadSecretFile reads a secret mounted as a file (a password, a token),
// without the trailing newline that editors and `echo` leave; an empty one
// is an error.
func ReadSecretFile(path string) (string, error) {
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
