package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Phases of the broker pause, in order. A request is judged by the phases it
// started and ended in.
const (
	// brokerRunning: the broker runs; a 202 and a slow ack's 503 are both
	// fine.
	brokerRunning int32 = iota
	// brokerStopIssued: SIGSTOP was sent. A request that started earlier
	// may still have been acked before the broker stopped.
	brokerStopIssued
	// brokerStopped: a 503 has been seen since SIGSTOP, so the stop has
	// taken hold: the broker can ack nothing that starts from here on, and
	// every such request must be a 503 with Retry-After.
	brokerStopped
	// brokerResumed: SIGCONT is about to be, or was, sent.
	brokerResumed
)

var phaseNames = map[int32]string{
	brokerRunning:    "running",
	brokerStopIssued: "stop-issued",
	brokerStopped:    "paused",
	brokerResumed:    "resumed",
}

// faultOutcome is one request of the load and what the edge answered.
type faultOutcome struct {
	eventID    string
	started    int32 // phase when the request was sent
	ended      int32 // phase when the reply was read
	status     int
	retryAfter string
	accepted   Accepted // for a 202
	problem    string   // a reply or transport problem, for the failure message
}

// faultLoad sends signed webhooks from a few goroutines until stopped and
// records every outcome. A request is never cut short by the end of the
// load: each has its own generous bound, so an edge that hangs instead of
// answering 503 is recorded as a failure, not dropped.
type faultLoad struct {
	t       *testing.T
	baseURL string
	stream  string
	phase   *atomic.Int32
	client  *http.Client

	mu       sync.Mutex
	outcomes []faultOutcome
	accepted atomic.Int64
	// acceptedAfterResume counts 202s to requests started after SIGCONT.
	acceptedAfterResume atomic.Int64
	whollyPaused        atomic.Int64 // requests sent and answered while paused
}

func (l *faultLoad) run(ctx context.Context, worker int, wg *sync.WaitGroup) {
	defer wg.Done()
	for n := 0; ctx.Err() == nil; n++ {
		o := l.send(fmt.Sprintf("evt-fault-%d-%d", worker, n), worker, int64(n+1))
		l.mu.Lock()
		l.outcomes = append(l.outcomes, o)
		l.mu.Unlock()
		switch {
		case o.status == http.StatusAccepted:
			l.accepted.Add(1)
			if o.started == brokerResumed {
				l.acceptedAfterResume.Add(1)
			}
		case o.status == http.StatusServiceUnavailable && o.ended >= brokerStopIssued:
			// The first 503 since SIGSTOP: the broker has stopped acking.
			l.phase.CompareAndSwap(brokerStopIssued, brokerStopped)
		}
		if o.started == brokerStopped && o.ended == brokerStopped {
			l.whollyPaused.Add(1)
		}
		time.Sleep(5 * time.Millisecond) // a steady publisher, not a flood
	}
}

func (l *faultLoad) send(eventID string, worker int, seq int64) faultOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := signedDelivery(l.t, specSecret, "msg_"+eventID, testenv.Presence{EventID: eventID, User: fmt.Sprintf("user-%d", worker), Version: seq}.Body())
	d.stream = l.stream
	o := faultOutcome{eventID: eventID, started: l.phase.Load()}
	r, err := d.sendWith(ctx, l.client, l.baseURL)
	o.ended = l.phase.Load()
	if err != nil {
		o.problem = err.Error()
		return o
	}
	o.status, o.retryAfter = r.status, r.header.Get("Retry-After")
	switch r.status {
	case http.StatusAccepted:
		if err := json.Unmarshal(r.body, &o.accepted); err != nil || o.accepted.EventID != eventID {
			o.problem = fmt.Sprintf("202 body %s: %v", r.body, err)
		}
	case http.StatusServiceUnavailable:
		var p problem.Problem
		if err := json.Unmarshal(r.body, &p); err != nil || p.Status != r.status || r.header.Get("Content-Type") != "application/problem+json" {
			o.problem = fmt.Sprintf("503 is not a problem+json body: Content-Type %q, body %s", r.header.Get("Content-Type"), r.body)
		}
	default:
		o.problem = fmt.Sprintf("body %s", r.body)
	}
	return o
}

func (l *faultLoad) snapshot() []faultOutcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.outcomes)
}

// readyzStatus asks /readyz once; 0 and the error when it does not answer
// within bound.
func readyzStatus(client *http.Client, baseURL string, bound time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/readyz", nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body)), err
}

// TestBrokerPauseAndResume pauses the real broker (SIGSTOP) under a steady
// load of signed webhooks and resumes it (SIGCONT). While it is paused,
// every request must be answered 503 with Retry-After, never 2xx, and
// /readyz must still say ready (the edge answers, with its own 503s); after
// it resumes, the same edge, not restarted, must accept again. Every event
// that was answered 202 must then be in the topic, where the 202 said, once.
//
// The broker is shared with every test of the run; it is paused for a few
// seconds only, and resumed by a cleanup and by a watchdog whatever happens.
func TestBrokerPauseAndResume(t *testing.T) {
	brokers := testenv.Kafka(t)
	pid := testenv.KafkaPID(t)

	// A stream of its own, so its topics hold only this test's events.
	_, stream := presenceConfig(t, specSecret)
	stream.Name = testenv.UniqueName("fault")
	stream.Limits.Partitions = 3
	testenv.Topics(t, testenv.Context(t, 30*time.Second), testenv.OnlyStream(t, stream), brokers).Close()
	topic := stream.Name + ".in"

	routes, _ := edgeRoutes(t, brokers, []*config.Stream{stream}, Options{Now: fixedClock, ProduceTimeout: time.Second})
	baseURL := serveProduction(t, routes)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)

	var phase atomic.Int32
	load := &faultLoad{t: t, baseURL: baseURL, stream: stream.Name, phase: &phase, client: client}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	t.Cleanup(func() { stopLoad(); workers.Wait() })

	resume := sync.OnceValue(func() error {
		phase.Store(brokerResumed)
		return syscall.Kill(pid, syscall.SIGCONT)
	})
	// Whatever happens to this test, the broker runs again: the cleanup
	// covers a failed assertion, the watchdog a test stuck past its bound.
	// Registered last, the cleanup runs first, so the broker every other
	// test shares is paused no longer than needed.
	watchdog := time.AfterFunc(90*time.Second, func() { _ = resume() })
	t.Cleanup(func() {
		watchdog.Stop()
		if err := resume(); err != nil {
			t.Errorf("resuming the broker (pid %d): %v", pid, err)
		}
	})

	const loadWorkers = 4
	workers.Add(loadWorkers)
	for w := range loadWorkers {
		go load.run(loadCtx, w, &workers)
	}

	if !testenv.Poll(testenv.Context(t, 30*time.Second), func() bool { return load.accepted.Load() >= 50 }) {
		t.Fatalf("the running broker accepted only %d webhooks", load.accepted.Load())
	}

	phase.Store(brokerStopIssued)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("pausing the broker (pid %d): %v", pid, err)
	}
	if !testenv.Poll(testenv.Context(t, 30*time.Second), func() bool { return phase.Load() == brokerStopped }) {
		t.Fatalf("no request was answered 503 after the broker was paused")
	}
	// Ask /readyz while the broker is paused; its checks have 2 s, so a
	// generous bound only catches a readiness probe that hangs.
	askedReady := time.Now()
	readyWhileStopped, readyBody, readyErr := readyzStatus(client, baseURL, 15*time.Second)
	t.Logf("/readyz while paused answered in %s", time.Since(askedReady).Round(time.Millisecond))
	// Requests that started and ended while the broker was paused.
	if !testenv.Poll(testenv.Context(t, 30*time.Second), func() bool { return load.whollyPaused.Load() >= 8 }) {
		t.Errorf("only %d requests were made entirely while the broker was paused", load.whollyPaused.Load())
	}
	if err := resume(); err != nil {
		t.Fatalf("resuming the broker (pid %d): %v", pid, err)
	}

	switch {
	case readyErr != nil:
		t.Errorf("/readyz while the broker was paused did not answer: %v", readyErr)
	case readyWhileStopped != http.StatusOK:
		t.Errorf("/readyz while the broker was paused: %d %q, want 200: the edge answers, with 503s", readyWhileStopped, readyBody)
	}

	// The same edge recovers by itself: ready, and accepting again.
	var lastReady int
	var lastReadyBody string
	if !testenv.Poll(testenv.Context(t, 60*time.Second), func() bool {
		lastReady, lastReadyBody, _ = readyzStatus(client, baseURL, 15*time.Second)
		return lastReady == http.StatusOK
	}) {
		t.Errorf("/readyz after the broker resumed: %d %q, want 200", lastReady, lastReadyBody)
	}
	if !testenv.Poll(testenv.Context(t, 60*time.Second), func() bool { return load.acceptedAfterResume.Load() >= 20 }) {
		t.Errorf("after the broker resumed, only %d webhooks were accepted", load.acceptedAfterResume.Load())
	}
	stopLoad()
	workers.Wait()

	outcomes := load.snapshot()
	var acceptedReplies []Accepted
	counts := map[string]int{}
	for _, o := range outcomes {
		label := fmt.Sprintf("%d %s", o.status, phaseNames[o.started])
		if o.started == brokerStopped && o.ended == brokerStopped {
			if o.status != http.StatusServiceUnavailable {
				t.Errorf("%s: status %d while the broker was paused, want 503 (%s)", o.eventID, o.status, o.problem)
			} else if s, err := strconv.Atoi(o.retryAfter); err != nil || s <= 0 {
				t.Errorf("%s: 503 with Retry-After %q, want a positive number of seconds", o.eventID, o.retryAfter)
			}
		}
		counts[label]++
		if o.problem != "" {
			t.Errorf("%s (sent %s, answered %s): status %d: %s", o.eventID, phaseNames[o.started], phaseNames[o.ended], o.status, o.problem)
			continue
		}
		if o.status == http.StatusAccepted {
			acceptedReplies = append(acceptedReplies, o.accepted)
		}
	}
	t.Logf("outcomes: %v", counts)

	// Every 202 came after the broker's ack, so every accepted event is
	// below the end offsets read now, exactly once (the producer is
	// idempotent), at the place its 202 named. Events answered 503 may or
	// may not have landed: the publisher retries them either way.
	records := testenv.ReadTopic(t, brokers, topic)
	type place struct {
		partition int32
		offset    int64
	}
	where := map[string][]place{}
	for _, r := range records {
		id := headerMap(t, r)[record.HeaderEventID]
		where[id] = append(where[id], place{r.Partition, r.Offset})
	}
	landed503 := 0
	for _, o := range outcomes {
		if o.status == http.StatusServiceUnavailable && len(where[o.eventID]) > 0 {
			landed503++
		}
	}
	t.Logf("%d records in %s; %d of the events answered 503 landed anyway", len(records), topic, landed503)
	for _, a := range acceptedReplies {
		got := where[a.EventID]
		switch {
		case len(got) == 0:
			t.Errorf("%s was answered 202 at %d/%d but is not in %s", a.EventID, a.Partition, a.Offset, topic)
		case len(got) > 1:
			t.Errorf("%s is in %s %d times: %v", a.EventID, topic, len(got), got)
		case got[0] != place{a.Partition, a.Offset}:
			t.Errorf("%s is at %d/%d, but its 202 said %d/%d", a.EventID, got[0].partition, got[0].offset, a.Partition, a.Offset)
		}
	}
	for id, got := range where {
		if len(got) > 1 && !slices.ContainsFunc(acceptedReplies, func(a Accepted) bool { return a.EventID == id }) {
			t.Errorf("%s (answered 503) is in %s %d times: %v", id, topic, len(got), got)
		}
	}
}
