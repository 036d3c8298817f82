package realtime_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// The operational endpoints are on the operations listener only: the
// public port answers them 404, as any path it does not serve.
func TestOperationsEndpointsOnlyOnTheOperationsPort(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "presence")
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if resp, _ := e.fetch(path, ""); resp.StatusCode != http.StatusNotFound {
			t.Errorf("public %s: %d, want 404", path, resp.StatusCode)
		}
		resp, err := http.Get(e.opsURL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("operations %s: %d, want 200", path, resp.StatusCode)
		}
	}
}

// A request without a valid token is answered 401 and its connection
// closed: a client without a token keeps no connection of the bridge.
func TestUnauthorizedClosesItsConnection(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "presence")
	for _, tok := range []string{"", "not-a-token", e.token("alice", "presence") + "x"} {
		resp, _ := e.fetch("/v1/streams/presence/snapshot", tok)
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Errorf("token %q: %d, Connection: close %v; want 401 and the connection closed", tok, resp.StatusCode, resp.Close)
		}
	}
}

// One token holds at most bridge.max_streams_per_token streams; one more
// is 429 too_many_streams with a Retry-After, while another token of the
// same user still gets in, and a stream that ends frees its place.
func TestStreamsPerToken(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) { c.Bridge.MaxStreamsPerToken = 2 }, "presence")
	tok := e.token("alice", "presence")
	cursor, _ := e.snapshot("presence", tok, 100)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	first, status := e.open(ctx, "presence", tok, cursor, "")
	if status != http.StatusOK {
		t.Fatalf("first stream: %d", status)
	}
	if _, status := e.open(ctx, "presence", tok, cursor, ""); status != http.StatusOK {
		t.Fatalf("second stream: %d", status)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/v1/streams/presence/events?cursor="+cursor, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	p := decodeProblem(t, resp)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.HasSuffix(p.Type, "too_many_streams") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third stream on one token: %d %+v Retry-After %q, want 429 too_many_streams with a Retry-After", resp.StatusCode, p, resp.Header.Get("Retry-After"))
	}
	other, err := realtime.Sign([]byte(secret), "alice", []string{"presence"}, time.Now().Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, status := e.open(ctx, "presence", other, cursor, ""); status != http.StatusOK {
		t.Errorf("a stream on another token of the user: %d, want 200", status)
	}
	first.close()
	testenv.WaitFor(t, e.ctx, "the ended stream's place freed", func() bool {
		s, status := e.open(ctx, "presence", tok, cursor, "")
		if s != nil {
			s.close()
		}
		return status == http.StatusOK
	})
}

// A source sends at most bridge.source_rate requests a second, in bursts
// of its burst: one more is 429 rate_limited with a Retry-After, its
// connection closed, and counted.
func TestSourceRate(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) {
		c.Bridge.SourceRate = config.TokenBucket{Rate: 0.5, Burst: 3}
	}, "presence")
	tok := e.token("alice", "presence")
	for i := range 3 {
		if resp, body := e.fetch("/v1/streams/presence/snapshot", tok); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d of the burst: %d %s", i+1, resp.StatusCode, body)
		}
	}
	resp, body := e.fetch("/v1/streams/presence/snapshot", tok)
	var p problemBody
	_ = json.Unmarshal(body, &p)
	wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || !strings.HasSuffix(p.Type, "rate_limited") || wait < 1 || !resp.Close {
		t.Errorf("over the rate: %d %+v, Retry-After %q, closed %v; want 429 rate_limited, a Retry-After, the connection closed",
			resp.StatusCode, p, resp.Header.Get("Retry-After"), resp.Close)
	}
	if got := metricValue(t, e, "driftguard_bridge_rate_limited_total"); got != 1 {
		t.Errorf("driftguard_bridge_rate_limited_total %v, want 1", got)
	}
}

// One source holds at most bridge.max_tcp_connections_per_source
// connections: one more is closed as it is accepted. A connection idle
// for bridge.idle_timeout after its request is closed too.
func TestConnectionsPerSourceAndIdle(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) {
		c.Bridge.MaxTCPConnectionsPerSource = 2
		c.Bridge.IdleTimeout = time.Second
	}, "presence")
	addr := strings.TrimPrefix(e.url, "http://")
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	closed := func(c net.Conn, r *bufio.Reader) bool {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := r.ReadByte()
		return err == io.EOF || err != nil && !isTimeout(err)
	}
	a, ar := dial()
	dial()
	third, tr := dial()
	if !closed(third, tr) {
		t.Errorf("a third connection from one source with a cap of 2 was not closed")
	}
	// The first connection asks once, then idles past the timeout.
	if _, err := io.WriteString(a, "GET / HTTP/1.1\r\nHost: bridge\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(ar, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the page: %d", resp.StatusCode)
	}
	if !closed(a, ar) {
		t.Errorf("a keep-alive connection idle past bridge.idle_timeout (1s) was not closed within 10s")
	}
	if got := metricValue(t, e, `driftguard_bridge_connections_shed_total{reason="source_limit"}`); got < 1 {
		t.Errorf("connections shed for the source limit: %v, want at least 1", got)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// An open stream ends when its token expires, plus bridge.tokens.leeway:
// with `event: reset` and reason token_expired, never before.
func TestTokenExpiryEndsAnOpenStream(t *testing.T) {
	const leeway = time.Second
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) { c.Bridge.Tokens.Leeway = leeway }, "presence")
	cursor, _ := e.snapshot("presence", e.token("alice", "presence"), 100)
	// exp counts whole seconds.
	exp := time.Unix(time.Now().Add(3*time.Second).Unix(), 0)
	tok, err := realtime.Sign([]byte(secret), "alice", []string{"presence"}, exp)
	if err != nil {
		t.Fatal(err)
	}
	s, status := e.open(e.ctx, "presence", tok, cursor, "")
	if status != http.StatusOK {
		t.Fatalf("events: %d", status)
	}
	defer s.close()
	e.publish("presence", "alice", 1, `{"online":true}`)
	for {
		ev, ok := s.next(t, 30*time.Second)
		if !ok {
			t.Fatalf("the stream ended without event: reset")
		}
		if ev.event != "reset" {
			continue
		}
		if ev.data != `{"reason":"token_expired"}` {
			t.Errorf("reset %s, want reason token_expired", ev.data)
		}
		if end := exp.Add(leeway); time.Now().Before(end) {
			t.Errorf("the stream ended at %s, before the token's expiry plus the leeway (%s)", time.Now().Format(time.StampMilli), end.Format(time.StampMilli))
		}
		break
	}
	if _, ok := <-s.events; ok {
		t.Errorf("an event after the reset")
	}
}
