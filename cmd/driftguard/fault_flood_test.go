package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
	"github.com/driftguard/driftguard/internal/webhook"
)

// The flood: junk at the body limit from many connections for 30 s, half
// of it unsigned, half signed with a wrong key, while a publisher sends
// valid webhooks at a steady pace.
const (
	floodFor         = 30 * time.Second
	floodConnections = 128
	validEvery       = 50 * time.Millisecond
)

// The bound on the edge's memory, a property of its caps: what it holds
// before the flood, plus the in-flight budget twice over (Go's heap grows
// to twice what is live before it collects), plus per connection its
// buffers and stack, plus a margin for the runtime's own bookkeeping.
const (
	floodConnectionBytes = 64 << 10
	floodMargin          = 16 << 20
)

// A real `driftguard ingest` is flooded with unsigned and wrongly signed
// requests at the body limit from 128 connections for 30 s while valid
// webhooks are sent 20 a second. Its peak resident memory (VmHWM) stays
// under what its caps allow (floodMemoryBound), every valid webhook is
// accepted with p99 latency under 2 s, the junk is answered 401 or 503,
// and none of it reaches Kafka: the stream's input holds the valid
// webhooks, each once, and nothing else.
func TestFaultFloodOfJunk(t *testing.T) {
	ctx := testenv.Context(t, 3*time.Minute)
	stream := testenv.UniqueName("flood")
	configFile := testenv.WriteConfig(t, t.TempDir(), "streams:\n"+presenceStreamYAML(stream))
	cfg, err := config.Load(configFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kafka.Brokers = testenv.Kafka(t)
	testenv.Topics(t, ctx, testenv.OnlyStream(t, cfg.Streams[stream]), cfg.Kafka.Brokers).Close()
	cfg.Streams = map[string]*config.Stream{stream: cfg.Streams[stream]}
	edge := newIngestRunner(t, configFile, cfg.Kafka.Brokers)
	proc := edge.start()
	bodyLimit := cfg.Streams[stream].Limits.MaxBodyBytes
	budget := cfg.HTTP.MaxInFlightBytes

	// Valid webhooks, each on its own goroutine so that one slow answer
	// does not delay the next send.
	publisher := &webhook.Publisher{URL: edge.url(stream), Secret: faultSecret,
		Client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	var (
		validMu   sync.Mutex
		latencies []float64 // seconds
		accepted  []string
		refused   []string
	)
	var validWG sync.WaitGroup
	sendValid := func(n int) {
		defer validWG.Done()
		id := fmt.Sprintf("evt-valid-%d", n)
		body := testenv.Presence{EventID: id, User: fmt.Sprintf("user-%d", n%50), Version: int64(n + 1)}.Body()
		start := time.Now()
		resp, err := publisher.Post(ctx, "msg_"+id, body)
		took := time.Since(start)
		validMu.Lock()
		defer validMu.Unlock()
		if err != nil || resp.Status != http.StatusAccepted {
			refused = append(refused, fmt.Sprintf("%s: %d %v %s", id, resp.Status, err, resp.Body))
			return
		}
		latencies = append(latencies, took.Seconds())
		accepted = append(accepted, id)
	}
	// Warm up, then take the edge's memory before the flood.
	for n := range 50 {
		validWG.Add(1)
		sendValid(n)
	}
	baseline, _, err := procMemory(proc.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	latencies = nil

	floodCtx, stopFlood := context.WithTimeout(ctx, floodFor)
	defer stopFlood()
	var junk floodCounts
	var floodWG sync.WaitGroup
	junkBody := bytes.Repeat([]byte("j"), int(bodyLimit))
	transport := &http.Transport{MaxIdleConnsPerHost: floodConnections, MaxConnsPerHost: floodConnections}
	defer transport.CloseIdleConnections()
	for c := range floodConnections {
		floodWG.Add(1)
		go func() {
			defer floodWG.Done()
			junk.flood(floodCtx, transport, edge.url(stream), junkBody, c%2 == 0)
		}()
	}
	var peakSeen atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for floodCtx.Err() == nil {
			if rss, _, err := procMemory(proc.Process.Pid); err == nil && rss > peakSeen.Load() {
				peakSeen.Store(rss)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	tick := time.NewTicker(validEvery)
	for n := 50; floodCtx.Err() == nil; n++ {
		validWG.Add(1)
		go sendValid(n)
		select {
		case <-tick.C:
		case <-floodCtx.Done():
		}
	}
	tick.Stop()
	floodWG.Wait()
	validWG.Wait()
	<-sampled
	rss, peak, err := procMemory(proc.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	bound := baseline + 2*budget + floodConnections*floodConnectionBytes + floodMargin
	seconds := func(level float64) time.Duration {
		return time.Duration(quantile(latencies, level) * float64(time.Second)).Round(time.Millisecond)
	}
	p99 := seconds(0.99)
	t.Logf("junk: %s", junk.summary())
	t.Logf("valid: %d accepted, %d refused; latency p50 %s, p99 %s, max %s", len(accepted), len(refused),
		seconds(0.5), p99, seconds(1))
	t.Logf("memory: %s before the flood, %s peak (VmHWM; %s seen in samples), %s after; bound %s = before + 2 × %s budget + %d connections × %s + %s",
		mib(baseline), mib(peak), mib(peakSeen.Load()), mib(rss), mib(bound), mib(budget), floodConnections, mib(floodConnectionBytes), mib(floodMargin))

	if peak > bound {
		t.Errorf("peak resident memory %s is over the bound %s", mib(peak), mib(bound))
	}
	for _, r := range refused {
		t.Errorf("a valid webhook was not accepted during the flood: %s", r)
	}
	if len(latencies) < int(floodFor/validEvery)/2 {
		t.Errorf("only %d valid webhooks were accepted during %s", len(latencies), floodFor)
	}
	if p99 >= 2*time.Second {
		t.Errorf("valid webhooks were served with p99 latency %s during the flood, want under 2s", p99)
	}
	if junk.bodiesRead.Load() == 0 || junk.overBudget.Load()+junk.unsigned.Load() == 0 {
		t.Errorf("the flood did not reach the edge's limits: %s", junk.summary())
	}
	if n := junk.other.Load(); n > 0 {
		t.Errorf("%d junk requests were answered neither 401 nor 503: %s", n, junk.firstOther.Load())
	}

	// Only the valid webhooks are in the input, each once.
	want := map[string]bool{}
	for _, id := range accepted {
		want[id] = true
	}
	seen := map[string]int{}
	for _, rec := range testenv.ReadTopic(t, cfg.Kafka.Brokers, topics.For(stream).In) {
		id := ""
		for _, h := range rec.Headers {
			if h.Key == record.HeaderEventID {
				id = string(h.Value)
			}
		}
		seen[id]++
		if !want[id] {
			t.Errorf("%s holds a record that is no accepted webhook: event id %q, %d bytes", topics.For(stream).In, id, len(rec.Value))
		}
	}
	for _, id := range accepted {
		if seen[id] != 1 {
			t.Errorf("accepted webhook %s is in the input %d times", id, seen[id])
		}
	}
}

// floodCounts tallies the junk's answers.
type floodCounts struct {
	sent, unsigned, bodiesRead, overBudget, transport, other atomic.Int64
	firstOther                                               atomic.Value
}

// flood sends junk until ctx ends: without signature headers when
// unsigned (refused before the body is read), else with a current
// timestamp and a signature of the wrong key (read, then refused).
func (f *floodCounts) flood(ctx context.Context, transport *http.Transport, url string, body []byte, unsigned bool) {
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	wrong := make([]byte, 32)
	for n := 0; ctx.Err() == nil; n++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			panic(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if !unsigned {
			_, _ = rand.Read(wrong)
			req.Header.Set("webhook-id", "msg_junk_"+strconv.Itoa(n))
			req.Header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
			req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(wrong))
		}
		f.sent.Add(1)
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				f.transport.Add(1)
			}
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusUnauthorized && unsigned:
			f.unsigned.Add(1)
		case resp.StatusCode == http.StatusUnauthorized:
			f.bodiesRead.Add(1)
		case resp.StatusCode == http.StatusServiceUnavailable:
			f.overBudget.Add(1)
		default:
			f.other.Add(1)
			f.firstOther.CompareAndSwap(nil, fmt.Sprintf("status %d (unsigned %v)", resp.StatusCode, unsigned))
		}
	}
}

func (f *floodCounts) summary() string {
	return fmt.Sprintf("%d sent: %d unsigned refused before the body, %d wrongly signed refused after it, %d over the budget (503), %d transport errors, %d other",
		f.sent.Load(), f.unsigned.Load(), f.bodiesRead.Load(), f.overBudget.Load(), f.transport.Load(), f.other.Load())
}
