package realtime

// Typing (design §6): a member's `POST …/typing` is produced to
// `<stream>.ephemeral`, never to a durable topic; every bridge reads that
// topic from its end (typing_read.go) and writes an `event: typing` to the
// clients of the conversation's current members that follow it. Typing is
// a hint, never state: it is rate limited and coalesced, shows for
// bridge.typing_ttl, and a client behind on its writes loses it rather
// than being reset for it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
)

// typingProduceWait bounds a typing POST's wait for the leader's ack: a
// signal that takes longer is stale by the time anyone would see it.
const typingProduceWait = 2 * time.Second

// maxTypingBody bounds a typing POST's body, which is `{}`.
const maxTypingBody = 1 << 10

// TypingProducerOptions are the franz-go options of the bridge's producer
// of typing signals, a client apart from any that writes durable records.
// The leader's ack is enough (acks=1, so a typing never waits behind the
// replication of messages), without idempotence (a duplicate signal is
// harmless, and a lost one is replaced by the next keystroke), a short
// linger, and two retries within typingProduceWait at most.
func TypingProducerOptions() []kgo.Opt {
	return []kgo.Opt{
		kgo.RequiredAcks(kgo.LeaderAck()),
		kgo.DisableIdempotentWrite(),
		kgo.ProducerLinger(2 * time.Millisecond),
		kgo.RecordRetries(2),
		kgo.RecordDeliveryTimeout(typingProduceWait),
	}
}

// typingStream is an assign stream's typing: where it is produced, the
// gates that coalesce it, and the clients it may reach.
type typingStream struct {
	stream *config.Stream
	topic  string
	ttl    time.Duration
	// posted lets a user's POSTs in one conversation through once per
	// interval of bridge.typing_rate; shown does the same for the signals
	// read, so that those of another bridge's members, or of ingest, are
	// coalesced alike.
	posted, shown *gate
	// reading is set once the reader knows where the topic ends: the
	// signals produced after that reach the clients.
	reading atomic.Bool
	// mu guards the clients that follow one conversation (byKey) and
	// those that follow the whole stream (byUser, by their user).
	mu     sync.RWMutex
	byKey  map[string]map[*client]struct{}
	byUser map[string]map[*client]struct{}
}

// newTyping is stream s's typing, nil when it has no typing signal.
func (b *Bridge) newTyping(s *config.Stream, topic string) *typingStream {
	if s.Policy != config.PolicyAssign || s.Assign.Typing.Type == "" {
		return nil
	}
	every := time.Duration(float64(time.Second) / b.cfg.TypingRate)
	b.typingMetrics.serve(s.Name)
	return &typingStream{stream: s, topic: topic, ttl: b.cfg.TypingTTL, posted: newGate(every), shown: newGate(every),
		byKey: map[string]map[*client]struct{}{}, byUser: map[string]map[*client]struct{}{}}
}

// typingAnswer is the body of a 202 to a typing POST.
type typingAnswer struct {
	// Status is "sent" (produced, the leader acked) or "coalesced" (one was
	// sent within bridge.typing_rate; this one is not produced).
	Status string `json:"status"`
	// ExpiresAtMs is when the members stop showing the signal sent: a
	// client that keeps typing sends again before it.
	ExpiresAtMs int64 `json:"expires_at_ms"`
}

// postTyping produces the user's typing in a conversation they are a
// member of, and answers 202 once the partition's leader has it.
func (b *Bridge) postTyping(q *request) {
	ts := q.stream.typing
	name := q.stream.cfg.Name
	if ts == nil {
		problem.Write(q.w, http.StatusNotFound, "not_chat", fmt.Sprintf("stream %q has no typing signal (assign.typing)", name), nil)
		return
	}
	if _, ok := deviceOf(q); !ok {
		b.metrics.forbidden.WithLabelValues(name, "403").Inc()
		problem.Write(q.w, http.StatusForbidden, "device_mismatch", "X-Driftguard-Device names another device than the token's device claim", nil)
		return
	}
	if !typingBodyOK(q.r) {
		problem.Write(q.w, http.StatusUnprocessableEntity, "schema", "the body of a typing signal is {} (or nothing): the user and the conversation come from the token and the path", nil)
		return
	}
	key, user := q.r.PathValue("key"), q.user.Subject
	if e, ok := q.stream.store.Load().get(key); !ok || !q.visible(e) {
		// Alike whether the conversation exists or not.
		b.typingMetrics.posts.WithLabelValues(name, "refused").Inc()
		b.metrics.forbidden.WithLabelValues(name, "403").Inc()
		problem.Write(q.w, http.StatusForbidden, "not_member", "only a member of the conversation may type in it", nil)
		return
	}
	now := b.now()
	if ok, ago := ts.posted.pass(typingKey(key, user)); !ok {
		b.typingMetrics.posts.WithLabelValues(name, "coalesced").Inc()
		writeTyping(q.w, typingAnswer{Status: "coalesced", ExpiresAtMs: now.Add(ts.ttl - ago).UnixMilli()})
		return
	}
	if err := b.produceTyping(q.r.Context(), ts, key, user, now); err != nil {
		// The next POST may try again at once: the gate's interval is for
		// signals sent.
		ts.posted.forget(typingKey(key, user))
		b.typingMetrics.posts.WithLabelValues(name, "failed").Inc()
		b.log.Debug("typing not produced", "stream", name, "err", err)
		q.w.Header().Set("Retry-After", "1")
		problem.Write(q.w, http.StatusServiceUnavailable, "unavailable", "the typing signal was not produced; it is safe to send the next one", nil)
		return
	}
	b.typingMetrics.posts.WithLabelValues(name, "produced").Inc()
	writeTyping(q.w, typingAnswer{Status: "sent", ExpiresAtMs: now.Add(ts.ttl).UnixMilli()})
}

func writeTyping(w http.ResponseWriter, a typingAnswer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(a)
}

// typingBodyOK reports whether a typing POST's body is empty or a JSON
// object (its members are ignored).
func typingBodyOK(r *http.Request) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTypingBody+1))
	if err != nil || len(body) > maxTypingBody {
		return false
	}
	if len(body) == 0 {
		return true
	}
	var obj map[string]json.RawMessage
	return json.Unmarshal(body, &obj) == nil && obj != nil
}

// produceTyping writes user's typing in conversation key to the ephemeral
// topic as ingest would write the same event, and waits for the leader.
func (b *Bridge) produceTyping(ctx context.Context, ts *typingStream, key, user string, now time.Time) error {
	if b.typingProducer == nil {
		return errors.New("the bridge is not running")
	}
	s := ts.stream
	typ := s.Assign.Typing.Type
	id := newEventID()
	fields := map[string]any{s.KeyPointer(typ): key, s.Assign.Typing.User: user}
	if s.EventID != "" {
		fields[s.EventID] = id
	}
	if s.Type.Field != "" {
		fields[s.Type.Field] = typ
	}
	body, err := envelope.Build(fields)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, typingProduceWait)
	defer cancel()
	rec := kafka.NewInput(ts.topic, []byte(s.Name), []byte(record.SchemeBridge), body, kafka.InputFields{Key: key, EventID: id, Type: typ}, now)
	return b.typingProducer.ProduceSync(ctx, &rec.Record).FirstErr()
}

// newEventID is a random event id for an event the bridge produces.
func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// typingKey is the gates' key of user's typing in conversation key.
func typingKey(key, user string) string { return key + "\x00" + user }

// gate lets one signal of a key through per interval: the first, and the
// next one at least every after it, by the monotonic clock of the process
// (a wall clock set back would let a burst through, and another bridge's
// clock is not this one's). It keeps only the keys let through within the
// last interval or two, so its memory follows the signals of the moment,
// not every user who ever typed.
type gate struct {
	mu      sync.Mutex
	every   time.Duration
	clock   func() time.Duration
	last    map[string]time.Duration
	sweptAt time.Duration
}

func newGate(every time.Duration) *gate {
	start := time.Now()
	return &gate{every: every, clock: func() time.Duration { return time.Since(start) }, last: map[string]time.Duration{}}
}

// pass reports whether a signal of key goes through now, and how long ago
// the last one that did went through (0 when it is this one).
func (g *gate) pass(key string) (ok bool, ago time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	at := g.clock()
	if at-g.sweptAt >= g.every {
		for k, t := range g.last {
			if at-t >= g.every {
				delete(g.last, k)
			}
		}
		g.sweptAt = at
	}
	if t, held := g.last[key]; held && at-t < g.every {
		return false, at - t
	}
	g.last[key] = at
	return true, 0
}

// forget undoes the last pass of key (its signal was not sent).
func (g *gate) forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.last, key)
}
