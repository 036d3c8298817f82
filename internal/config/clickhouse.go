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
	if c.PasswordFile != "" {
		if c.Password != "" {
			add("clickhouse.password_file", "is set, and so is clickhouse.password (DRIFTGUARD_CLICKHOUSE_PASSWORD): give one")
		} else if _, err := readSecretFile(c.PasswordFile); err != nil {
			add("clickhouse.password_file", "%v", err)
		}
	}
	if _, err := c.TLS.Config("clickhouse.tls"); err != nil {
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
