package realtime_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// TestBrowserHardeningHeaders: the page's policy allows what it loads and
// no framing; every answer, the API's included, refuses sniffing and
// Referer, and the API's policy loads nothing.
func TestBrowserHardeningHeaders(t *testing.T) {
	brokers := testenv.Fake(t)
	e := newBridgeEnv(t, brokers, nil, "presence")
	tok := e.token("alice", "presence")
	page := []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"}
	api := []string{"default-src 'none'", "frame-ancestors 'none'"}
	for _, c := range []struct {
		path, tok string
		status    int
		policy    []string
	}{
		{"/", "", http.StatusOK, page},
		{"/app.js", "", http.StatusOK, page},
		{"/style.css", "", http.StatusOK, page},
		{"/v1/streams/presence/snapshot", tok, http.StatusOK, api},
		{"/v1/streams/presence/snapshot", "", http.StatusUnauthorized, api},
		{"/v1/streams/presence/entities/nobody", tok, http.StatusNotFound, api},
	} {
		resp, _ := e.fetch(c.path, c.tok)
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", c.path, resp.StatusCode, c.status)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, directive := range c.policy {
			if !strings.Contains(csp, directive) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", c.path, csp, directive)
			}
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q", c.path, got)
		}
		if got := resp.Header.Get("Referrer-Policy"); got != "no-referrer" {
			t.Errorf("%s: Referrer-Policy %q", c.path, got)
		}
	}

	// The bridge's listener refuses a request with both framings and
	// closes its connection.
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a broken server must not hang the test
	_, _ = io.WriteString(c, "POST /v1/streams/presence/entities/x/typing HTTP/1.1\r\nHost: bridge\r\nAuthorization: Bearer "+tok+
		"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: bridge\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Fatalf("request with both framings: %d (close %v), want 400 and Connection: close", resp.StatusCode, resp.Close)
	}
	if b, err := br.ReadByte(); err == nil {
		t.Fatalf("the connection stayed open (read %q)", b)
	}
}

// TestFrameAncestorsConfigured: bridge.frame_ancestors names the pages
// that may frame the bridge's page.
func TestFrameAncestorsConfigured(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(cfg *config.Config) {
		cfg.Bridge.FrameAncestors = []string{"'self'", "https://portal.example.com"}
	}, "presence")
	resp, _ := e.fetch("/", "")
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'self' https://portal.example.com") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
}
