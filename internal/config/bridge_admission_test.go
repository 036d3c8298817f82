package config_test

import (
	"strings"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
)

// The admission keys: defaults when unset, the burst following the rate,
// and each invalid value refused with its path.
func TestBridgeAdmissionKeys(t *testing.T) {
	load := func(yaml string, environ ...string) (*config.Config, error) { return loadYAML(t, yaml, environ...) }
	cfg, err := load("bridge: {}")
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.Bridge; b.MaxConnections != 20000 || b.MaxConnectionsPerUser != 64 || b.AcceptRate != 1000 || b.AcceptBurst != 1000 || b.CatchupReaders != 2 {
		t.Fatalf("defaults: %+v", b)
	}
	if cfg, err = load("bridge: {accept_rate: 2.5}"); err != nil || cfg.Bridge.AcceptBurst != 3 {
		t.Fatalf("a burst of one second's worth, rounded up: %v, %v", cfg.Bridge.AcceptBurst, err)
	}
	for yaml, want := range map[string]string{
		"bridge: {max_connections: -1}":                               "in bridge.max_connections: must be at least 1, got -1",
		"bridge: {max_connections: 10, max_connections_per_user: 11}": "in bridge.max_connections_per_user: must be from 1 to bridge.max_connections (10), got 11",
		"bridge: {accept_rate: -5}":                                   "in bridge.accept_rate: must be a positive number",
		"bridge: {accept_burst: -1}":                                  "in bridge.accept_burst: must be at least 1, got -1",
		"bridge: {catchup_readers: -2}":                               "in bridge.catchup_readers: must be at least 1, got -2",
	} {
		if _, err := load(yaml); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yaml, err, want)
		}
	}
}
