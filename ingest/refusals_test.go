package ingest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
)

// logLines are the JSON log lines written to logs so far.
func logLines(t *testing.T, logs *testenv.SyncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// TestRefusalsAreLoggedSampled: a flood of forged webhooks logs a few
// lines per reason and interval, each naming the source and webhook-id
// and never the body or a secret; the next line says how many were left
// out; the metric counts every one.
func TestRefusalsAreLoggedSampled(t *testing.T) {
	_, presence := presenceConfig(t, specSecret)
	var logs testenv.SyncBuffer
	clock := testNow
	var clockMu sync.Mutex
	now := func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		return clock
	}
	reg := prometheus.NewRegistry()
	h, err := NewHandler([]*config.Stream{presence}, &recordingProducer{next: map[int32]int64{}}, Options{
		Now: now, Registerer: reg, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		RefusalLogLines: 3, RefusalLogInterval: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHandler(t, h)
	ctx := testenv.Context(t, time.Minute)

	const body = `{"secret-looking body":"whsec_in_the_body"}`
	forged := signedDelivery(t, strangerSecret, "msg_forged", []byte(body))
	for range 10 {
		if r := forged.send(t, ctx, srv.URL); r.status != http.StatusUnauthorized {
			t.Fatalf("forged webhook: %d %s", r.status, r.body)
		}
	}
	unknown := forged.with(func(d *delivery) { d.stream = "wp-admin" })
	unknown.send(t, ctx, srv.URL)

	lines := logLines(t, &logs)
	byReason := map[string]int{}
	for _, l := range lines {
		if l["msg"] != "webhook refused" {
			continue
		}
		byReason[l["reason"].(string)]++
		if l["source"] != "127.0.0.1" || l["webhook_id"] != "msg_forged" {
			t.Errorf("line without the source or webhook-id: %v", l)
		}
		if l["suppressed"] != float64(0) {
			t.Errorf("suppressed %v in the first interval: %v", l["suppressed"], l)
		}
	}
	if byReason["signature_mismatch"] != 3 || byReason["unknown_stream"] != 1 {
		t.Errorf("lines by reason %v, want 3 signature_mismatch (the sample) and 1 unknown_stream", byReason)
	}
	text := logs.String()
	for _, secret := range []string{"whsec_in_the_body", specSecret, strangerSecret, forged.header.Get(webhook.HeaderWebhookSignature)} {
		if strings.Contains(text, secret) {
			t.Errorf("the log holds %q:\n%s", secret, text)
		}
	}
	if got := testutil.ToFloat64(h.metrics.rejections.WithLabelValues("presence", "signature_mismatch")); got != 10 {
		t.Errorf("rejections counted %v, want 10", got)
	}

	// An interval later the reason has room again, and its line says
	// how many were left out.
	clockMu.Lock()
	clock = clock.Add(time.Minute)
	clockMu.Unlock()
	fresh := signedDeliveryAt(t, strangerSecret, "msg_later", strconv.FormatInt(now().Unix(), 10), []byte(body))
	fresh.send(t, ctx, srv.URL)
	lines = logLines(t, &logs)
	last := lines[len(lines)-1]
	if last["webhook_id"] != "msg_later" || last["suppressed"] != float64(7) {
		t.Errorf("line after the interval %v, want msg_later with 7 suppressed", last)
	}
}

// TestEdgeAnswersAreNotSniffed: every answer of the edge, accepted or
// refused, tells browsers not to guess its type.
func TestEdgeAnswersAreNotSniffed(t *testing.T) {
	_, _, srv := memoryEdge(t)
	ctx := testenv.Context(t, time.Minute)
	valid := signedDelivery(t, specSecret, "msg_sniff", testenv.Presence{EventID: "evt-sniff", User: "alice", Version: 1}.Body())
	for _, d := range []delivery{valid, valid.withBody([]byte(`<html>`)), valid.with(func(d *delivery) { d.stream = "nope" })} {
		r := d.send(t, ctx, srv.URL)
		if got := r.header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%d answer has X-Content-Type-Options %q", r.status, got)
		}
	}
}

// TestEdgeRefusesAmbiguousFraming sends, on the production server's
// listener, a signed webhook chunked and then one with both
// Transfer-Encoding and Content-Length on the same connection: the first
// is accepted, the second refused 400 and the connection closed.
func TestEdgeRefusesAmbiguousFraming(t *testing.T) {
	h, _, _ := memoryEdge(t)
	mux := http.NewServeMux()
	h.Register(mux)
	base := serveProduction(t, mux)
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a broken server must not hang the test
	br := bufio.NewReader(c)

	body := testenv.Presence{EventID: "evt-framing", User: "alice", Version: 1}.Body()
	d := signedDelivery(t, specSecret, "msg_framing", body)
	write := func(extra string) {
		var req bytes.Buffer
		req.WriteString("POST /v1/webhooks/presence HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" + extra)
		for name := range d.header {
			req.WriteString(name + ": " + d.header.Get(name) + "\r\n")
		}
		req.WriteString("\r\n" + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + string(body) + "\r\n0\r\n\r\n")
		if _, err := c.Write(req.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusAccepted || resp.Close {
		t.Fatalf("chunked webhook: %d (close %v), want 202 on a kept connection", resp.StatusCode, resp.Close)
	}
	write("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Fatalf("webhook with both: %d (close %v), want 400 and Connection: close", resp.StatusCode, resp.Close)
	}
	if n, err := br.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the connection stayed open (%d more bytes)", n)
	}
}
