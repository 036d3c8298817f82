package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/driftguard/driftguard/internal/testenv"
)

// holder runs connections that each hold what they can of the edge, from
// the given local addresses (each one source to the edge), opening each
// again a pause after the edge ends it, until ctx ends.
type holder struct {
	addr, path string
	sources    []net.IP
	pause      time.Duration

	wg     sync.WaitGroup
	mu     sync.Mutex
	report testenv.FloodHeld
}

func newHolder(rawURL string, sources []net.IP, pause time.Duration) *holder {
	host, path, _ := strings.Cut(strings.TrimPrefix(rawURL, "http://"), "/")
	return &holder{addr: host, path: "/" + path, sources: sources, pause: pause, report: testenv.FloodHeld{Answers: map[string]int64{}}}
}

// start runs perSource connections from every source, each held by hold:
// it returns the edge's answer (0 for none) and whether the connection was
// still held when ctx ended.
func (h *holder) start(ctx context.Context, perSource int, hold func(ctx context.Context, c net.Conn, n int) (status int, heldAtEnd bool)) {
	for _, src := range h.sources {
		for i := range perSource {
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				h.loop(ctx, src, i, hold)
			}()
		}
	}
}

func (h *holder) loop(ctx context.Context, src net.IP, i int, hold func(context.Context, net.Conn, int) (int, bool)) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", h.addr)
		h.mu.Lock()
		h.report.Dials++
		if err != nil && ctx.Err() == nil {
			h.report.DialErrors++
		}
		h.mu.Unlock()
		if err == nil {
			opened := time.Now()
			// Reads end with the attack at the latest.
			deadline, _ := ctx.Deadline()
			_ = c.SetDeadline(deadline)
			status, heldAtEnd := hold(ctx, c, i)
			open := time.Since(opened).Seconds()
			_ = c.Close()
			h.mu.Lock()
			if heldAtEnd {
				h.report.HeldAtEnd++
			} else {
				h.report.Answers[strconv.Itoa(status)]++
				h.report.LongestOpen = max(h.report.LongestOpen, open)
			}
			h.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(h.pause):
		}
	}
}

func (h *holder) wait() testenv.FloodHeld {
	h.wg.Wait()
	return h.report
}

// answer reads the edge's answer on c, or its close: the status (0 for a
// close without an answer), and true when neither came before the attack
// ended.
func answer(ctx context.Context, c net.Conn, r *bufio.Reader) (int, bool) {
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || ctx.Err() != nil {
			return 0, true
		}
		return 0, false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, false
}

// slowBody sends the head of a webhook whose signature headers are well
// formed (and forged: the edge finds out only from the body), declaring
// length bytes, then one byte of the body, and waits for the edge to end
// it.
func (h *holder) slowBody(length int) func(context.Context, net.Conn, int) (int, bool) {
	return func(ctx context.Context, c net.Conn, n int) (int, bool) {
		sig := make([]byte, 32)
		_, _ = rand.Read(sig)
		head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
			"webhook-id: msg_slow_%d\r\nwebhook-timestamp: %d\r\nwebhook-signature: v1,%s\r\n\r\n{",
			h.path, length, n, time.Now().Unix(), base64.StdEncoding.EncodeToString(sig))
		if _, err := io.WriteString(c, head); err != nil {
			return 0, false
		}
		return answer(ctx, c, bufio.NewReader(c))
	}
}

// idle holds a connection open without a request, or, when asking, after
// one request for a stream that does not exist (answered 404), until the
// edge closes it; the status is the 404's (0 when silent).
func (h *holder) idle(ctx context.Context, c net.Conn, n int) (int, bool) {
	r := bufio.NewReader(c)
	status := 0
	if n%2 == 0 {
		if _, err := io.WriteString(c, "GET /v1/webhooks/no-such-stream HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
			return 0, false
		}
		var heldAtEnd bool
		if status, heldAtEnd = answer(ctx, c, r); heldAtEnd {
			return status, true
		}
	}
	// Then nothing, until the edge closes the connection.
	if _, err := r.ReadByte(); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || ctx.Err() != nil {
			return status, true
		}
	}
	return status, false
}

// parseSources reads -sources: local addresses, comma-separated.
func parseSources(s string) []net.IP {
	var out []net.IP
	for _, a := range strings.Split(s, ",") {
		ip := net.ParseIP(strings.TrimSpace(a))
		if ip == nil {
			fmt.Fprintf(os.Stderr, "flood: -sources: %q is not an address\n", a)
			os.Exit(2)
		}
		out = append(out, ip)
	}
	return out
}

// parseSlowBodies reads -slow-bodies: COUNTxLENGTH, comma-separated.
func parseSlowBodies(s string) map[int]int {
	out := map[int]int{}
	if s == "" {
		return out
	}
	for _, group := range strings.Split(s, ",") {
		count, length, ok := strings.Cut(group, "x")
		n, err1 := strconv.Atoi(count)
		l, err2 := strconv.Atoi(length)
		if !ok || err1 != nil || err2 != nil {
			fmt.Fprintf(os.Stderr, "flood: -slow-bodies: %q is not COUNTxLENGTH\n", group)
			os.Exit(2)
		}
		out[l] += n
	}
	return out
}
