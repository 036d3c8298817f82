package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

func TestLoadClickHouseConnectionFromTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	passwordFile := testenv.WriteFile(t, dir, "password", "s3cret\n")
	cfg := mustLoad(t, "", []string{
		"DRIFTGUARD_CLICKHOUSE_ADDR=ch-1:9440, ch-2:9440",
		"DRIFTGUARD_CLICKHOUSE_USERNAME=driftguard",
		"DRIFTGUARD_CLICKHOUSE_PASSWORD_FILE=" + passwordFile,
		"DRIFTGUARD_CLICKHOUSE_TLS_ENABLED=true",
		"DRIFTGUARD_CLICKHOUSE_TLS_SERVER_NAME=ch.example.com",
		"DRIFTGUARD_CLICKHOUSE_CLUSTER=analytics",
	})
	c := cfg.ClickHouse
	checkFields(t, []field{
		{"Addrs()", c.Addrs(), []string{"ch-1:9440", "ch-2:9440"}},
		{"Username", c.Username, "driftguard"},
		// Read from the file, without its newline.
		{"Password", c.Password, "s3cret"},
		{"TLS.On()", c.TLS.On(), true},
		{"Cluster", c.Cluster, "analytics"},
	})
	tlsConfig, err := c.TLS.Config("clickhouse.tls")
	if err != nil || tlsConfig.ServerName != "ch.example.com" || tlsConfig.RootCAs != nil {
		t.Errorf("TLS.Config() = %+v, %v; want server name ch.example.com and the system roots", tlsConfig, err)
	}
	if plain := mustLoad(t, "", nil).ClickHouse; plain.TLS.On() || plain.Cluster != "" {
		t.Errorf("by default TLS is %v and the cluster %q; want plaintext to one server", plain.TLS.On(), plain.Cluster)
	}
}

// Each mistake is refused at load, naming the setting, before anything
// connects.
func TestLoadRefusesClickHouseMistakesNamingTheSetting(t *testing.T) {
	dir := t.TempDir()
	notPEM := testenv.WriteFile(t, dir, "ca.txt", "not a certificate\n")
	missing := filepath.Join(dir, "nothing-here.pem")
	cases := []struct {
		name    string
		environ []string
		want    []string
	}{
		{"certificate without key", []string{"DRIFTGUARD_CLICKHOUSE_TLS_CERT_FILE=" + notPEM},
			[]string{"in clickhouse.tls.cert_file:", "clickhouse.tls.key_file"}},
		{"key without certificate", []string{"DRIFTGUARD_CLICKHOUSE_TLS_KEY_FILE=" + notPEM},
			[]string{"in clickhouse.tls.key_file:", "clickhouse.tls.cert_file"}},
		{"unreadable CA file", []string{"DRIFTGUARD_CLICKHOUSE_TLS_CA_FILE=" + missing},
			[]string{"in clickhouse.tls.ca_file:", missing}},
		{"CA file without a certificate", []string{"DRIFTGUARD_CLICKHOUSE_TLS_CA_FILE=" + notPEM},
			[]string{"in clickhouse.tls.ca_file:", "no PEM certificate"}},
		{"unreadable password file", []string{"DRIFTGUARD_CLICKHOUSE_PASSWORD_FILE=" + missing},
			[]string{"in clickhouse.password_file:", missing}},
		{"password twice", []string{"DRIFTGUARD_CLICKHOUSE_PASSWORD=x", "DRIFTGUARD_CLICKHOUSE_PASSWORD_FILE=" + notPEM},
			[]string{"in clickhouse.password_file:", "DRIFTGUARD_CLICKHOUSE_PASSWORD"}},
		{"cluster not an identifier", []string{"DRIFTGUARD_CLICKHOUSE_CLUSTER=my-cluster; DROP"},
			[]string{"in clickhouse.cluster:", "my-cluster; DROP"}},
		{"address without port", []string{"DRIFTGUARD_CLICKHOUSE_ADDR=ch-1:9000,ch-2"},
			[]string{"in clickhouse.addr:", `"ch-2" needs host:port`}},
		{"TLS switch not a bool", []string{"DRIFTGUARD_CLICKHOUSE_TLS_ENABLED=yes please"},
			[]string{"DRIFTGUARD_CLICKHOUSE_TLS_ENABLED"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load("", tc.environ)
			if err == nil {
				t.Fatal("Load accepted the config")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}
