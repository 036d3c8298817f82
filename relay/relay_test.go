package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
	"github.com/driftguard/driftguard/relay"
)

const publisherSecret = "whsec_cmVsYXktdGVzdC1zZWNyZXQtb2YtMzItYnl0ZXMhIQ=="

// publisher is a fake publisher: it verifies each replay request's
// signature with the stream's secret, answers 503 to the first down
// requests and 410 to key "gone", and counts what it saw.
type publisher struct {
	t    *testing.T
	mu   sync.Mutex
	down int
	// posts and accepted count each webhook-id's POSTs and 2xx answers;
	// bodies keep the body of each id, arrivals when each POST came.
	posts, accepted map[string]int
	bodies          map[string]relay.Body
	arrivals        map[string][]time.Time
	// inFlight and maxInFlight count each key's POSTs being answered.
	inFlight, maxInFlight map[string]int
	failed                int
	// onAccepted runs for each accepted request, outside the lock.
	onAccepted func(relay.Body)
}

func newPublisher(t *testing.T, down int) *publisher {
	return &publisher{t: t, down: down, posts: map[string]int{}, accepted: map[string]int{}, bodies: map[string]relay.Body{},
		arrivals: map[string][]time.Time{}, inFlight: map[string]int{}, maxInFlight: map[string]int{}}
}

func (p *publisher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	data, _ := io.ReadAll(r.Body)
	id, ts := r.Header.Get(webhook.HeaderWebhookID), r.Header.Get(webhook.HeaderWebhookTimestamp)
	want, err := webhook.SignatureHeader(publisherSecret, id, ts, data)
	if err != nil || r.Header.Get(webhook.HeaderWebhookSignature) != want {
		p.t.Errorf("request %s: signature %q, want %q (%v)", id, r.Header.Get(webhook.HeaderWebhookSignature), want, err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var body relay.Body
	if err := json.Unmarshal(data, &body); err != nil {
		p.t.Errorf("request %s: %v", id, err)
	}
	p.mu.Lock()
	p.posts[id]++
	p.bodies[id] = body
	p.arrivals[id] = append(p.arrivals[id], arrived)
	p.inFlight[body.Key]++
	p.maxInFlight[body.Key] = max(p.maxInFlight[body.Key], p.inFlight[body.Key])
	status := http.StatusOK
	switch {
	case p.failed < p.down:
		p.failed++
		status = http.StatusServiceUnavailable
	case body.Key == "gone":
		status = http.StatusGone
	default:
		p.accepted[id]++
	}
	p.mu.Unlock()
	if status == http.StatusOK && p.onAccepted != nil {
		p.onAccepted(body)
	}
	p.mu.Lock()
	p.inFlight[body.Key]--
	p.mu.Unlock()
	w.WriteHeader(status)
}

// The rig's back-off bounds.
const backoffMin, backoffMax = 5 * time.Millisecond, 40 * time.Millisecond

// rig is a config of one gapless stream, named uniquely, whose replay
// requests go to url with short back-offs; its topics, created; and a
// transactional client that writes requests as the processor does.
type rig struct {
	cfg    *config.Config
	s      *config.Stream
	topics naming.Topics
	cl     *kgo.Client
}

func newRig(t *testing.T, ctx context.Context, brokers []string, url string) *rig {
	s := testenv.Shipped(t, "workflow")
	s.Name = testenv.UniqueName("relay")
	s.Limits.Partitions = 2
	s.Replay.URL, s.Replay.Secret = url, publisherSecret
	s.Replay.MinBackoff, s.Replay.MaxBackoff = backoffMin, backoffMax
	cfg := testenv.OnlyStream(t, s)
	cfg.Kafka.Brokers = brokers
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cl := testenv.Topics(t, ctx, cfg, brokers, kgo.TransactionalID(testenv.UniqueName("relay-test")))
	t.Cleanup(cl.Close)
	return &rig{cfg: cfg, s: s, topics: cfg.Kafka.Naming().For(s.Name), cl: cl}
}

// startRelay runs a relay of cfg until the returned function stops it.
func startRelay(t *testing.T, ctx context.Context, cfg *config.Config, ops *telemetry.Ops) (stop func()) {
	r, err := relay.New(relay.Options{Config: cfg, Logger: testenv.Logger(t), Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- service.RunAll(runCtx, r) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("relay: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// request writes replay requests as the processor does, in one
// transaction.
func request(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, reqs ...record.ReplayRequest) {
	var records []*kgo.Record
	for _, r := range reqs {
		value, _ := json.Marshal(r)
		records = append(records, &kgo.Record{Topic: topic, Key: []byte(r.Key), Value: value})
	}
	testenv.Transact(t, ctx, cl, true, records...)
}

// readCommitted reads topic (read_committed) from its start until n
// records that keep accepts have come, and returns them.
func readCommitted(t *testing.T, ctx context.Context, brokers []string, topic string, n int, keep func(*kgo.Record) bool) []*kgo.Record {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d records came", topic, len(out), n)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if keep(r) {
				out = append(out, r)
			}
		})
	}
	return out
}

// deliveries reads the replay topic until n delivery records have come,
// by request id.
func deliveries(t *testing.T, ctx context.Context, brokers []string, topic string, n int) map[string]record.ReplayDelivery {
	out := map[string]record.ReplayDelivery{}
	for _, r := range readCommitted(t, ctx, brokers, topic, n, relay.IsDelivery) {
		var d record.ReplayDelivery
		if err := json.Unmarshal(r.Value, &d); err != nil {
			t.Fatal(err)
		}
		if _, seen := out[d.RequestID]; seen {
			t.Errorf("request %s recorded twice", d.RequestID)
		}
		out[d.RequestID] = d
	}
	return out
}

// The publisher is down (503) for its first requests: the relay retries
// with back-off until it answers, each retry after at least the back-off's
// lower bound, each key's request in flight alone; a
// key's older request in the same batch is superseded by its newer one and
// never sent; a 410 is final and goes to the DLQ. Every request's fate is
// recorded once, and a relay started again sends none of them again.
func TestRelayRetriesUntilThePublisherRecovers(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	brokers := testenv.Kafka(t)
	pub := newPublisher(t, 12)
	srv := httptest.NewServer(pub)
	defer srv.Close()
	r := newRig(t, ctx, brokers, srv.URL)
	cfg, s, topics, cl := r.cfg, r.s, r.topics, r.cl

	now := time.Now().UnixMilli()
	reqs := []record.ReplayRequest{
		{Stream: s.Name, Key: "op-1", FirstMissing: 3, RequestedAtMs: now},
		{Stream: s.Name, Key: "op-2", FirstMissing: 2, RequestedAtMs: now},
		{Stream: s.Name, Key: "op-3", FirstMissing: 7, RequestedAtMs: now},
		{Stream: s.Name, Key: "gone", FirstMissing: 1, RequestedAtMs: now},
		{Stream: s.Name, Key: "op-2", FirstMissing: 5, RequestedAtMs: now + 1},
	}
	request(t, ctx, cl, topics.Replay, reqs...)
	ops := telemetry.NewOps()
	stop := startRelay(t, ctx, cfg, ops)
	got := deliveries(t, ctx, brokers, topics.Replay, len(reqs))
	stop()

	byKey := map[string][]record.ReplayDelivery{}
	for _, d := range got {
		byKey[d.Key] = append(byKey[d.Key], d)
	}
	want := map[string]string{"op-1": record.ReplayDelivered, "op-3": record.ReplayDelivered, "gone": record.ReplayRefused}
	for key, result := range want {
		if ds := byKey[key]; len(ds) != 1 || ds[0].Result != result {
			t.Errorf("%s: deliveries %+v, want one %s", key, ds, result)
		}
	}
	for _, d := range byKey["op-2"] {
		if wantResult := map[int64]string{2: record.ReplaySuperseded, 5: record.ReplayDelivered}[d.FromSequence]; d.Result != wantResult {
			t.Errorf("op-2 from %d: %s, want %s", d.FromSequence, d.Result, wantResult)
		}
	}
	pub.mu.Lock()
	for _, d := range got {
		id := d.WebhookID
		if id != record.ReplayWebhookID(s.Name, d.Key, d.FromSequence) {
			t.Errorf("%s recorded webhook-id %s, want its gap's", d.RequestID, id)
		}
		body := pub.bodies[id]
		switch d.Result {
		case record.ReplayDelivered:
			if pub.accepted[id] != 1 || d.Status != http.StatusOK {
				t.Errorf("%s accepted %d times, recorded status %d; want once, 200", id, pub.accepted[id], d.Status)
			}
			if body.Type != relay.EventType || body.Stream != s.Name || body.Key != d.Key || body.FromSequence != d.FromSequence {
				t.Errorf("%s: the publisher received %+v for %+v", id, body, d)
			}
			if d.Attempts != pub.posts[id] {
				t.Errorf("%s: %d attempts recorded, %d received", id, d.Attempts, pub.posts[id])
			}
		case record.ReplaySuperseded:
			if pub.posts[id] != 0 {
				t.Errorf("superseded %s was sent %d times", id, pub.posts[id])
			}
		case record.ReplayRefused:
			if d.Status != http.StatusGone {
				t.Errorf("%s: status %d, want 410", d.RequestID, d.Status)
			}
		}
	}
	if pub.failed != pub.down {
		t.Errorf("the publisher answered 503 %d times, want %d: the relay gave up early", pub.failed, pub.down)
	}
	checkBackoff(t, pub.arrivals)
	for key, n := range pub.maxInFlight {
		if n > 1 {
			t.Errorf("key %s had %d requests in flight at once", key, n)
		}
	}
	postsBefore := len(pub.posts)
	pub.mu.Unlock()
	if n := counterSum(t, ops, "driftguard_replay_requests_sent_total"); n != 3 {
		t.Errorf("driftguard_replay_requests_sent_total = %v, want 3", n)
	}

	dead := readCommitted(t, ctx, brokers, topics.DLQ, 1, func(*kgo.Record) bool { return true })
	var dl record.DeadLetter
	if err := json.Unmarshal(dead[0].Value, &dl); err != nil || dl.Reason != record.ReasonReplayUndeliverable || dl.Key != "gone" || dl.Topic != topics.Replay {
		t.Errorf("dead letter %+v (%v), want key gone, reason %s, from %s", dl, err, record.ReasonReplayUndeliverable, topics.Replay)
	}

	// A relay started again reads on from the recorded offsets: a new
	// request is sent, none of the recorded ones again.
	startRelay(t, ctx, cfg, nil)
	request(t, ctx, cl, topics.Replay, record.ReplayRequest{Stream: s.Name, Key: "op-4", FirstMissing: 9, RequestedAtMs: now + 2})
	deliveries(t, ctx, brokers, topics.Replay, len(reqs)+1)
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.posts) != postsBefore+1 {
		t.Errorf("after the restart the publisher saw %d request ids, want %d (the new one only)", len(pub.posts), postsBefore+1)
	}
	for _, d := range got {
		if d.Result == record.ReplayDelivered && pub.accepted[d.WebhookID] != 1 {
			t.Errorf("%s accepted %d times after the restart", d.WebhookID, pub.accepted[d.WebhookID])
		}
	}
}

// checkBackoff fails unless each retry of a webhook-id came at least the
// back-off's lower bound (half its step) after the POST before it: the
// relay waits that long from the answer, which comes after the POST.
func checkBackoff(t *testing.T, arrivals map[string][]time.Time) {
	t.Helper()
	for id, times := range arrivals {
		for n := 1; n < len(times); n++ {
			least := relay.Backoff(backoffMin, backoffMax, n, 0)
			if gap := times[n].Sub(times[n-1]); gap < least {
				t.Errorf("%s: retry %d came %s after the POST before it, less than the back-off's %s", id, n, gap, least)
			}
		}
	}
}

// counterSum is the sum of the series of the counter name in ops, of
// those with the label pairs given (name, value, name, value…) when any.
func counterSum(t *testing.T, ops *telemetry.Ops, name string, labels ...string) float64 {
	families, err := ops.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
		series:
			for _, m := range f.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == labels[i] && l.GetValue() == labels[i+1] }) {
						continue series
					}
				}
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// A publisher that never answers 2xx: once replay.give_up_after has
// passed the request is given up, recorded gave_up with its attempts and
// the last status, and sent to the DLQ with reason replay_undeliverable.
func TestRelayGivesUpIntoTheDLQ(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	brokers := testenv.Kafka(t)
	pub := newPublisher(t, 1<<30)
	srv := httptest.NewServer(pub)
	defer srv.Close()
	r := newRig(t, ctx, brokers, srv.URL)
	cfg, s, topics, cl := r.cfg, r.s, r.topics, r.cl
	// Past at the first failure: given up after one attempt, whatever the
	// clock.
	s.Replay.GiveUpAfter = time.Nanosecond
	request(t, ctx, cl, topics.Replay, record.ReplayRequest{Stream: s.Name, Key: "op-9", FirstMissing: 4, RequestedAtMs: time.Now().UnixMilli()})
	ops := telemetry.NewOps()
	startRelay(t, ctx, cfg, ops)

	for _, d := range deliveries(t, ctx, brokers, topics.Replay, 1) {
		if d.Result != record.ReplayGaveUp || d.Status != http.StatusServiceUnavailable || d.Attempts != 1 || d.FromSequence != 4 {
			t.Errorf("delivery %+v, want gave_up after one 503", d)
		}
	}
	dead := readCommitted(t, ctx, brokers, topics.DLQ, 1, func(*kgo.Record) bool { return true })
	var dl record.DeadLetter
	if err := json.Unmarshal(dead[0].Value, &dl); err != nil || dl.Reason != record.ReasonReplayUndeliverable || dl.Key != "op-9" {
		t.Errorf("dead letter %+v (%v), want op-9 with reason %s", dl, err, record.ReasonReplayUndeliverable)
	}
	var req record.ReplayRequest
	if err := json.Unmarshal(dl.Payload, &req); err != nil || req.FirstMissing != 4 {
		t.Errorf("the dead letter's payload %q is not the request (%v)", dl.Payload, err)
	}
	if n := counterSum(t, ops, "driftguard_replay_give_ups_total"); n != 1 {
		t.Errorf("driftguard_replay_give_ups_total = %v, want 1", n)
	}
}

// A relay stopped while its POST waits for the publisher records nothing:
// the next relay sends the request again with the same webhook-id, so the
// publisher can tell it is the same request, and records it once.
func TestRelayStoppedMidRequestSendsItAgainWithTheSameID(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	brokers := testenv.Kafka(t)
	var mu sync.Mutex
	var ids []string
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read whole, so that the server watches the connection and ends
		// r's context when the relay gives the request up.
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		ids = append(ids, r.Header.Get(webhook.HeaderWebhookID))
		first := len(ids) == 1
		mu.Unlock()
		if first {
			// No answer: the relay is stopped meanwhile.
			arrived <- struct{}{}
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	r := newRig(t, ctx, brokers, srv.URL)
	cfg, s, topics, cl := r.cfg, r.s, r.topics, r.cl
	request(t, ctx, cl, topics.Replay, record.ReplayRequest{Stream: s.Name, Key: "op-5", FirstMissing: 2, RequestedAtMs: time.Now().UnixMilli()})

	stop := startRelay(t, ctx, cfg, nil)
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the request never came")
	}
	stop()
	startRelay(t, ctx, cfg, nil)
	got := deliveries(t, ctx, brokers, topics.Replay, 1)
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 2 || ids[0] != ids[1] {
		t.Fatalf("the publisher received ids %v, want the same id twice", ids)
	}
	for _, d := range got {
		if d.WebhookID != ids[0] || d.Result != record.ReplayDelivered || d.Status != http.StatusNoContent || d.Attempts != 1 {
			t.Errorf("delivery %+v, want %s delivered with 204 by the second relay", d, ids[0])
		}
	}
}

// The processor asks again for a gap while it stays open; the relay sends
// each gap once. A later request for a gap the publisher accepted is
// recorded duplicate, one for an earlier gap of the key superseded, both
// without a POST, in later batches than the delivery; a later gap of the
// key is sent. Every record of a gap carries the same webhook-id. A relay
// started again remembers a gap accepted before its group's offsets.
func TestRelaySendsEachGapOnce(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	brokers := testenv.Kafka(t)
	pub := newPublisher(t, 0)
	srv := httptest.NewServer(pub)
	defer srv.Close()
	r := newRig(t, ctx, brokers, srv.URL)
	cfg, s, topics, cl := r.cfg, r.s, r.topics, r.cl
	ops := telemetry.NewOps()
	stop := startRelay(t, ctx, cfg, ops)

	now := time.Now().UnixMilli()
	ask := func(key string, from int64) record.ReplayRequest {
		now++
		return record.ReplayRequest{Stream: s.Name, Key: key, FirstMissing: from, RequestedAtMs: now}
	}
	// Each step waits for the one before to be recorded, so that each is
	// decided in a batch of its own, from what the relay remembers.
	steps := [][]record.ReplayRequest{
		{ask("op-1", 3)},
		{ask("op-1", 3), ask("op-7", 2)},
		{ask("op-1", 2)},
		{ask("op-1", 4)},
	}
	var got map[string]record.ReplayDelivery
	n := 0
	for _, step := range steps {
		request(t, ctx, cl, topics.Replay, step...)
		n += len(step)
		got = deliveries(t, ctx, brokers, topics.Replay, n)
	}

	results := map[string][]string{}
	for _, d := range got {
		if d.WebhookID != record.ReplayWebhookID(s.Name, d.Key, d.FromSequence) {
			t.Errorf("%s recorded webhook-id %s, want its gap's", d.RequestID, d.WebhookID)
		}
		gap := fmt.Sprintf("%s from %d", d.Key, d.FromSequence)
		results[gap] = append(results[gap], d.Result)
	}
	for gap := range results {
		slices.Sort(results[gap])
	}
	want := map[string][]string{
		"op-1 from 3": {record.ReplayDelivered, record.ReplayDuplicate},
		"op-7 from 2": {record.ReplayDelivered},
		"op-1 from 2": {record.ReplaySuperseded},
		"op-1 from 4": {record.ReplayDelivered},
	}
	if !reflect.DeepEqual(results, want) {
		t.Errorf("results by gap %v, want %v", results, want)
	}
	if n := counterSum(t, ops, "driftguard_replay_duplicates_total"); n != 1 {
		t.Errorf("driftguard_replay_duplicates_total = %v, want 1", n)
	}
	if n := counterSum(t, ops, "driftguard_replay_superseded_total"); n != 1 {
		t.Errorf("driftguard_replay_superseded_total = %v, want 1", n)
	}

	// op-7's delivery was read, and its offset committed, by the first
	// relay; the next reads on after it, and learns of it when its
	// partitions are assigned.
	stop()
	startRelay(t, ctx, cfg, nil)
	request(t, ctx, cl, topics.Replay, ask("op-7", 2))
	for _, d := range deliveries(t, ctx, brokers, topics.Replay, n+1) {
		if _, seen := got[d.RequestID]; !seen && (d.Key != "op-7" || d.Result != record.ReplayDuplicate) {
			t.Errorf("after the restart: %+v, want op-7 from 2 duplicate", d)
		}
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if id := record.ReplayWebhookID(s.Name, "op-7", 2); pub.posts[id] != 1 {
		t.Errorf("op-7 from 2: POSTed %d times, want once", pub.posts[id])
	}
	for gap, from := range map[string]int64{"op-1 from 3": 3, "op-1 from 4": 4} {
		if id := record.ReplayWebhookID(s.Name, "op-1", from); pub.posts[id] != 1 || pub.accepted[id] != 1 {
			t.Errorf("%s: POSTed %d times, accepted %d; want once", gap, pub.posts[id], pub.accepted[id])
		}
	}
	if id := record.ReplayWebhookID(s.Name, "op-1", 2); pub.posts[id] != 0 {
		t.Errorf("the superseded gap was POSTed %d times", pub.posts[id])
	}
}

// A POST without an answer within replay.timeout is tried again, and a
// 503 with Retry-After is tried again no sooner than it asks, longer than
// any back-off of the rig; both with the same webhook-id, and delivered
// at the second attempt.
func TestRelayRetriesNoAnswerAndHonoursRetryAfter(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	brokers := testenv.Kafka(t)
	const retryAfter = time.Second
	var mu sync.Mutex
	arrivals := map[string][]time.Time{}
	keys := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		var body relay.Body
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		id := r.Header.Get(webhook.HeaderWebhookID)
		mu.Lock()
		arrivals[body.Key] = append(arrivals[body.Key], arrived)
		keys[id] = body.Key
		first := len(arrivals[body.Key]) == 1
		mu.Unlock()
		switch {
		case first && body.Key == "silent":
			// No answer: the relay's replay.timeout ends the POST, and the
			// server sees the connection close.
			<-r.Context().Done()
		case first && body.Key == "busy":
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	r := newRig(t, ctx, brokers, srv.URL)
	cfg, s, topics, cl := r.cfg, r.s, r.topics, r.cl
	s.Replay.Timeout = 300 * time.Millisecond
	now := time.Now().UnixMilli()
	request(t, ctx, cl, topics.Replay,
		record.ReplayRequest{Stream: s.Name, Key: "silent", FirstMissing: 2, RequestedAtMs: now},
		record.ReplayRequest{Stream: s.Name, Key: "busy", FirstMissing: 5, RequestedAtMs: now})
	ops := telemetry.NewOps()
	startRelay(t, ctx, cfg, ops)

	for _, d := range deliveries(t, ctx, brokers, topics.Replay, 2) {
		if d.Result != record.ReplayDelivered || d.Status != http.StatusNoContent || d.Attempts != 2 {
			t.Errorf("%s: %+v, want delivered with 204 at the second attempt", d.Key, d)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 {
		t.Errorf("webhook-ids %v, want one per key, the same on its retry", keys)
	}
	for key, times := range arrivals {
		if len(times) != 2 {
			t.Errorf("%s: %d POSTs, want 2", key, len(times))
		}
	}
	if busy := arrivals["busy"]; len(busy) == 2 && busy[1].Sub(busy[0]) < retryAfter {
		t.Errorf("the retry came %s after the 503, before its Retry-After of %s", busy[1].Sub(busy[0]), retryAfter)
	}
	for status, want := range map[string]float64{"none": 1, "503": 1} {
		if n := counterSum(t, ops, "driftguard_replay_failures_total", "status", status); n != want {
			t.Errorf("driftguard_replay_failures_total{status=%q} = %v, want %v", status, n, want)
		}
	}
}
