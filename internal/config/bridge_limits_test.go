package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
)

// The public listener's keys: defaults when unset, the per-token cap
// within a lowered per-user one, and each invalid value refused with its
// path.
func TestBridgeLimitKeys(t *testing.T) {
	load := func(yaml string, environ ...string) (*config.Config, error) { return loadYAML(t, yaml, environ...) }
	cfg, err := load("bridge: {}")
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Bridge; b.MaxTCPConnections != 25000 || b.MaxTCPConnectionsPerSource != 4096 || b.IdleTimeout != 20*time.Second ||
		b.MaxStreamsPerToken != 32 || b.SourceRate != (config.TokenBucket{Rate: 1000, Burst: 2000}) {
		t.Fatalf("defaults: %+v", b)
	}
	if cfg, err = load("bridge: {max_connections_per_user: 8}"); err != nil || cfg.Bridge.MaxStreamsPerToken != 8 {
		t.Fatalf("a token's streams within a user's 8: %v, %v", cfg.Bridge.MaxStreamsPerToken, err)
	}
	if cfg, err = load("bridge: {max_tcp_connections: 100, source_rate: {rate: 10}}"); err != nil ||
		cfg.Bridge.MaxTCPConnectionsPerSource != 100 || cfg.Bridge.SourceRate.Burst != 10 {
		t.Fatalf("the per-source cap within the cap, the burst a second's worth: %+v, %v", cfg.Bridge, err)
	}
	for yaml, want := range map[string]string{
		"bridge: {max_tcp_connections: -1}":                                     "in bridge.max_tcp_connections: must be positive, got -1",
		"bridge: {max_tcp_connections: 10, max_tcp_connections_per_source: 11}": "in bridge.max_tcp_connections_per_source: must be from 1 to bridge.max_tcp_connections (10), got 11",
		"bridge: {idle_timeout: 100ms}":                                         "in bridge.idle_timeout: must be at least 1s, got 100ms",
		"bridge: {max_streams_per_token: -3}":                                   "in bridge.max_streams_per_token: must be at least 1, got -3",
		"bridge: {source_rate: {rate: -1}}":                                     "in bridge.source_rate.rate: must be a positive number of requests a second (it is always on), got -1",
		"bridge: {trusted_proxies: [10.0.0.0/8, not-an-address]}":               `bridge.trusted_proxies[1]: "not-an-address" is neither an address nor a CIDR prefix`,
	} {
		if _, err := load(yaml); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yaml, err, want)
		}
	}
}

// loadYAML loads a configuration file holding yaml, with environ.
func loadYAML(t *testing.T, yaml string, environ ...string) (*config.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "driftguard.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return config.Load(path, environ)
}
