package main

// The replay loop end to end: a gapless workflow with a missing step, the
// processor's replay request relayed to a publisher, which answers with
// the missing step.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
	"github.com/driftguard/driftguard/relay"
)

const replaySecret = "whsec_cmVwbGF5LWxvb3Atc2VjcmV0LW9mLTMyLWJ5dGVzIQ=="

// An operation's step 3 is held back: the processor buffers step 4 and
// asks for 3; the relay POSTs the request, signed, to the publisher, which
// is down (503) for longer than limits.gap_timeout, until the processor
// has asked for the gap twice more; then it verifies the signature with
// the stream's replay secret, sends step 3 through ingest and answers
// 200. The operation completes; every POST carried the gap's one
// webhook-id, and the publisher accepted one; and ClickHouse's
// replay_requests shows each of the processor's requests, one delivered
// and the re-asks recorded without a POST (superseded or duplicate), all
// filled, with no gap left unfilled (the analyst queries of
// docs/analyst-queries.md).
func TestReplayLoopFillsTheGap(t *testing.T) {
	ctx := testenv.Context(t, 3*time.Minute)
	brokers := testenv.Kafka(t)
	s := testenv.Shipped(t, "workflow")
	s.Name = testenv.UniqueName("workflow")
	s.Signature.Secrets = []string{testSecret}
	s.Limits.Partitions = 1
	s.Limits.GapTimeout = time.Second
	steps := map[int64][]byte{}
	for seq, status := range map[int64]string{1: "queued", 2: "running", 3: "progress", 4: "completed"} {
		steps[seq] = []byte(fmt.Sprintf(`{"event_id":"op-1-%d","operation_id":"op-1","sequence":%d,"status":%q,"occurred_at":%q}`,
			seq, seq, status, time.Now().UTC().Format(time.RFC3339)))
	}

	var ingestURL string
	var mu sync.Mutex
	var asked []relay.Body
	ids := map[string]int{}
	posts := 0
	// down is whether the publisher is still down: until the processor
	// has asked for the gap three times, which takes two gap timeouts.
	var down func() bool
	publisher := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get(webhook.HeaderWebhookID), r.Header.Get(webhook.HeaderWebhookTimestamp)
		if want, err := webhook.SignatureHeader(replaySecret, id, ts, data); err != nil || r.Header.Get(webhook.HeaderWebhookSignature) != want {
			t.Errorf("replay request %s not signed with the stream's replay secret", id)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		posts++
		ids[id]++
		if down() {
			mu.Unlock()
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var body relay.Body
		if err := json.Unmarshal(data, &body); err != nil {
			t.Error(err)
		}
		asked = append(asked, body)
		mu.Unlock()
		pub := &webhook.Publisher{URL: ingestURL + "/v1/webhooks/" + s.Name, Secret: testSecret}
		if resp, err := pub.Post(r.Context(), fmt.Sprintf("op-1-%d", body.FromSequence), steps[body.FromSequence]); err != nil || resp.Status != http.StatusAccepted {
			t.Errorf("sending step %d again: %d %v", body.FromSequence, resp.Status, err)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer publisher.Close()

	s.Replay.URL, s.Replay.Secret = publisher.URL, replaySecret
	s.Replay.MinBackoff, s.Replay.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	cfg := testenv.OnlyStream(t, s)
	cfg.Kafka.Brokers = brokers
	cfg.Processing.TimerTick = 100 * time.Millisecond
	cfg.ClickHouse.Addr = testenv.ClickHouse(t)
	cfg.ClickHouse.Database = testenv.UniqueName("dg_test")
	cfg.ClickHouse.BatchPeriod = 100 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	conn, cl := prepare(t, ctx, cfg, brokers)
	cl.Close()
	db := cfg.ClickHouse.Database
	asks := func() (n uint64) {
		_ = conn.QueryRow(ctx, "SELECT count() FROM "+db+".replay_requests WHERE stream = ? AND result = 'requested'", s.Name).Scan(&n)
		return n
	}
	down = func() bool { return asks() < 3 }
	p := runPipeline(t, ctx, cfg, conn)
	ingestURL = p.url
	rel, err := relay.New(relay.Options{Config: cfg, Brokers: brokers, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runServices(t, ctx, "relay", rel)

	var ds []delivery
	for _, seq := range []int64{1, 2, 4} {
		ds = append(ds, delivery{ID: fmt.Sprintf("op-1-%d", seq), Key: "op-1", Version: seq, Body: steps[seq]})
	}
	p.send(t, ctx, ds)

	testenv.WaitFor(t, ctx, "the operation completed in ClickHouse", func() bool {
		var status string
		row := conn.QueryRow(ctx, "SELECT visitParamExtractString(state, 'status') FROM "+db+".entity_state FINAL WHERE stream = ? AND entity_key = 'op-1'", s.Name)
		return row.Scan(&status) == nil && status == "completed"
	})
	queries := analystQueries(t)
	// The analyst test's history, for its query helpers.
	h := &history{t: t, ctx: ctx, cfg: cfg, conn: conn, streams: map[string]string{"workflow": s.Name}}
	// entity_key, from_sequence, request_id, requested_at_ms,
	// relay_result, delivered_at_ms, last_status, post_attempts,
	// filled_at_ms: a row per request, once the relay recorded each.
	var requests [][]any
	testenv.WaitFor(t, ctx, "every request recorded by the relay and filled", func() bool {
		requests = h.query(h.localize(queries["replay_requests"]))
		for _, r := range requests {
			if r[4] == "requested" || r[8].(int64) == 0 {
				return false
			}
		}
		return len(requests) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	delivered := 0
	for _, r := range requests {
		if r[0] != "op-1" || r[1] != int64(3) {
			t.Errorf("replay_requests: %v, want op-1 from 3", r)
		}
		switch r[4] {
		case "delivered":
			delivered++
			if r[6] != int32(200) || r[7] != int32(posts) || r[5].(int64) <= 0 {
				t.Errorf("replay_requests: %v, want delivered with 200 after %d attempts", r, posts)
			}
		case "superseded", "duplicate":
		default:
			t.Errorf("replay_requests: %v, want each re-ask superseded or duplicate", r)
		}
	}
	if delivered != 1 {
		t.Errorf("%d requests delivered, want 1 of %d: %v", delivered, len(requests), requests)
	}
	if gaps := h.query(h.localize(queries["gaps_never_filled"])); len(gaps) != 0 {
		t.Errorf("gaps never filled: %v, want none", gaps)
	}
	if id := record.ReplayWebhookID(s.Name, "op-1", 3); len(ids) != 1 || ids[id] != posts {
		t.Errorf("webhook-ids POSTed %v, want %s on all %d POSTs", ids, id, posts)
	}
	if len(asked) != 1 || asked[0].FromSequence != 3 || asked[0].Key != "op-1" || asked[0].Stream != s.Name || asked[0].Type != relay.EventType {
		t.Errorf("the publisher accepted %+v, want one request for op-1 from 3", asked)
	}
}
