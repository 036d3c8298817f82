package realtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
)

// typingQueue is how many typing events a client may have waiting for
// its connection; more are dropped. A client that is behind on its
// writes is behind on what typing would show, too.
const typingQueue = 8

// typingSignal is one typing shown: the same SSE message for every
// client it goes to.
type typingSignal struct {
	key, user   string
	expiresAtMs int64
	frame       []byte
}

// readTyping reads the stream's ephemeral topic from its end, never its
// history, until ctx ends, and shows each typing signal; until it learns
// where the topic ends it tries again every second.
func (b *Bridge) readTyping(ctx context.Context, st *stream) error {
	for {
		err := b.readTypingFromEnd(ctx, st)
		if ctx.Err() != nil {
			return nil
		}
		b.log.Warn("reading typing failed; starting again from the topic's end", "topic", st.typing.topic, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (b *Bridge) readTypingFromEnd(ctx context.Context, st *stream) error {
	ts := st.typing
	ends, err := b.adm.ListEndOffsets(ctx, ts.topic)
	if err != nil {
		return err
	}
	if err := ends.Error(); err != nil {
		return err
	}
	start := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { start[o.Partition] = kgo.NewOffset().At(o.Offset) })
	if len(start) == 0 {
		return fmt.Errorf("topic %s has no partitions", ts.topic)
	}
	// A reader that falls behind the topic's retention goes on from its
	// end: what it skipped would have expired.
	cl, err := b.reader("bridge-"+ts.topic, b.ops.Registry, ts.topic, start, liveReaderWait,
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ts.reading.Store(true)
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		// franz-go retries what it can; the rest is logged, as the state
		// readers do, and the partitions keep flowing.
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				b.log.Debug("fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) { b.receiveTyping(st, r) })
	}
}

// receiveTyping shows one record of the ephemeral topic, if it is a
// current member's typing, not yet expired, and not within
// bridge.typing_rate of the last one shown of them in the conversation.
func (b *Bridge) receiveTyping(st *stream, r *kgo.Record) {
	ts := st.typing
	name := st.cfg.Name
	if r.Attrs.IsControl() {
		return
	}
	key, user, atMs, ok := ts.decode(r)
	if !ok {
		b.typingMetrics.read.WithLabelValues(name, "undecodable").Inc()
		return
	}
	if key == "" {
		return // another ephemeral type
	}
	nowMs := b.now().UnixMilli()
	b.typingMetrics.readDelay.WithLabelValues(name).Observe(float64(max(0, nowMs-atMs)) / 1000)
	expiresAtMs := atMs + ts.ttl.Milliseconds()
	if nowMs >= expiresAtMs {
		// Read after its expiry (the bridge lagged): it would show a
		// typing that has already stopped.
		b.typingMetrics.read.WithLabelValues(name, "stale").Inc()
		return
	}
	e, held := st.store.Load().get(key)
	if !held || e.access == nil || !e.access.member(user) {
		b.typingMetrics.read.WithLabelValues(name, "not_member").Inc()
		return
	}
	if ok, _ := ts.shown.pass(typingKey(key, user)); !ok {
		b.typingMetrics.read.WithLabelValues(name, "coalesced").Inc()
		return
	}
	b.typingMetrics.read.WithLabelValues(name, "shown").Inc()
	sig := &typingSignal{key: key, user: user, expiresAtMs: expiresAtMs}
	sig.frame = fmt.Appendf(nil, "event: typing\ndata: {\"key\":%s,\"user_id\":%s,\"expires_at_ms\":%d}\n\n",
		quoteJSON(key), quoteJSON(user), expiresAtMs)
	ts.show(sig, e.access, func(reason string) { b.typingMetrics.dropped.WithLabelValues(name, reason).Inc() })
}

// decode reads a typing record: its conversation, its user, and when it
// was produced (the dg-received-at header, else the record's time). The
// key is empty for a record of another ephemeral type; ok is false for a
// typing record that cannot be read.
func (ts *typingStream) decode(r *kgo.Record) (key, user string, atMs int64, ok bool) {
	typing := ts.stream.Assign.Typing
	doc, err := envelope.Parse(r.Value)
	if err != nil {
		return "", "", 0, false
	}
	defer doc.Release()
	typ := string(kafka.Header(r, record.HeaderType))
	if typ == "" {
		typ, _ = doc.EventType(ts.stream)
	}
	if typ != typing.Type {
		return "", "", 0, true
	}
	key = string(r.Key)
	if key == "" {
		key, _ = doc.OptionalString(ts.stream.KeyPointer(typ))
	}
	user, _ = doc.OptionalString(typing.User)
	atMs = r.Timestamp.UnixMilli()
	if v, err := strconv.ParseInt(string(kafka.Header(r, record.HeaderReceivedAt)), 10, 64); err == nil {
		atMs = v
	}
	return key, user, atMs, key != "" && user != ""
}

// show offers sig to the clients that may see it: those following the
// conversation and those following the whole stream, of its current
// members (in a), but not the typist's own. A client whose queue is full
// does not get it.
func (ts *typingStream) show(sig *typingSignal, a *access, drop func(reason string)) {
	offer := func(c *client) {
		if c.q.user.Subject == sig.user {
			return
		}
		select {
		case c.typing <- sig:
		default:
			drop("queue_full")
		}
	}
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	for c := range ts.byKey[sig.key] {
		if a.member(c.q.user.Subject) {
			offer(c)
		}
	}
	for _, u := range a.members {
		for c := range ts.byUser[u] {
			offer(c)
		}
	}
}

// followTyping makes the typing of c's conversations reach c, until the
// function it returns is called; nothing on a stream without typing.
func (b *Bridge) followTyping(c *client) (unfollow func()) {
	ts := c.q.stream.typing
	if ts == nil {
		return func() {}
	}
	c.typing = make(chan *typingSignal, typingQueue)
	index, at := ts.byUser, c.q.user.Subject
	if c.key != "" {
		index, at = ts.byKey, c.key
	}
	ts.mu.Lock()
	set := index[at]
	if set == nil {
		set = map[*client]struct{}{}
		index[at] = set
	}
	set[c] = struct{}{}
	ts.mu.Unlock()
	return func() {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		delete(index[at], c)
		if len(index[at]) == 0 {
			delete(index, at)
		}
	}
}

// sendTyping writes a typing event to the client, unless it has expired
// meanwhile: a client never receives a typing past its expires_at_ms.
func (c *client) sendTyping(sig *typingSignal) error {
	name := c.q.stream.cfg.Name
	if c.b.now().UnixMilli() >= sig.expiresAtMs {
		c.b.typingMetrics.dropped.WithLabelValues(name, "expired").Inc()
		return nil
	}
	at := time.Since(c.clock)
	if err := c.writeRun(at); err != nil {
		return err
	}
	c.extendDeadline(at)
	if _, err := c.q.w.Write(sig.frame); err != nil {
		return err
	}
	c.b.typingMetrics.sent.WithLabelValues(name).Inc()
	return c.flush()
}
