package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
	"github.com/driftguard/driftguard/processors"
)

// movableClock is the edge's clock in a test that jumps days ahead.
type movableClock struct{ at atomic.Int64 } // unix nanoseconds

func (c *movableClock) now() time.Time  { return time.Unix(0, c.at.Load()) }
func (c *movableClock) set(t time.Time) { c.at.Store(t.UnixNano()) }

// E8 and E9, through ingest and the real processor of a version-less
// stream (orders: each new event id applies, so only the dedup memory
// stands between a replay and a second application). One byte-identical
// signed request sent ten times within the signature window is accepted
// ten times and decided once: one applied, nine duplicates. The same event
// sent again 75 hours later, signed with that time (the edge's clock is
// moved), is still a duplicate: the dedup window is 168 h. Sent again 170
// hours after the first, past the window, it applies again, as the docs
// say a version-less stream may: the window is what decides.
func TestFaultReplayedWebhookIsDecidedOnce(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	brokers := testenv.Kafka(t)
	s := testenv.Shipped(t, "orders")
	s.Name = testenv.UniqueName("replay")
	s.Signature.Secrets = []string{faultSecret}
	s.Limits.Partitions = 1
	cfg := testenv.OnlyStream(t, s)
	cfg.Kafka.Brokers = brokers
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	testenv.Topics(t, ctx, cfg, brokers).Close()

	clock := &movableClock{}
	first := time.Now().Truncate(time.Second)
	clock.set(first)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ops := telemetry.NewOps()
	runServices(t, ctx, "ingest and processor",
		ingest.NewService(ingest.ServiceOptions{Config: cfg, Brokers: brokers, Logger: testenv.Logger(t), Ops: ops, Listener: ln, Now: clock.now}),
		processors.NewService(processors.ServiceOptions{Config: cfg, Brokers: brokers, Logger: testenv.Logger(t), Ops: ops, InMemoryTables: true}))
	url := "http://" + ln.Addr().String() + "/v1/webhooks/" + s.Name
	outcomes := newOutcomeReader(t, brokers, naming.Prefixes{}.For(s.Name).Outcomes)

	const eventID = "evt-order-replayed"
	body := []byte(`{"event_id":"` + eventID + `","event_type":"order.created","order_id":"order-1","payload":{"total":42}}`)
	// One signed request, sent byte for byte ten times: signed at the
	// fixed time first, its signature is the same each time.
	signedOnce := &webhook.Publisher{URL: url, Secret: faultSecret, Now: func() time.Time { return first }}
	replay := func() int {
		resp, err := signedOnce.Post(ctx, "msg_replayed", body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status
	}
	for i := range 10 {
		// Spread over the window, as a replaying attacker or an eager
		// retry would: up to 4.5 minutes after the signature's time.
		clock.set(first.Add(time.Duration(i) * 30 * time.Second))
		if status := replay(); status != http.StatusAccepted {
			t.Fatalf("replay %d: status %d, want 202 (the edge is stateless; the processor decides)", i+1, status)
		}
	}
	got := outcomes.waitFor(t, ctx, eventID, 10)
	if want := []record.Result{record.Applied, record.Duplicate, record.Duplicate, record.Duplicate, record.Duplicate,
		record.Duplicate, record.Duplicate, record.Duplicate, record.Duplicate, record.Duplicate}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ten replays inside the window decided %v, want one applied and nine duplicates", got)
	}

	// The publisher's retry 75 hours later: the same event, signed anew.
	publisher := &webhook.Publisher{URL: url, Secret: faultSecret, Now: clock.now}
	retry := func(after time.Duration) {
		t.Helper()
		clock.set(first.Add(after))
		resp, err := publisher.Post(ctx, "msg_replayed", body)
		if err != nil || resp.Status != http.StatusAccepted {
			t.Fatalf("the retry %s later: %d %v %s", after, resp.Status, err, resp.Body)
		}
	}
	retry(75 * time.Hour)
	if got := outcomes.waitFor(t, ctx, eventID, 11); got[10] != record.Duplicate {
		t.Errorf("the retry 75h later was decided %s, want duplicate (limits.dedup_window is %s)", got[10], s.Limits.DedupWindow)
	}
	retry(170 * time.Hour)
	if got := outcomes.waitFor(t, ctx, eventID, 12); got[11] != record.Applied {
		t.Errorf("the retry 170h later, past the %s window, was decided %s, want applied", s.Limits.DedupWindow, got[11])
	}
}

// outcomeReader reads a stream's committed outcomes from the start.
type outcomeReader struct {
	cl    *kgo.Client
	byID  map[string][]record.Result
	topic string
}

func newOutcomeReader(t *testing.T, brokers []string, topic string) *outcomeReader {
	t.Helper()
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &outcomeReader{cl: cl, byID: map[string][]record.Result{}, topic: topic}
}

// waitFor reads until event id has n decisions and returns them in log
// order; more than n fails the test.
func (r *outcomeReader) waitFor(t *testing.T, ctx context.Context, id string, n int) []record.Result {
	t.Helper()
	for len(r.byID[id]) < n {
		fetches := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d decisions of %s, want %d: %v", r.topic, len(r.byID[id]), id, n, r.byID[id])
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			var o record.Outcome
			if err := json.Unmarshal(rec.Value, &o); err != nil {
				t.Fatalf("%s: %v", r.topic, err)
			}
			r.byID[o.EventID] = append(r.byID[o.EventID], o.Outcome)
		})
	}
	if len(r.byID[id]) > n {
		t.Fatalf("%s: %d decisions of %s, want %d: %v", r.topic, len(r.byID[id]), id, n, r.byID[id])
	}
	return r.byID[id]
}

// A captured github request replayed with new, unsigned X-GitHub-Delivery
// ids is the same event, decided `duplicate` by the processor; so is
// GitHub's own redelivery (same body, same id). Another body under a used
// delivery id is another event. The stream has no event id pointer, as
// GitHub's bodies carry none of their own, and is versioned, so a replay
// that slipped past dedup would be `stale`, not `duplicate`: the outcome
// tells the two apart.
func TestFaultGitHubReplaysWithNewDeliveryIDsAreDuplicates(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	brokers := testenv.Kafka(t)
	s := testenv.Shipped(t, "presence")
	s.Name = testenv.UniqueName("ghreplay")
	s.Signature.Scheme, s.Signature.Secrets = config.SchemeGitHub, []string{faultSecret}
	s.EventID = ""
	s.Limits.Partitions = 1
	cfg := testenv.OnlyStream(t, s)
	cfg.Kafka.Brokers = brokers
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	testenv.Topics(t, ctx, cfg, brokers).Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ops := telemetry.NewOps()
	runServices(t, ctx, "ingest and processor",
		ingest.NewService(ingest.ServiceOptions{Config: cfg, Brokers: brokers, Logger: testenv.Logger(t), Ops: ops, Listener: ln}),
		processors.NewService(processors.ServiceOptions{Config: cfg, Brokers: brokers, Logger: testenv.Logger(t), Ops: ops, InMemoryTables: true}))
	url := "http://" + ln.Addr().String() + "/v1/webhooks/" + s.Name
	signer, err := webhook.NewSigner(config.SchemeGitHub, faultSecret)
	if err != nil {
		t.Fatal(err)
	}
	// send posts body signed under the delivery id signedAs, with the
	// X-GitHub-Delivery header then set to sentAs, and returns the event
	// id the edge took it by.
	send := func(signedAs, sentAs string, body []byte) string {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		signer.Sign(req.Header, signedAs, body, time.Now())
		req.Header.Set(webhook.HeaderGitHubDelivery, sentAs)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a ingest.Accepted
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("delivery %s: status %d, %v", sentAs, resp.StatusCode, err)
		}
		return a.EventID
	}

	const delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	first := testenv.Presence{EventID: "ignored", User: "octocat", Version: 1}.Body()
	sum := sha256.Sum256(first)
	firstID := "sha256:" + hex.EncodeToString(sum[:])
	for _, sentAs := range []string{delivery, "replay-1", "replay-2", "replay-3", delivery} {
		if id := send(delivery, sentAs, first); id != firstID {
			t.Fatalf("delivery %s: event id %q, want the body's digest %s", sentAs, id, firstID)
		}
	}
	second := send(delivery, delivery, testenv.Presence{EventID: "ignored", User: "octocat", Version: 2}.Body())
	if second == firstID {
		t.Fatalf("another body has the first one's event id %s", firstID)
	}

	outcomes := newOutcomeReader(t, brokers, naming.Prefixes{}.For(s.Name).Outcomes)
	if got, want := outcomes.waitFor(t, ctx, firstID, 5), []record.Result{record.Applied,
		record.Duplicate, record.Duplicate, record.Duplicate, record.Duplicate}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the request, 3 replays with new delivery ids and GitHub's redelivery were decided %v, want %v", got, want)
	}
	if got := outcomes.waitFor(t, ctx, second, 1); got[0] != record.Applied {
		t.Errorf("another body under the same delivery id was decided %s, want applied", got[0])
	}
}
