package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
)

// Slow bodies: valid headers declaring a body at the limit, then a byte a
// second, on many connections.
const (
	slowBodies      = 100
	slowReadTimeout = 5 * time.Second
	// slowHeldBytes bounds what a slow connection may hold in the edge:
	// its body buffer of 4 KiB (twice what it sent, at least 4 KiB), its
	// connection's buffers and its goroutine's stack, with room to spare.
	// Reading the declared length up front would hold 256 KiB.
	slowHeldBytes = 64 << 10
)

// A real `driftguard ingest` with http.read_timeout 5s gets 100
// connections that each send valid signature headers, a Content-Length of
// the body limit (256 KiB), then one byte a second. While they trickle,
// the edge's heap and resident memory grow by less than slowHeldBytes a
// connection, where reading the declared length up front would take 25 MiB
// (they are counted in the in-flight budget by that length all the same);
// each connection is closed by the edge at the read timeout, answered 400
// if at all; and a publisher's webhooks are accepted meanwhile.
func TestFaultSlowBody(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	// A budget that admits every slow body: what is measured is what they
	// hold, not what the budget refuses.
	stream, cfg, edge := ingestOnStream(t, ctx, "slow", fmt.Sprintf("http: {read_timeout: %s, max_in_flight_bytes: %d}\n", slowReadTimeout, 64<<20))
	proc := edge.start()
	publisher := &webhook.Publisher{URL: edge.url(stream), Secret: faultSecret}
	send := func(n int) {
		t.Helper()
		id := fmt.Sprintf("evt-slow-%d", n)
		resp, err := publisher.Post(ctx, "msg_"+id, testenv.Presence{EventID: id, User: "alice", Version: int64(n + 1)}.Body())
		if err != nil || resp.Status != http.StatusAccepted {
			t.Fatalf("webhook %d: %d %v %s", n, resp.Status, err, resp.Body)
		}
	}
	for n := range 20 {
		send(n)
	}
	before, _, err := procstat.Memory(proc.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	heapBefore := edge.gauges("go_memstats_heap_alloc_bytes")[0]

	limit := cfg.Streams[stream].Limits.MaxBodyBytes
	results := make(chan slowResult, slowBodies)
	var started sync.WaitGroup
	started.Add(slowBodies)
	for n := range slowBodies {
		go func() { results <- trickle(edge.addr, stream, n, limit, &started) }()
	}
	started.Wait()
	// Most of the read timeout into the trickle: every connection has sent
	// its headers and a few bytes, and is held.
	time.Sleep(slowReadTimeout * 3 / 5)
	held, _, err := procstat.Memory(proc.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	gauges := edge.gauges("go_memstats_heap_alloc_bytes", "driftguard_ingest_in_flight_bytes")
	heapHeld, budgeted := gauges[0], gauges[1]
	send(100)
	var closed []time.Duration
	answers := map[int]int{}
	for range slowBodies {
		r := <-results
		if r.err != nil {
			t.Errorf("slow body %d: %v", r.n, r.err)
			continue
		}
		closed = append(closed, r.closedAfter)
		answers[r.status]++
		if r.status != 0 && r.status != http.StatusBadRequest {
			t.Errorf("slow body %d: answered %d, want 400 or no answer", r.n, r.status)
		}
	}
	// Go's heap counts what is allocated; resident memory only the pages
	// written, and a buffer allocated for a declared length and never
	// filled is not written: both are checked.
	t.Logf("memory with %d slow bodies held: heap %s → %s, resident %s → %s (%.1f KiB and %.1f KiB a connection); in the in-flight budget %s, their declared lengths",
		slowBodies, mib(int64(heapBefore)), mib(int64(heapHeld)), mib(before), mib(held),
		(heapHeld-heapBefore)/slowBodies/1024, float64(held-before)/slowBodies/1024, mib(int64(budgeted)))
	for what, growth := range map[string]int64{"heap": int64(heapHeld - heapBefore), "resident memory": held - before} {
		if growth > slowBodies*slowHeldBytes {
			t.Errorf("%d slow bodies grew the edge's %s by %s, over %s a connection", slowBodies, what, mib(growth), mib(slowHeldBytes))
		}
	}
	if want := float64(slowBodies * limit); budgeted != want {
		t.Errorf("the slow bodies hold %v bytes of the in-flight budget, want their declared lengths, %v", budgeted, want)
	}
	for _, after := range closed {
		if after < slowReadTimeout-time.Second || after > slowReadTimeout+3*time.Second {
			t.Errorf("a slow body was closed %s after its headers, want about the read timeout, %s", after.Round(time.Millisecond), slowReadTimeout)
		}
	}
	if len(closed) > 0 {
		t.Logf("closed %s to %s after the headers; answers (0: none) %v", slices.Min(closed).Round(time.Millisecond), slices.Max(closed).Round(time.Millisecond), answers)
	}
}

// slowResult is how one slow body ended: how long after its headers the
// edge closed it, and its answer (0: none).
type slowResult struct {
	n           int
	closedAfter time.Duration
	status      int
	err         error
}

// trickle sends valid headers for a body of length bytes, then a byte a
// second until the edge closes the connection.
func trickle(addr, stream string, n int, length int64, started *sync.WaitGroup) slowResult {
	res := slowResult{n: n}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		started.Done()
		res.err = err
		return res
	}
	defer conn.Close()
	id := fmt.Sprintf("msg_slow_%d", n)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	// Signed over a body that never arrives: the header checks pass, the
	// body is read.
	sig, err := webhook.SignatureHeader(faultSecret, id, ts, []byte("never sent"))
	if err != nil {
		panic(err)
	}
	head := fmt.Sprintf("POST /v1/webhooks/%s HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
		"webhook-id: %s\r\nwebhook-timestamp: %s\r\nwebhook-signature: %s\r\n\r\n", stream, length, id, ts, sig)
	if _, err := conn.Write([]byte(head)); err != nil {
		started.Done()
		res.err = err
		return res
	}
	sent := time.Now()
	started.Done()
	// The answer, if any, and the close, are read while the body trickles.
	answered := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case res.status = <-answered:
			res.closedAfter = time.Since(sent)
			return res
		case <-tick.C:
			if time.Since(sent) > 30*time.Second {
				res.err = fmt.Errorf("still open %s after its headers", time.Since(sent).Round(time.Second))
				return res
			}
			if _, err := conn.Write([]byte(`{`)); err != nil && !strings.Contains(err.Error(), "broken pipe") && !strings.Contains(err.Error(), "reset") {
				res.err = err
				return res
			}
		}
	}
}
