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

	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
	"github.com/driftguard/driftguard/relay"
)

const replaySecret = "whsec_cmVwbGF5LWxvb3Atc2VjcmV0LW9mLTMyLWJ5dGVzIQ=="

// An operation's step 3 is held back: the processor buffers step 4 and
// asks for 3; the relay POSTs the request, signed, to the publisher, which
// is down (503) for its first two tries; then it verifies the signature
// with the stream's replay secret, sends step 3 through ingest and
// answers 200. The operation completes, the publisher was asked for
// exactly sequence 3 and accepted it once, and ClickHouse's
// replay_requests shows the request delivered and filled, with no gap
// left unfilled (the analyst queries of docs/analyst-queries.md).
func TestReplayLoopFillsTheGap(t *testing.T) {
	ctx := testenv.Context(t, 3*time.Minute)
	brokers := testenv.Kafka(t)
	s := testenv.Shipped(t, "workflow")
	s.Name = testenv.UniqueName("workflow")
	s.Signature.Secrets = []string{testSecret}
	s.Limits.Partitions = 1
	steps := map[int64][]byte{}
	for seq, status := range map[int64]string{1: "queued", 2: "running", 3: "progress", 4: "completed"} {
		steps[seq] = []byte(fmt.Sprintf(`{"event_id":"op-1-%d","operation_id":"op-1","sequence":%d,"status":%q,"occurred_at":%q}`,
			seq, seq, status, time.Now().UTC().Format(time.RFC3339)))
	}

	var ingestURL string
	var mu sync.Mutex
	var asked []relay.Body
	posts, down := 0, 2
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
		if posts <= down {
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
	cfg.ClickHouse.Addr = testenv.ClickHouse(t)
	cfg.ClickHouse.Database = testenv.UniqueName("dg_test")
	cfg.ClickHouse.BatchPeriod = 100 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	conn, cl := prepare(t, ctx, cfg, brokers)
	cl.Close()
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

	db := cfg.ClickHouse.Database
	testenv.WaitFor(t, ctx, "the operation completed in ClickHouse", func() bool {
		var status string
		row := conn.QueryRow(ctx, "SELECT visitParamExtractString(state, 'status') FROM "+db+".entity_state FINAL WHERE stream = ? AND entity_key = 'op-1'", s.Name)
		return row.Scan(&status) == nil && status == "completed"
	})
	queries := analystQueries(t)
	// The analyst test's history, for its query helpers.
	h := &history{t: t, ctx: ctx, cfg: cfg, conn: conn, streams: map[string]string{"workflow": s.Name}}
	var requests [][]any
	testenv.WaitFor(t, ctx, "the request recorded delivered and filled", func() bool {
		requests = h.query(h.localize(queries["replay_requests"]))
		return len(requests) == 1 && requests[0][4] == "delivered" && requests[0][8].(int64) > 0
	})
	// entity_key, from_sequence, request_id, requested_at_ms,
	// relay_result, delivered_at_ms, last_status, post_attempts,
	// filled_at_ms.
	r := requests[0]
	if r[0] != "op-1" || r[1] != int64(3) || r[6] != int32(200) || r[7] != int32(down+1) || r[5].(int64) <= 0 {
		t.Errorf("replay_requests: %v, want op-1 from 3 delivered with 200 after %d attempts", r, down+1)
	}
	if gaps := h.query(h.localize(queries["gaps_never_filled"])); len(gaps) != 0 {
		t.Errorf("gaps never filled: %v, want none", gaps)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0].FromSequence != 3 || asked[0].Key != "op-1" || asked[0].Stream != s.Name || asked[0].Type != relay.EventType {
		t.Errorf("the publisher accepted %+v, want one request for op-1 from 3", asked)
	}
}
