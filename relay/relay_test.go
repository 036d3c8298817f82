package relay_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

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
	// bodies keep the body of each id.
	posts, accepted map[string]int
	bodies          map[string]relay.Body
	// inFlight and maxInFlight count each key's POSTs being answered.
	inFlight, maxInFlight map[string]int
	failed                int
	// onAccepted runs for each accepted request, outside the lock.
	onAccepted func(relay.Body)
}

func newPublisher(t *testing.T, down int) *publisher {
	return &publisher{t: t, down: down, posts: map[string]int{}, accepted: map[string]int{}, bodies: map[string]relay.Body{},
		inFlight: map[string]int{}, maxInFlight: map[string]int{}}
}

func (p *publisher) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	s.Replay.MinBackoff, s.Replay.MaxBackoff = 5*time.Millisecond, 40*time.Millisecond
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
// with back-off until it answers, each key's request in flight alone; a
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
		body := pub.bodies[d.RequestID]
		switch d.Result {
		case record.ReplayDelivered:
			if pub.accepted[d.RequestID] != 1 || d.Status != http.StatusOK {
				t.Errorf("%s accepted %d times, recorded status %d; want once, 200", d.RequestID, pub.accepted[d.RequestID], d.Status)
			}
			if body.Type != relay.EventType || body.Stream != s.Name || body.Key != d.Key || body.FromSequence != d.FromSequence {
				t.Errorf("%s: the publisher received %+v for %+v", d.RequestID, body, d)
			}
			if d.Attempts != pub.posts[d.RequestID] {
				t.Errorf("%s: %d attempts recorded, %d received", d.RequestID, d.Attempts, pub.posts[d.RequestID])
			}
		case record.ReplaySuperseded:
			if pub.posts[d.RequestID] != 0 {
				t.Errorf("superseded %s was sent %d times", d.RequestID, pub.posts[d.RequestID])
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
	for id, d := range got {
		if d.Result == record.ReplayDelivered && pub.accepted[id] != 1 {
			t.Errorf("%s accepted %d times after the restart", id, pub.accepted[id])
		}
	}
}

// counterSum is the sum of the series of the counter name in ops.
func counterSum(t *testing.T, ops *telemetry.Ops, name string) float64 {
	families, err := ops.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
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
	if d, ok := got[ids[0]]; !ok || d.Result != record.ReplayDelivered || d.Status != http.StatusNoContent || d.Attempts != 1 {
		t.Errorf("deliveries %+v, want %s delivered with 204 by the second relay", got, ids[0])
	}
}
