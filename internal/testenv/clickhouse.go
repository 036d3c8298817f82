package testenv

import (
	"os"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
)

// Environment variables of the test server's secure native port
// (scripts/clickhouse.sh start): its address, the CA that signed its
// certificate, and a user with a password.
const (
	EnvClickHouseSecure   = "DRIFTGUARD_TEST_CLICKHOUSE_SECURE"
	EnvClickHouseCA       = "DRIFTGUARD_TEST_CLICKHOUSE_CA"
	EnvClickHouseUser     = "DRIFTGUARD_TEST_CLICKHOUSE_USER"
	EnvClickHousePassword = "DRIFTGUARD_TEST_CLICKHOUSE_PASSWORD"
)

// ClickHouseSecure returns the settings that reach the test server over
// TLS as its password user: clickhouse.addr, clickhouse.tls.ca_file,
// clickhouse.username and clickhouse.password, the rest default.
func ClickHouseSecure(t testing.TB) config.ClickHouse {
	t.Helper()
	env := map[string]string{}
	for _, name := range []string{EnvClickHouseSecure, EnvClickHouseCA, EnvClickHouseUser, EnvClickHousePassword} {
		if env[name] = os.Getenv(name); env[name] == "" {
			missing(t, "ClickHouse's secure port", name)
		}
	}
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.ClickHouse
	c.Addr = env[EnvClickHouseSecure]
	c.TLS.CAFile = env[EnvClickHouseCA]
	c.Username = env[EnvClickHouseUser]
	c.Password = env[EnvClickHousePassword]
	return c
}
