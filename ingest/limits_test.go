package ingest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// heldProducer keeps every record's promise until release, as a broker
// that stopped acking would.
type heldProducer struct {
	mu       sync.Mutex
	promises []func()
}

func (p *heldProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.promises = append(p.promises, func() { promise(r, nil) })
}

func (p *heldProducer) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.promises)
}

// release acks every record held.
func (p *heldProducer) release() {
	p.mu.Lock()
	promises := p.promises
	p.promises = nil
	p.mu.Unlock()
	for _, ack := range promises {
		ack()
	}
}

// countingBody is a request body that counts the bytes read from it.
type countingBody struct {
	r    io.Reader
	read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return nil }

// request is d as the server would hand it to the handler, from peer, its
// body counted; chunked drops the length.
func (d delivery) request(peer string) (*http.Request, *countingBody) {
	body := &countingBody{r: bytes.NewReader(d.body)}
	req := httptest.NewRequest(http.MethodPost, "/v1/webhooks/"+d.stream, body)
	req.ContentLength = int64(len(d.body))
	if d.chunked {
		req.ContentLength = -1
	}
	req.Header = d.header.Clone()
	req.Header.Set("Content-Type", d.contentType)
	req.RemoteAddr = peer
	return req, body
}

// serveDirect runs the handler on req and returns the recorder.
func serveDirect(h *Handler, req *http.Request) *httptest.ResponseRecorder {
	mux := http.NewServeMux()
	h.Register(mux)
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, req)
	return w
}

// problemOf checks that w holds a problem of w's status and returns its
// type.
func problemOf(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	return checkProblem(t, reply{status: w.Code, header: w.Header(), body: w.Body.Bytes()}).Type
}

// presenceDelivery is a signed presence webhook of event id, with its body
// padded to size bytes (0: unpadded).
func presenceDelivery(t testing.TB, id string, version int64, size int) delivery {
	body := testenv.Presence{EventID: id, User: "alice", Version: version}.Body()
	if pad := size - len(body); pad > 0 {
		body = append(body[:len(body)-1], fmt.Sprintf(`,"pad":"%s"}`, bytes.Repeat([]byte("x"), max(0, pad-10)))...)
	}
	return signedDelivery(t, specSecret, "msg_"+id, body)
}

// While a broker acks nothing, the bodies of records answered 503 stay in
// the budget until the producer lets them go; once the budget is full, a
// request is answered 503 with Retry-After without a byte of its body
// read, and counted; when the acks come, the budget empties and the edge
// accepts again.
func TestOverBudgetIsRefusedBeforeTheBodyIsRead(t *testing.T) {
	_, presence := presenceConfig(t, specSecret)
	producer := &heldProducer{}
	body := len(presenceDelivery(t, "evt-size", 1, 2000).body)
	// Bodies of this size may hold three quarters of the budget: four of
	// them, and not five.
	h, err := NewHandler([]*config.Stream{presence}, producer, Options{Now: fixedClock, ProduceTimeout: 50 * time.Millisecond,
		MaxInFlightBytes: int64(6 * body)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		req, _ := presenceDelivery(t, fmt.Sprintf("evt-held-%d", i), int64(i+1), 2000).request("192.0.2.1:1000")
		if w := serveDirect(h, req); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("held %d: status %d, want 503 at the produce deadline", i, w.Code)
		}
	}
	if got := h.budget.inUse(); got != int64(4*body) {
		t.Fatalf("%d bytes held after four unacked records of %d, want %d", got, body, 4*body)
	}
	req, counted := presenceDelivery(t, "evt-refused", 9, 2000).request("192.0.2.1:1000")
	w := serveDirect(h, req)
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("over the budget: status %d, want 503", w.Code)
	}
	if n := counted.read.Load(); n != 0 {
		t.Errorf("over the budget, %d bytes of the body were read, want none", n)
	}
	if s, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("over the budget: Retry-After %q, want whole seconds", w.Header().Get("Retry-After"))
	}
	if got := problemOf(t, w); got != "https://driftguard.dev/problems/overloaded" {
		t.Errorf("problem type %q", got)
	}
	if producer.held() != 4 {
		t.Errorf("the refused request reached the producer")
	}

	producer.release()
	if got := h.budget.inUse(); got != 0 {
		t.Fatalf("%d bytes held after every record was acked", got)
	}
	req, _ = presenceDelivery(t, "evt-after", 10, 2000).request("192.0.2.1:1000")
	go func() {
		for producer.held() == 0 {
			time.Sleep(time.Millisecond)
		}
		producer.release()
	}()
	if w := serveDirect(h, req); w.Code != http.StatusAccepted {
		t.Errorf("after the acks: status %d, want 202; %s", w.Code, w.Body)
	}
}

// A body of unknown length takes from the budget as it is read: one that
// outgrows the room left is cut off with 503 and its connection closed,
// having been read no further than the room; a shorter one is accepted.
func TestChunkedBodyCountsAsRead(t *testing.T) {
	_, presence := presenceConfig(t, specSecret)
	// Bodies of unknown length may hold three quarters: 48 KiB of 64.
	h, err := NewHandler([]*config.Stream{presence}, &recordingProducer{next: map[int32]int64{}}, Options{Now: fixedClock, MaxInFlightBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	big := presenceDelivery(t, "evt-big", 1, 60<<10).with(func(d *delivery) { d.chunked = true })
	req, counted := big.request("192.0.2.1:1000")
	w := serveDirect(h, req)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Connection") != "close" {
		t.Errorf("a 60 KiB body of unknown length with 48 KiB of room: status %d, Connection %q; want 503, close", w.Code, w.Header().Get("Connection"))
	}
	if n := counted.read.Load(); n > 48<<10 {
		t.Errorf("%d bytes read, more than the 48 KiB of room", n)
	}
	small := presenceDelivery(t, "evt-small", 2, 20<<10).with(func(d *delivery) { d.chunked = true })
	req, _ = small.request("192.0.2.1:1000")
	if w := serveDirect(h, req); w.Code != http.StatusAccepted {
		t.Errorf("a 20 KiB body of unknown length: status %d, want 202; %s", w.Code, w.Body)
	}
	if got := h.budget.inUse(); got != 0 {
		t.Errorf("%d bytes held after the replies", got)
	}
}

// The edge refuses with 413 an event whose record Kafka would refuse,
// counted to the byte with its key and headers, rather than producing it
// and answering 503 to every retry.
func TestRecordOverKafkasLimitIsTooLarge(t *testing.T) {
	_, presence := presenceConfig(t, specSecret)
	d := presenceDelivery(t, "evt-exact", 1, 3000)
	size := record.InputRecordBytes(len(presence.Name), len(presence.Signature.Scheme), len("alice"), len("evt-exact"), len("presence.changed"), len(d.body))
	for _, tc := range []struct {
		maxMessage int
		status     int
	}{{size, http.StatusAccepted}, {size - 1, http.StatusRequestEntityTooLarge}} {
		producer := &recordingProducer{next: map[int32]int64{}}
		h, err := NewHandler([]*config.Stream{presence}, producer, Options{Now: fixedClock, MaxMessageBytes: tc.maxMessage})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := d.request("192.0.2.1:1000")
		if w := serveDirect(h, req); w.Code != tc.status {
			t.Errorf("a record of %d bytes under a limit of %d: status %d, want %d; %s", size, tc.maxMessage, w.Code, tc.status, w.Body)
		}
		if produced := producer.count() == 1; produced != (tc.status == http.StatusAccepted) {
			t.Errorf("limit %d: produced %v", tc.maxMessage, produced)
		}
	}
}

// With http.max_per_source, a source with that many requests in flight is
// answered 503 with Retry-After; another source is served; behind a trusted
// proxy the source is the forwarded client, behind another the peer.
func TestPerSourceLimit(t *testing.T) {
	_, presence := presenceConfig(t, specSecret)
	producer := &heldProducer{}
	h, err := NewHandler([]*config.Stream{presence}, producer, Options{Now: fixedClock, ProduceTimeout: 10 * time.Second,
		MaxPerSource: 1, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	// hold sends a request that waits at the producer until released.
	n := 0
	hold := func(peer, forwarded string) {
		t.Helper()
		n++
		req, _ := presenceDelivery(t, fmt.Sprintf("evt-held-%d", n), int64(n), 0).request(peer)
		if forwarded != "" {
			req.Header.Set("X-Forwarded-For", forwarded)
		}
		want := producer.held() + 1
		wg.Add(1)
		go func() { defer wg.Done(); serveDirect(h, req) }()
		testenv.WaitFor(t, testenv.Context(t, 10*time.Second), "the request at the producer", func() bool { return producer.held() == want })
	}
	try := func(peer, forwarded string) int {
		t.Helper()
		n++
		req, _ := presenceDelivery(t, fmt.Sprintf("evt-try-%d", n), int64(n), 0).request(peer)
		if forwarded != "" {
			req.Header.Set("X-Forwarded-For", forwarded)
		}
		w := serveDirect(h, req)
		if w.Code == http.StatusServiceUnavailable {
			if w.Header().Get("Retry-After") == "" || problemOf(t, w) != "https://driftguard.dev/problems/source_limit" {
				t.Errorf("a source over its limit: Retry-After %q, body %s", w.Header().Get("Retry-After"), w.Body)
			}
		}
		return w.Code
	}
	hold("203.0.113.7:1000", "")
	if got := try("203.0.113.7:2000", ""); got != http.StatusServiceUnavailable {
		t.Errorf("a second request of a source with one in flight: status %d, want 503", got)
	}
	// Through the trusted proxy, two clients are two sources.
	hold("10.1.1.1:1000", "198.51.100.1")
	hold("10.1.1.1:1001", "198.51.100.2")
	if got := try("10.1.1.1:1002", "198.51.100.1"); got != http.StatusServiceUnavailable {
		t.Errorf("a forwarded client with one in flight: status %d, want 503", got)
	}
	// A peer that is no trusted proxy is its own source, whatever it forwards.
	hold("203.0.113.8:1000", "198.51.100.3")
	if got := try("203.0.113.8:1001", "198.51.100.4"); got != http.StatusServiceUnavailable {
		t.Errorf("an untrusted peer forwarding another client: status %d, want 503", got)
	}
	producer.release()
	wg.Wait()
	go func() {
		for producer.held() == 0 {
			time.Sleep(time.Millisecond)
		}
		producer.release()
	}()
	if got := try("203.0.113.7:3000", ""); got != http.StatusAccepted {
		t.Errorf("once its requests were answered, a source: status %d, want 202", got)
	}
}

// Retry-After says what the broker does, not a constant: an embedded broker
// stops answering produce requests for a few seconds while webhooks keep
// coming; every 503 carries at least the time since the stall began (what
// the oldest record waiting has waited), so the hints grow with the stall;
// after it resumes the edge accepts again.
func TestRetryAfterGrowsWithAStalledBroker(t *testing.T) {
	cluster, ctx, edge := edgeOnFakeBroker(t, Options{ProduceTimeout: 500 * time.Millisecond})
	if r := presenceDelivery(t, "evt-first", 1, 0).send(t, ctx, edge.URL); r.status != http.StatusAccepted {
		t.Fatalf("before the stall: status %d", r.status)
	}

	resume := make(chan struct{})
	var resumeOnce sync.Once
	stop := func() { resumeOnce.Do(func() { close(resume) }) }
	t.Cleanup(stop)
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		cluster.SleepControl(func() { <-resume })
		return nil, nil, false
	})
	stalled := time.Now()
	type hint struct {
		sent  time.Duration // since the stall began
		after int
	}
	var hints []hint
	for i := 0; time.Since(stalled) < 4*time.Second; i++ {
		sent := time.Since(stalled)
		r := presenceDelivery(t, fmt.Sprintf("evt-stalled-%d", i), int64(i+2), 0).send(t, ctx, edge.URL)
		if r.status != http.StatusServiceUnavailable {
			t.Fatalf("during the stall: status %d, want 503", r.status)
		}
		s, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil {
			t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
		}
		hints = append(hints, hint{sent, s})
	}
	stop()
	t.Logf("Retry-After during the stall: %v", hints)
	for _, h := range hints {
		// Answered at the deadline, half a second after it was sent: the
		// last ack is at least that old.
		if least := int((h.sent + 500*time.Millisecond).Seconds()); h.after < least {
			t.Errorf("sent %s into the stall: Retry-After %d, want at least %d", h.sent.Round(time.Millisecond), h.after, least)
		}
	}
	if first, last := hints[0].after, hints[len(hints)-1].after; last <= first {
		t.Errorf("Retry-After did not grow with the stall: %d first, %d last", first, last)
	}
	testenv.WaitFor(t, ctx, "the edge accepting after the stall", func() bool {
		return presenceDelivery(t, "evt-after-"+strconv.FormatInt(time.Now().UnixNano(), 10), 1000, 0).send(t, ctx, edge.URL).status == http.StatusAccepted
	})
}
