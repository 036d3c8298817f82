package realtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// chatAs renames the chat stream, for topics of its own on a shared
// broker, then applies change, when not nil.
func chatAs(stream string, change func(*config.Config)) func(*config.Config) {
	return func(cfg *config.Config) {
		s := cfg.Streams["chat"]
		s.Name = stream
		cfg.Streams = map[string]*config.Stream{stream: s}
		if change != nil {
			change(cfg)
		}
	}
}

// typingEvent is an `event: typing`'s data, with when it arrived.
type typingEvent struct {
	Key         string `json:"key"`
	UserID      string `json:"user_id"`
	ExpiresAtMs int64  `json:"expires_at_ms"`
	arrivedMs   int64
}

// nextTyping waits up to d for the next typing event of s, passing over
// state events; it fails the test without one.
//
// When none comes it fails with the bridge's typing metrics, which say
// where the signal went (read stale, dropped expired, ...).
func nextTyping(t *testing.T, e *bridgeEnv, s *sse, d time.Duration) typingEvent {
	t.Helper()
	until := time.After(d)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the events ended before a typing event")
			}
			if ev.event != "typing" {
				continue
			}
			te := typingEvent{arrivedMs: time.Now().UnixMilli()}
			if err := json.Unmarshal([]byte(ev.data), &te); err != nil {
				t.Fatalf("typing data %q: %v", ev.data, err)
			}
			return te
		case <-until:
			t.Fatalf("no typing event within %s; the bridge's typing metrics:\n%s", d, metricLines(t, e, "driftguard_bridge_typing_"))
			return typingEvent{}
		}
	}
}

// typingAnswer is a 202 to a typing POST.
type typingAnswer struct {
	Status      string `json:"status"`
	ExpiresAtMs int64  `json:"expires_at_ms"`
}

// postTyping POSTs tok's user typing in conv, from device when given,
// and returns the status and the 202's body.
func (e *bridgeEnv) postTyping(stream, conv, tok, body string, device ...string) (int, typingAnswer) {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, fmt.Sprintf("%s/v1/streams/%s/entities/%s/typing", e.url, stream, conv), strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	for _, d := range device {
		req.Header.Set("X-Driftguard-Device", d)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a typingAnswer
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusAccepted {
		if err := json.Unmarshal(data, &a); err != nil {
			e.t.Fatalf("202 %q: %v", data, err)
		}
	}
	return resp.StatusCode, a
}

// typedAsIngest writes a typing event to the stream's ephemeral topic as
// ingest routes a typing webhook there, received at receivedAt.
func (e *bridgeEnv) typedAsIngest(stream, conv, user string, receivedAt time.Time) {
	e.t.Helper()
	id := fmt.Sprintf("ingest-%s-%d", user, receivedAt.UnixNano())
	body := fmt.Sprintf(`{"event_id":%q,"type":"typing","conversation_id":%q,"user_id":%q}`, id, conv, user)
	rec := kafka.NewInput(naming.Prefixes{}.For(stream).Ephemeral, []byte(stream), []byte("standard-webhooks"), []byte(body),
		kafka.InputFields{Key: conv, EventID: id, Type: "typing"}, receivedAt)
	if err := e.cl.ProduceSync(e.ctx, &rec.Record).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// Typing on the real broker: a member's typing reaches the other members
// following the conversation (alone, or the whole stream) with its
// expiry, not the typist, and not a non-member; a second signal within
// bridge.typing_rate is coalesced; a non-member's typing (refused at the
// POST, or arriving from ingest) and one read after its expiry reach no
// one; a client connecting after the expiry does not get it, and none is
// ever written past its expires_at_ms. Nothing typed is in a durable
// topic.
func TestTypingReachesMembersUntilItExpires(t *testing.T) {
	brokers := testenv.Kafka(t)
	stream := testenv.UniqueName("chat")
	// Long enough for a loaded CI machine: a signal read after it is
	// dropped as stale, which a 2 s TTL saw there twice.
	const ttl = 6 * time.Second
	e := newBridgeEnv(t, brokers, chatAs(stream, func(cfg *config.Config) { cfg.Bridge.TypingTTL = ttl }), "chat")
	e.publish(stream, "room", 1, chatState(0, "alice", "bob"))
	e.publish(stream, "other", 1, chatState(0, "alice", "erin"))
	tok := map[string]string{}
	for _, u := range []string{"alice", "bob", "erin"} {
		tok[u] = e.token(u, stream)
	}
	testenv.WaitFor(t, e.ctx, "both rooms", func() bool {
		return e.get("/v1/streams/"+stream+"/entities/room", tok["bob"], nil) == http.StatusOK &&
			e.get("/v1/streams/"+stream+"/entities/other", tok["erin"], nil) == http.StatusOK
	})
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	open := func(user, key string) *sse {
		cursor, _ := e.snapshot(stream, tok[user], 10)
		s, status := e.open(ctx, stream, tok[user], cursor, key)
		if status != http.StatusOK {
			t.Fatalf("%s's events (key %q): %d", user, key, status)
		}
		t.Cleanup(s.close)
		return s
	}
	bobRoom, bobAll, aliceRoom, erinAll := open("bob", "room"), open("bob", ""), open("alice", "room"), open("erin", "")
	// Connected: the bridge counts them before any typing is sent.
	testenv.WaitFor(t, e.ctx, "four clients", func() bool { return metricValue(t, e, `driftguard_bridge_clients{stream="`+stream+`"}`) == 4 })

	// A non-member cannot type; nor can anyone with a body that is not {}.
	if status, _ := e.postTyping(stream, "room", tok["erin"], "{}"); status != http.StatusForbidden {
		t.Errorf("erin typing in room: %d, want 403", status)
	}
	if status, _ := e.postTyping(stream, "room", tok["alice"], "[1]"); status != http.StatusUnprocessableEntity {
		t.Errorf("a body of [1]: %d, want 422", status)
	}
	// A device header that is not the token's device is refused.
	withDevice, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "streams": []string{stream},
		"exp": time.Now().Add(time.Hour).Unix(), "device": "alice-phone"}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := e.postTyping(stream, "room", withDevice, "{}", "alice-laptop"); status != http.StatusForbidden {
		t.Errorf("a device header other than the token's: %d, want 403", status)
	}
	// A non-member's typing from ingest is read, and shown to no one.
	e.typedAsIngest(stream, "room", "erin", time.Now())

	status, first := e.postTyping(stream, "room", tok["alice"], "{}")
	if status != http.StatusAccepted || first.Status != "sent" {
		t.Fatalf("alice typing: %d %+v, want 202 sent", status, first)
	}
	if status, again := e.postTyping(stream, "room", tok["alice"], ""); status != http.StatusAccepted || again.Status != "coalesced" || abs(again.ExpiresAtMs-first.ExpiresAtMs) > 10 {
		t.Errorf("alice typing again at once: %d %+v, want 202 coalesced until %d", status, again, first.ExpiresAtMs)
	}
	for name, s := range map[string]*sse{"bob following room": bobRoom, "bob following the stream": bobAll} {
		got := nextTyping(t, e, s, 30*time.Second)
		if got.Key != "room" || got.UserID != "alice" || got.ExpiresAtMs != first.ExpiresAtMs {
			t.Errorf("%s got %+v, want alice in room until %d (erin is no member)", name, got, first.ExpiresAtMs)
		}
		if got.ExpiresAtMs-got.arrivedMs < 0 {
			t.Errorf("%s got a typing %d ms past its expiry", name, got.arrivedMs-got.ExpiresAtMs)
		}
		// A measurement, not an assertion: produce to arrival.
		t.Logf("%s got alice's typing %d ms after the bridge produced it", name, got.arrivedMs-(got.ExpiresAtMs-ttl.Milliseconds()))
	}

	// From ingest: bob's typing reaches alice; one read after its expiry
	// (a bridge that lags) is dropped.
	e.typedAsIngest(stream, "room", "bob", time.Now().Add(-2*ttl))
	e.typedAsIngest(stream, "room", "bob", time.Now())
	got := nextTyping(t, e, aliceRoom, 30*time.Second)
	if got.UserID != "bob" || got.ExpiresAtMs <= got.arrivedMs {
		t.Errorf("alice got %+v at %d, want bob's fresh typing (not alice's own, not erin's, not the stale one)", got, got.arrivedMs)
	}
	// Each of the four signals produced so far was timed from its
	// production, the stale one, two TTLs old, past the last bucket.
	delay := `driftguard_bridge_typing_read_delay_seconds_`
	series := func(suffix string) float64 { return metricValue(t, e, delay+suffix) }
	if n, late := series(`count{stream="`+stream+`"}`), series(`bucket{stream="`+stream+`",le="+Inf"}`)-series(`bucket{stream="`+stream+`",le="10"}`); n != 4 || late != 1 {
		t.Errorf("read delays: %v observed, %v over 10 s; want 4, 1\n%s", n, late, metricLines(t, e, delay))
	}

	// After the expiry: a new client of bob's gets nothing of it, and the
	// next typing it and the old client get is alice's next one.
	for time.Now().UnixMilli() < first.ExpiresAtMs+100 {
		time.Sleep(50 * time.Millisecond)
	}
	late := open("bob", "room")
	status, second := e.postTyping(stream, "room", tok["alice"], "{}")
	if status != http.StatusAccepted || second.Status != "sent" {
		t.Fatalf("alice typing after the expiry: %d %+v", status, second)
	}
	for name, s := range map[string]*sse{"bob's client from before": bobRoom, "bob's client from after the expiry": late} {
		if got := nextTyping(t, e, s, 30*time.Second); got.ExpiresAtMs != second.ExpiresAtMs || got.ExpiresAtMs < got.arrivedMs {
			t.Errorf("%s got %+v at %d, want alice's second typing until %d", name, got, got.arrivedMs, second.ExpiresAtMs)
		}
	}
	// Erin, a member of another room only, followed the whole stream and
	// got no typing at all: her next event would be one.
	select {
	case ev := <-erinAll.events:
		if ev.event == "typing" {
			t.Errorf("erin, no member of room, got %s", ev.data)
		}
	default:
	}
	for outcome, want := range map[string]float64{"not_member": 1, "stale": 1, "shown": 3} {
		if got := metricValue(t, e, fmt.Sprintf(`driftguard_bridge_typing_read_total{outcome=%q,stream=%q}`, outcome, stream)); got != want {
			t.Errorf("typing read %s: %v, want %v", outcome, got, want)
		}
	}

	// Nothing typed is in a durable topic; the ephemeral topic holds
	// alice's two signals, produced by the bridge.
	topics := naming.Prefixes{}.For(stream)
	for _, topic := range []string{topics.In, topics.Outcomes, topics.State, topics.Table, topics.DLQ} {
		for _, r := range testenv.ReadTopic(t, brokers, topic) {
			if string(kafka.Header(r, record.HeaderType)) == "typing" || bytes.Contains(r.Value, []byte(`"typing"`)) {
				t.Errorf("%s holds a typing record: %s", topic, r.Value)
			}
		}
	}
	var byBridge []string
	for _, r := range testenv.ReadTopic(t, brokers, topics.Ephemeral) {
		if string(kafka.Header(r, record.HeaderScheme)) == record.SchemeBridge {
			byBridge = append(byBridge, string(r.Value))
		}
	}
	if len(byBridge) != 2 || !strings.Contains(byBridge[0], `"user_id":"alice"`) || !strings.Contains(byBridge[0], `"conversation_id":"room"`) {
		t.Errorf("the bridge produced %v, want alice's two typing signals in room", byBridge)
	}
}

func abs(n int64) int64 { return max(n, -n) }

// metricValue reads one series of the bridge's /metrics, 0 when absent.
func metricValue(t *testing.T, e *bridgeEnv, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, e), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// metricLines are the bridge's series whose names start with prefix, one
// a line.
func metricLines(t *testing.T, e *bridgeEnv, prefix string) string {
	t.Helper()
	var lines []string
	for _, line := range strings.Split(scrape(t, e), "\n") {
		if strings.HasPrefix(line, prefix) {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// scrape is the bridge's /metrics page.
func scrape(t *testing.T, e *bridgeEnv) string {
	t.Helper()
	resp, err := http.Get(e.opsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// Behind a load balancer: a member's typing POSTed to one bridge reaches
// the other member connected to another, on the real broker.
func TestTypingCrossesBridges(t *testing.T) {
	brokers := testenv.Kafka(t)
	stream := testenv.UniqueName("chat")
	a := newBridgeEnv(t, brokers, chatAs(stream, nil), "chat")
	b := *a
	b.start()
	a.publish(stream, "room", 1, chatState(0, "alice", "bob"))
	alice, bob := a.token("alice", stream), a.token("bob", stream)
	for _, e := range []*bridgeEnv{a, &b} {
		testenv.WaitFor(t, e.ctx, "the room", func() bool { return e.get("/v1/streams/"+stream+"/entities/room", bob, nil) == http.StatusOK })
	}
	ctx, cancel := context.WithTimeout(a.ctx, time.Minute)
	defer cancel()
	cursor, _ := b.snapshot(stream, bob, 10)
	s, status := b.open(ctx, stream, bob, cursor, "room")
	if status != http.StatusOK {
		t.Fatalf("bob's events on the second bridge: %d", status)
	}
	defer s.close()
	testenv.WaitFor(t, ctx, "bob connected", func() bool { return metricValue(t, &b, `driftguard_bridge_clients{stream="`+stream+`"}`) == 1 })
	status, sent := a.postTyping(stream, "room", alice, "{}")
	if status != http.StatusAccepted {
		t.Fatalf("alice typing on the first bridge: %d", status)
	}
	if got := nextTyping(t, &b, s, 30*time.Second); got.UserID != "alice" || got.ExpiresAtMs != sent.ExpiresAtMs {
		t.Errorf("bob on the second bridge got %+v, want alice's typing until %d", got, sent.ExpiresAtMs)
	}
}
