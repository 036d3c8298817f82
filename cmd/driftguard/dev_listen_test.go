package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
)

// dev serves loopback alone unless --public, and --public never with the
// public demo secret; the start log says which.
func TestDevListensOnLoopbackUnlessPublic(t *testing.T) {
	load := func(httpAddr string, secret bool) *config.Config {
		cfg, err := config.Load("", nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.HTTP.Addr = httpAddr
		if secret {
			for _, s := range cfg.Streams {
				s.Signature.Secrets = []string{"whsec_" + strings.Repeat("A", 44)}
			}
		}
		return cfg
	}
	for _, c := range []struct {
		addr        string
		public, own bool
		want        string // in the scope, or in the error when it starts with "error: "
	}{
		{"127.0.0.1:8080", false, false, "loopback only"},
		{"[::1]:8080", false, false, "loopback only"},
		{"localhost:8080", false, false, "loopback only"},
		{"0.0.0.0:8080", false, true, "error: pass --public"},
		{":8080", false, true, "error: http.addr :8080 (DRIFTGUARD_HTTP_ADDR)"},
		{"0.0.0.0:8080", true, false, "error: would take the public demo secret"},
		{"0.0.0.0:8080", true, true, "beyond loopback (--public): http.addr 0.0.0.0:8080"},
	} {
		scope, err := devAddrs(load(c.addr, c.own), c.public)
		if want, isErr := strings.CutPrefix(c.want, "error: "); isErr {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s public=%v: %v, want an error with %q", c.addr, c.public, err, want)
			}
			continue
		}
		if err != nil || !strings.Contains(scope, c.want) {
			t.Errorf("%s public=%v: %q, %v, want %q", c.addr, c.public, scope, err, c.want)
		}
	}

	// dev itself refuses before it starts anything.
	var logs bytes.Buffer
	err := dev(context.Background(), load("0.0.0.0:0", false), devOptions{NoSink: true, Out: &logs, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil || !strings.Contains(err.Error(), "--public") {
		t.Errorf("dev on 0.0.0.0: %v", err)
	}
}
