package main

// Clients' writes through the bridge on the real broker, decided by the
// shipped runtime: every answer a send or a receipt can get, and the
// record the bridge writes.

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// hotBurst is the rig's per-conversation burst, with a refill too slow to
// matter (one token per 100 s): "hot" is sent this many, then one more;
// "room" takes about half of it, whatever retries the pending send needs.
const hotBurst = 20

func TestBridgeSendAnswers(t *testing.T) {
	r := startSendRig(t, testenv.Kafka(t), func(cfg *config.Config) {
		cfg.Bridge.SendWait = 2 * time.Second
		cfg.Bridge.SendRate.PerConversation = config.TokenBucket{Rate: 0.01, Burst: hotBurst}
	})
	r.addMembers(t, "room", "alice", "bob")
	r.addMembers(t, "hot", "alice")
	alice, bob, carol := r.token("alice", "alice-phone"), r.token("bob", "bob-laptop"), r.token("carol", "carol-phone")
	msg := func(id string) map[string]string {
		return map[string]string{"client_message_id": id, "body": "hello " + id}
	}

	// 201: applied, with the sequence and the message id.
	first := r.send(t, "room", alice, msg("c1"))
	if first.status != http.StatusCreated || first.Status != "applied" || first.ConversationSeq != 1 || first.MessageID != "room:1" ||
		first.ClientMessageID != "c1" || first.AcceptedAtMs == 0 || first.EventID == "" {
		t.Fatalf("first send: %s", first)
	}
	// 200: a retry gets the original result, under a new event id.
	retry := r.send(t, "room", alice, msg("c1"))
	if retry.status != http.StatusOK || retry.Status != "duplicate" || retry.ConversationSeq != 1 || retry.MessageID != "room:1" ||
		retry.AcceptedAtMs != first.AcceptedAtMs || retry.EventID == first.EventID {
		t.Fatalf("retry: %s; first %s", retry, first)
	}
	// The same client id from another device is another message.
	if other := r.send(t, "room", bob, msg("c1")); other.status != http.StatusCreated || other.ConversationSeq != 2 {
		t.Fatalf("bob's c1: %s", other)
	}
	// 403 not_member: the processor's decision.
	if a := r.send(t, "room", carol, msg("c9")); a.status != http.StatusForbidden || !a.problemIs("not_member") {
		t.Fatalf("carol: %s", a)
	}
	// 422: the stream's schema, and fields only the bridge sets.
	if a := r.send(t, "room", alice, map[string]any{"client_message_id": "c3", "body": 42}); a.status != http.StatusUnprocessableEntity || !pointsAt(a, "/body") {
		t.Fatalf("a number as the body: %s", a)
	}
	if a := r.send(t, "room", alice, map[string]any{"client_message_id": "c3", "body": "x", "sender_id": "bob"}); a.status != http.StatusUnprocessableEntity || !pointsAt(a, "/sender_id") {
		t.Fatalf("a sender of the client's: %s", a)
	}
	// 413: over the stream's limits.max_body_bytes.
	big := strings.Repeat("x", int(r.s.Limits.MaxBodyBytes))
	if a := r.send(t, "room", alice, map[string]string{"client_message_id": "c4", "body": big}); a.status != http.StatusRequestEntityTooLarge || !a.problemIs("too_large") {
		t.Fatalf("a large body: %s", a)
	}
	// The device: from the claim, else the header; never two.
	if a := r.send(t, "room", r.token("alice", ""), msg("c5")); a.status != http.StatusBadRequest || !a.problemIs("device_required") {
		t.Fatalf("no device: %s", a)
	}
	if a := r.send(t, "room", alice, msg("c5"), realtime.DeviceHeader, "bob-laptop"); a.status != http.StatusForbidden || !a.problemIs("device_mismatch") {
		t.Fatalf("another device in the header: %s", a)
	}
	if a := r.send(t, "room", r.token("alice", ""), msg("c5"), realtime.DeviceHeader, "alice-tablet"); a.status != http.StatusCreated || a.ConversationSeq != 3 {
		t.Fatalf("the device in the header: %s", a)
	}
	conformsTo(t, "Sent", first)
	conformsTo(t, "Sent", retry)
	checkReceipts(t, r, bob, carol)
	checkRateLimit(t, r, alice)
	checkBridgeRecord(t, r, first.EventID)

	// 202 pending while no processor decides; the retry, once one does,
	// learns the sequence the first attempt was given (room's fifth:
	// "elsewhere" of checkRateLimit was the fourth).
	r.stopProcessor()
	pending := r.send(t, "room", alice, msg("c6"))
	if pending.status != http.StatusAccepted || pending.Status != "pending" || pending.EventID == "" || pending.ClientMessageID != "c6" {
		t.Fatalf("without a processor: %s", pending)
	}
	conformsTo(t, "Pending", pending)
	if a, _ := r.post(r.ctx, "room", "receipts", bob, map[string]any{"type": "delivered", "conversation_seq": 3}); a.status != http.StatusAccepted || a.Status != "pending" {
		t.Fatalf("a receipt without a processor: %s", a)
	}
	r.startProcessor()
	if a := r.sendUntilDecided(t, "room", alice, "c6"); a.status != http.StatusOK || a.ConversationSeq != 5 || a.MessageID != "room:5" {
		t.Fatalf("the retry of a pending send: %s", a)
	}
	stream := r.s.Name
	for outcome, least := range map[string]float64{"applied": 4, "duplicate": 2, "rejected": 1, "pending": 1} {
		series := `driftguard_bridge_send_ack_seconds_count{outcome="` + outcome + `",stream="` + stream + `"}`
		if n := r.metric(series); n < least {
			t.Errorf("%s = %v, want at least %v", series, n, least)
		}
	}
}

// conformsTo fails the test when the answer's body is not the schema
// docs/openapi.yaml gives it.
func conformsTo(t *testing.T, schema string, a answer) {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var body any
	if err := json.Unmarshal(a.body, &body); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := doc.Components.Schemas[schema].Value.VisitJSON(body); err != nil {
		t.Errorf("%s is not docs/openapi.yaml's %s: %v", a, schema, err)
	}
}

// pointsAt reports whether a problem's errors locate pointer.
func pointsAt(a answer, pointer string) bool {
	for _, e := range a.Errors {
		if e.Pointer == pointer {
			return true
		}
	}
	return false
}

// checkReceipts: applied, stale, not a member, ahead of the conversation,
// and a body that is no receipt.
func checkReceipts(t *testing.T, r *sendRig, bob, carol string) {
	t.Helper()
	for _, c := range []struct {
		tok    string
		body   any
		status int
		want   string
	}{
		{bob, map[string]any{"type": "read", "conversation_seq": 2}, http.StatusOK, "applied"},
		{bob, map[string]any{"type": "read", "conversation_seq": 1}, http.StatusOK, "stale"},
		{bob, map[string]any{"type": "delivered", "conversation_seq": 2}, http.StatusOK, "applied"},
		{carol, map[string]any{"type": "read", "conversation_seq": 1}, http.StatusForbidden, "not_member"},
		{bob, map[string]any{"type": "read", "conversation_seq": 99}, http.StatusConflict, "ahead_of_conversation"},
		{bob, map[string]any{"type": "seen", "conversation_seq": 1}, http.StatusUnprocessableEntity, "schema"},
		{bob, map[string]any{"type": "read", "conversation_seq": 1.5}, http.StatusUnprocessableEntity, "schema"},
		{bob, map[string]any{"type": "read", "conversation_seq": 1, "user_id": "alice"}, http.StatusBadRequest, "json"},
	} {
		a, err := r.post(r.ctx, "room", "receipts", c.tok, c.body)
		if err != nil {
			t.Fatal(err)
		}
		if a.status != c.status || (c.status == http.StatusOK && a.Status != c.want) || (c.status != http.StatusOK && !a.problemIs(c.want)) {
			t.Errorf("receipt %v: %s; want %d %s", c.body, a, c.status, c.want)
		}
		if a.status == http.StatusOK {
			conformsTo(t, "Receipted", a)
		}
	}
}

// checkRateLimit: a conversation past its burst is answered 429 with the
// wait for its next token; another conversation is not held up.
func checkRateLimit(t *testing.T, r *sendRig, alice string) {
	t.Helper()
	for i := range hotBurst {
		if a := r.send(t, "hot", alice, map[string]string{"client_message_id": "h" + strconv.Itoa(i), "body": "b"}); a.status != http.StatusCreated {
			t.Fatalf("hot send %d within the burst: %s", i, a)
		}
	}
	a := r.send(t, "hot", alice, map[string]string{"client_message_id": "over", "body": "b"})
	wait, _ := strconv.Atoi(a.header.Get("Retry-After"))
	if a.status != http.StatusTooManyRequests || !a.problemIs("rate_limited") || wait < 1 || wait > 100 {
		t.Fatalf("over the burst: %s, Retry-After %q", a, a.header.Get("Retry-After"))
	}
	if a := r.send(t, "room", alice, map[string]string{"client_message_id": "elsewhere", "body": "b"}); a.status != http.StatusCreated {
		t.Fatalf("another conversation: %s", a)
	}
}

// checkBridgeRecord: the record of a send is ingest's shape, keyed by the
// conversation, with the event id of the answer in its header and its
// body, and dg-scheme bridge.
func checkBridgeRecord(t *testing.T, r *sendRig, eventID string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.ConsumeTopics(naming.Prefixes{}.For(r.s.Name).In),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, rec := range cl.PollFetches(r.ctx).Records() {
			h := map[string]string{}
			for _, kv := range rec.Headers {
				h[kv.Key] = string(kv.Value)
			}
			if h[record.HeaderEventID] != eventID {
				continue
			}
			at, err := strconv.ParseInt(h[record.HeaderReceivedAt], 10, 64)
			if string(rec.Key) != "room" || h[record.HeaderStream] != r.s.Name || h[record.HeaderType] != "message.send" ||
				h[record.HeaderScheme] != record.SchemeBridge || err != nil || at <= 0 ||
				!strings.Contains(string(rec.Value), `"event_id":"`+eventID+`"`) || !strings.Contains(string(rec.Value), `"sender_id":"alice"`) ||
				!strings.Contains(string(rec.Value), `"sender_device_id":"alice-phone"`) {
				t.Fatalf("the bridge's record: key %q headers %v value %s", rec.Key, h, rec.Value)
			}
			return
		}
	}
	t.Fatalf("no record of event %s in %s", eventID, naming.Prefixes{}.For(r.s.Name).In)
}

// BenchmarkSendAck times sends one after another, each until its 201, on
// the real broker with the shipped runtime at its default commit interval
// and fetch settings: what a sender waits for the acknowledgement that
// carries its sequence when nothing else is queued.
//
//	DRIFTGUARD_TEST_KAFKA=127.0.0.1:19092 go test -run '^$' -bench SendAck -benchtime 200x ./cmd/driftguard
func BenchmarkSendAck(b *testing.B) {
	r := startSendRig(b, testenv.Kafka(b), func(cfg *config.Config) {
		cfg.Processing.CommitInterval = 100 * time.Millisecond
		cfg.Processing.FetchMinBytes = 256 << 10
	})
	r.addMembers(b, "bench", "alice")
	tok := r.token("alice", "alice-phone")
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if a := r.send(b, "bench", tok, map[string]string{"client_message_id": strconv.Itoa(i), "body": "x"}); a.status != http.StatusCreated {
			b.Fatal(a)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Milliseconds()), "p99-ms")
}
