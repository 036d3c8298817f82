package realtime_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The caps through HTTP: a user's third stream is 429
// too_many_connections, the bridge's fourth 503 full, each problem+json
// with a Retry-After of whole seconds; a stream that ends frees its place;
// the outcomes are counted (resumed once live, gone for a 410, refused).
func TestAdmissionCapsOverHTTP(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) {
		c.Bridge.MaxConnections, c.Bridge.MaxConnectionsPerUser = 3, 2
	}, "presence")
	e.publish("presence", "u1", 1, `{"presence":"ONLINE"}`)
	ann, ben, cat := e.token("ann", "presence"), e.token("ben", "presence"), e.token("cat", "presence")
	cursor, _ := e.snapshot("presence", ann, 10)
	var open []*sse
	for _, tok := range []string{ann, ann, ben} {
		s, status := e.open(e.ctx, "presence", tok, cursor, "")
		if status != http.StatusOK {
			t.Fatalf("events: %d", status)
		}
		open = append(open, s)
	}
	defer func() {
		for _, s := range open {
			s.close()
		}
	}()
	refused(t, e, ann, cursor, http.StatusTooManyRequests, "too_many_connections")
	refused(t, e, cat, cursor, http.StatusServiceUnavailable, "full")

	open[0].close()
	testenv.WaitFor(t, e.ctx, "cat gets in once one of ann's streams ended", func() bool {
		s, status := e.open(e.ctx, "presence", cat, cursor, "")
		if status == http.StatusOK {
			open = append(open, s)
		}
		return status == http.StatusOK
	})
	open[1].close()
	testenv.WaitFor(t, e.ctx, "a place for a cursor that is gone", func() bool {
		return e.get("/v1/streams/presence/events?cursor=AAAA", ann, nil) == http.StatusGone
	})
	testenv.WaitFor(t, e.ctx, "the streams live", func() bool {
		resumed, _ := e.metric("driftguard_bridge_reconnects_total", "outcome", "resumed")
		live, _ := e.metric("driftguard_bridge_reconnect_live_seconds")
		return resumed >= 4 && live == resumed
	})
	for outcome, least := range map[string]float64{"gone": 1, "refused": 2} {
		if n, _ := e.metric("driftguard_bridge_reconnects_total", "outcome", outcome); n < least {
			t.Errorf("reconnects %s: %v, want at least %v", outcome, n, least)
		}
	}
	for reason, least := range map[string]float64{"full": 1, "too_many_connections": 1} {
		if n, _ := e.metric("driftguard_bridge_admission_refused_total", "reason", reason); n < least {
			t.Errorf("refused %s: %v, want at least %v", reason, n, least)
		}
	}
}

// Over the accept rate: the stream after the burst is 503 busy with a
// Retry-After.
func TestAcceptRateOverHTTP(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) {
		c.Bridge.AcceptRate, c.Bridge.AcceptBurst = 0.01, 1
	}, "presence")
	tok := e.token("ann", "presence")
	cursor, _ := e.snapshot("presence", tok, 10)
	s, status := e.open(e.ctx, "presence", tok, cursor, "")
	if status != http.StatusOK {
		t.Fatalf("events: %d", status)
	}
	defer s.close()
	refused(t, e, tok, cursor, http.StatusServiceUnavailable, "busy")
}

// refused opens an events stream that admission must refuse with status
// and problem type kind, and a Retry-After of 1 to 60 seconds.
func refused(t *testing.T, e *bridgeEnv, tok, cursor string, status int, kind string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/v1/streams/presence/events?cursor="+cursor, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := decodeProblem(t, resp)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != status || p.Type != problem.TypeBase+kind || resp.Header.Get("Content-Type") != "application/problem+json" || err != nil || retry < 1 || retry > 60 {
		t.Fatalf("got %d %+v (%s), Retry-After %q; want %d %s with a Retry-After of 1 to 60 s",
			resp.StatusCode, p, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"), status, kind)
	}
}
