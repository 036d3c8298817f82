package ingest

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// rawRequest is d as the bytes of an HTTP/1.1 request head, with its
// Content-Length, and its body apart.
func (d delivery) rawRequest() (head string, body []byte) {
	head = fmt.Sprintf("POST /v1/webhooks/%s HTTP/1.1\r\nHost: edge\r\nContent-Type: %s\r\nContent-Length: %d\r\n", d.stream, d.contentType, len(d.body))
	for name, values := range d.header {
		for _, v := range values {
			head += name + ": " + v + "\r\n"
		}
	}
	return head + "\r\n", d.body
}

// A body that falls behind http.min_body_rate after its first second is
// cut off with 408 too_slow and its connection closed, holding no more of
// the budget meanwhile than its first chunk, not its declared length; one
// that keeps the rate is accepted, though it takes longer than its first
// second.
func TestBodySlowerThanTheMinimumRate(t *testing.T) {
	_, presence := presenceConfig(t, specSecret)
	const rate = 2000
	h, err := NewHandler([]*config.Stream{presence}, &recordingProducer{next: map[int32]int64{}},
		Options{Now: fixedClock, MinBodyRate: rate, ReadTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Register(mux)
	addr := serveProduction(t, mux)[len("http://"):]
	loopback := netip.MustParseAddr("127.0.0.1")
	send := func(id string, size int, pause time.Duration, stallAfter int) (status int, closed bool, took time.Duration) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		head, body := presenceDelivery(t, id, 1, size).rawRequest()
		start := time.Now()
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(body); i += 500 {
			if stallAfter > 0 && i >= stallAfter {
				break
			}
			if _, err := c.Write(body[i:min(i+500, len(body))]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(pause)
		}
		if stallAfter > 0 {
			// Stalled: what the body holds is its first chunk at most.
			if held := h.budget.heldBy(loopback); held > firstChunk {
				t.Errorf("a stalled body of %d bytes, %d sent, holds %d bytes of the budget, over the first chunk (%d)", size, stallAfter, held, firstChunk)
			}
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		resp.Body.Close()
		// ReadResponse takes Connection: close out of the header into Close.
		return resp.StatusCode, resp.Close, time.Since(start)
	}

	// 3,000 bytes at 5,000 a second (500 every 100 ms): over the rate.
	if status, _, _ := send("evt-steady", 3000, 100*time.Millisecond, 0); status != http.StatusAccepted {
		t.Errorf("a body sent at 5000 bytes a second: status %d, want 202", status)
	}
	// 20,000 bytes declared, 500 sent, then nothing: due whole by 11 s,
	// late at its 501st byte, 1.25 s after it started.
	status, closed, took := send("evt-stalled", 20000, 0, 500)
	if status != http.StatusRequestTimeout || !closed {
		t.Errorf("a stalled body: status %d, Connection: close %v; want 408, close", status, closed)
	}
	if took < bodyGrace || took > 5*time.Second {
		t.Errorf("a stalled body was cut off after %s, want after its first second and long before its whole deadline", took.Round(time.Millisecond))
	}
	testenv.WaitFor(t, testenv.Context(t, 10*time.Second), "the budget empty", func() bool { return h.budget.inUse() == 0 })
}
