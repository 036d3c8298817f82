package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestReadyzReportsEveryFailingCheck(t *testing.T) {
	ops := NewOps()
	ops.AddReadiness("kafka", func(context.Context) error { return nil })
	mux := http.NewServeMux()
	ops.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d with every check passing", code)
	}
	ops.AddReadiness("clickhouse", func(context.Context) error { return errors.New("connection refused") })
	// A check that never answers must not hold /readyz past its deadline.
	ops.AddReadiness("stuck", func(ctx context.Context) error { <-ctx.Done(); time.Sleep(time.Hour); return nil })
	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "clickhouse: connection refused") || !strings.Contains(body, "stuck: no answer in time") || strings.Contains(body, "kafka") {
		t.Fatalf("/readyz %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d", code)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics %d", code)
	}
}

// Go's profiles are served only when asked for: a CPU profile costs the
// process while it runs.
func TestProfilesServedOnlyWhenTurnedOn(t *testing.T) {
	for _, on := range []bool{false, true} {
		ops := NewOps()
		ops.Profiles = on
		mux := http.NewServeMux()
		ops.Register(mux)
		srv := httptest.NewServer(mux)
		resp, err := http.Get(srv.URL + "/debug/pprof/profile?seconds=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		switch {
		case !on && resp.StatusCode != http.StatusNotFound:
			t.Fatalf("profiles off: /debug/pprof/profile answered %d", resp.StatusCode)
		case on && (resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/octet-stream" || len(body) == 0):
			t.Fatalf("profiles on: /debug/pprof/profile answered %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
	}
}
