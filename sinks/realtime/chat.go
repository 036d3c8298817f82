package realtime

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/partition"
	"github.com/driftguard/driftguard/internal/record"
)

// message is one applied send, as chat catch-up serves it.
type message struct {
	Seq             int64  `json:"conversation_seq"`
	MessageID       string `json:"message_id"`
	SenderID        string `json:"sender_id"`
	SenderDeviceID  string `json:"sender_device_id"`
	ClientMessageID string `json:"client_message_id"`
	Body            string `json:"body"`
	AcceptedAtMs    int64  `json:"accepted_at_ms"`
}

// chat holds an assign stream's conversations as read from
// `<stream>.outcomes`: per conversation the index of its applied sends'
// outcome records and the bodies of the most recent ones (the window);
// each conversation_seq once, in order, however often a processor restart
// repeated its outcome record. Older messages are read back from Kafka by
// offset (history.go).
type chat struct {
	cfg    *config.Stream
	roles  map[string]config.AssignRole
	window int
	// bound is the most conversations held.
	bound int
	// fetch reads outcome records of partition p back from Kafka.
	fetch func(ctx context.Context, p int32, want []wanted, each func(w wanted, o *record.Outcome)) error
	// end is where partition p of the outcomes ends now (its high
	// watermark).
	end func(ctx context.Context, p int32) (int64, error)

	mu            sync.RWMutex
	conversations map[string]*conversation
	// starts are where each partition's log is known to start: offsets
	// below were deleted by retention.
	starts map[int32]int64
	// readAt is the offset the reader reads next in each partition.
	readAt map[int32]int64
	// wake is closed, and replaced, whenever messages arrive or the
	// reader moves on.
	wake     chan struct{}
	caughtUp atomic.Bool
	// decisions are the clients' writes waiting for their outcome.
	decisions *decisions
}

// conversation is what the bridge holds of one conversation: the index of
// every send it read, and the last window of them with their bodies, in a
// ring (recent[head] the oldest once full).
type conversation struct {
	index  index
	recent []message
	head   int
}

func newChat(s *config.Stream, window, bound int) *chat {
	return &chat{cfg: s, roles: s.Assign.Roles(), window: window, bound: bound,
		conversations: map[string]*conversation{}, starts: map[int32]int64{}, readAt: map[int32]int64{}, wake: make(chan struct{}), decisions: newDecisions()}
}

// at is the i-th oldest message of the window.
func (v *conversation) at(i int) *message { return &v.recent[(v.head+i)%len(v.recent)] }

// held is the window's position of sequence seq, or -1.
func (v *conversation) held(seq int64) int {
	n := len(v.recent)
	i := sort.Search(n, func(i int) bool { return v.at(i).Seq >= seq })
	if i < n && v.at(i).Seq == seq {
		return i
	}
	return -1
}

// keep adds message m to the window, dropping the oldest once full.
func (v *conversation) keep(m message, window int) {
	if n := len(v.recent); n > 0 && m.Seq <= v.at(n-1).Seq {
		return // repeated
	}
	if len(v.recent) < window {
		v.recent = append(v.recent, m)
		return
	}
	v.recent[v.head] = m
	v.head = (v.head + 1) % window
}

// from is the lowest sequence held, in the index or the window: the ones
// below are beyond what the bridge read.
func (v *conversation) from() int64 {
	if len(v.recent) > 0 {
		return min(v.index.first, v.at(0).Seq)
	}
	return v.index.first
}

// top is the highest sequence held.
func (v *conversation) top() int64 {
	if n := len(v.recent); n > 0 {
		return max(v.index.top(), v.at(n-1).Seq)
	}
	return v.index.top()
}

// messageOf is the message an applied send's outcome record carries.
func (c *chat) messageOf(o *record.Outcome) message {
	m := message{Seq: o.Version, MessageID: strings.Clone(o.MessageID), AcceptedAtMs: o.ReceivedAtMs}
	if doc, err := envelope.Parse(o.Payload); err == nil {
		a := &c.cfg.Assign
		text := func(pointer string) string {
			if pointer == "" {
				return ""
			}
			v, _ := doc.OptionalString(pointer)
			return strings.Clone(v)
		}
		m.SenderID, m.SenderDeviceID, m.ClientMessageID, m.Body = text(a.Send.Sender), text(a.Send.Device), text(a.Send.ClientMessageID), text(a.Send.Body)
		doc.Release()
	}
	return m
}

// isSend reports whether o is the outcome record of an applied send.
func (c *chat) isSend(o *record.Outcome) bool {
	return o.Outcome == record.Applied && o.MessageID != "" && c.roles[o.EventType] == config.RoleSend
}

// add indexes an applied send read at offset of partition, and keeps it
// in the window. Another applied decision that comes first for its
// conversation tells where the conversation's sequences stood: those up to
// its version were decided before what the bridge read.
func (c *chat) add(o *record.Outcome, partition int32, offset int64) {
	if o.Outcome != record.Applied || o.Version < 0 {
		return
	}
	send := c.isSend(o)
	var m message
	if send {
		m = c.messageOf(o)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.conversations[o.Key]
	if v == nil {
		if len(c.conversations) >= c.bound {
			return
		}
		first := o.Version + 1
		if send {
			first = o.Version
		}
		v = &conversation{index: newIndex(partition, first)}
		c.conversations[strings.Clone(o.Key)] = v
	}
	if v.index.partition != partition {
		// The topic's partitions changed: the offsets held are of another
		// partition, no longer the conversation's.
		v.index = newIndex(partition, o.Version)
	}
	if !send {
		if v.index.n == 0 {
			v.index.first = max(v.index.first, o.Version+1)
		}
		return
	}
	v.index.add(m.Seq, offset)
	v.keep(m, c.window)
	close(c.wake)
	c.wake = make(chan struct{})
}

// readTo records where the reader reads each partition next.
func (c *chat) readTo(next map[int32]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	moved := false
	for p, at := range next {
		if c.readAt[p] != at {
			c.readAt[p], moved = at, true
		}
	}
	if moved {
		close(c.wake)
		c.wake = make(chan struct{})
	}
}

// readThrough reports whether the reader has read partition p to end:
// every outcome below it that was committed is held, or was never the
// reader's (older than where it started, or deleted by retention).
func (c *chat) readThrough(p int32, end int64) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.readAt[p] >= end
}

// partitionOf is the outcomes' partition of conversation key: where the
// reader found it, else where the processors place its key; -1 before
// the reader knows the partitions.
func (c *chat) partitionOf(key string) int32 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if v := c.conversations[key]; v != nil {
		return v.index.partition
	}
	if len(c.readAt) == 0 {
		return -1
	}
	return partition.For([]byte(key), int32(len(c.readAt)))
}

// trim forgets the offsets retention has deleted: start is each
// partition's log start.
func (c *chat) trim(start map[int32]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, s := range start {
		c.starts[p] = max(c.starts[p], s)
	}
	for _, v := range c.conversations {
		if s, ok := start[v.index.partition]; ok {
			v.index.trim(s)
		}
	}
}

// read returns up to limit messages of conversation key after seq after
// for which may is true, in order, each once; next is the last sequence
// looked at (a caller pages on with after = next), and limited reports
// that messages after `after` the caller may read are no longer held: they
// lie below what the bridge read of the outcomes (retention, or
// bridge.chat_history), or retention deleted them since. Messages in the
// window come from memory, older ones from Kafka by offset.
func (c *chat) read(ctx context.Context, key string, after int64, limit int, may func(seq int64) bool) (msgs []message, next int64, limited bool, err error) {
	got := map[int64]message{}
	for round := 1; ; round++ {
		p := c.plan(key, after, limit, may)
		var missing []wanted
		for _, w := range p.want {
			if _, ok := got[w.seq]; !ok {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			err := c.fetch(ctx, p.partition, missing, func(w wanted, o *record.Outcome) {
				if o.Key == key && o.Version == w.seq && c.isSend(o) {
					got[w.seq] = c.messageOf(o)
				}
			})
			if err != nil {
				return nil, after, false, err
			}
			// Records not found were deleted by retention since they were
			// indexed: the log now starts above them. Planned again, the
			// page skips them and still serves up to limit messages.
			gone := int64(-1)
			for _, w := range missing {
				if _, ok := got[w.seq]; !ok {
					gone = w.offset
				}
			}
			if gone >= 0 && round < maxReadRounds {
				c.deleted(p.partition, gone)
				continue
			}
		}
		msgs = make([]message, 0, len(p.slots))
		limited = p.limited
		for _, s := range p.slots {
			if s.MessageID == "" {
				if s, ok := got[s.Seq]; ok {
					msgs = append(msgs, s)
				} else {
					limited = true
				}
				continue
			}
			msgs = append(msgs, s)
		}
		return msgs, p.next, limited, nil
	}
}

// maxReadRounds bounds how often one read plans again after finding
// records deleted under it.
const maxReadRounds = 3

// deleted records that the records of partition p up to offset are gone.
func (c *chat) deleted(p int32, offset int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starts[p] = max(c.starts[p], offset+1)
}

// readPlan is what one read serves: slots in sequence order, each a
// message of the window or, with only its Seq set, one to read back
// (want).
type readPlan struct {
	slots     []message
	want      []wanted
	partition int32
	next      int64
	limited   bool
}

// plan picks the messages read serves, as read describes.
func (c *chat) plan(key string, after int64, limit int, may func(seq int64) bool) readPlan {
	p := readPlan{next: after}
	c.mu.RLock()
	v := c.conversations[key]
	if v == nil {
		// Over bridge.max_entities a new conversation is not held at all.
		p.limited = len(c.conversations) >= c.bound && may(after+1)
		c.mu.RUnlock()
		return p
	}
	from, top, start := v.from(), v.top(), c.starts[v.index.partition]
	p.partition = v.index.partition
	recentFrom := top + 1
	if len(v.recent) > 0 {
		recentFrom = v.at(0).Seq
	}
	var walk *entries // in step with seq, below the window
	for seq := max(after+1, from); seq <= top && len(p.slots) < limit; seq++ {
		held, offset := false, int64(0)
		if seq < recentFrom && seq >= v.index.first && seq <= v.index.top() {
			if walk == nil {
				walk = v.index.from(seq)
			}
			_, offset, held, _ = walk.next()
		}
		p.next = seq
		if !may(seq) {
			continue
		}
		if seq >= recentFrom {
			if i := v.held(seq); i >= 0 {
				p.slots = append(p.slots, *v.at(i))
				continue
			}
		}
		if !held || offset < start {
			p.limited = true
			continue
		}
		p.slots = append(p.slots, message{Seq: seq})
		p.want = append(p.want, wanted{seq: seq, offset: offset})
	}
	c.mu.RUnlock()
	// Below what is held: only whether the caller may read any of it.
	for seq := after + 1; seq < from && !p.limited; seq++ {
		p.limited = may(seq)
	}
	p.next = max(p.next, min(from-1, top))
	return p
}

// highest is the highest sequence held of conversation key, and the
// channel closed when more messages arrive.
func (c *chat) highest(key string) (int64, <-chan struct{}) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var top int64
	if v := c.conversations[key]; v != nil {
		top = v.top()
	}
	return top, c.wake
}

// trimEvery is how often the bridge asks where the outcomes' partitions
// start, to forget the offsets retention deleted.
const trimEvery = time.Minute

// readChat reads the stream's outcomes from the log start (or from
// chat_history ago: each partition from its first record at or after that
// time) until ctx ends.
func (b *Bridge) readChat(ctx context.Context, st *stream) error {
	topic := st.outcomes
	for {
		err := b.readOutcomes(ctx, st.chat, topic)
		if ctx.Err() != nil {
			return nil
		}
		b.log.Warn("reading the outcomes for chat catch-up failed; retrying", "topic", topic, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (b *Bridge) readOutcomes(ctx context.Context, c *chat, topic string) error {
	var since kadm.ListedOffsets
	var err error
	if b.cfg.ChatHistory > 0 {
		since, err = b.adm.ListOffsetsAfterMilli(ctx, time.Now().Add(-b.cfg.ChatHistory).UnixMilli(), topic)
	} else {
		since, err = b.adm.ListStartOffsets(ctx, topic)
	}
	if err != nil {
		return err
	}
	ends, err := b.adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return err
	}
	start := map[int32]kgo.Offset{}
	next := map[int32]int64{}
	since.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Partition < 0 {
			return
		}
		at := o.Offset
		if at < 0 { // nothing after that time: from the end
			at = ends[topic][o.Partition].Offset
		}
		start[o.Partition] = kgo.NewOffset().At(at)
		next[o.Partition] = at
	})
	if len(start) == 0 {
		return fmt.Errorf("topic %s has no partitions to read: %v", topic, since.Error())
	}
	cl, err := b.reader("bridge-"+topic, b.ops.Registry, topic, start, liveReaderWait)
	if err != nil {
		return err
	}
	defer cl.Close()
	c.readTo(next)
	var o record.Outcome
	trimmed := time.Now()
	for {
		caught := true
		ends.Each(func(e kadm.ListedOffset) {
			if next[e.Partition] < e.Offset {
				caught = false
			}
		})
		if caught {
			c.caughtUp.Store(true)
		}
		if time.Since(trimmed) > trimEvery {
			trimmed = time.Now()
			b.trimChat(ctx, c, topic)
		}
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, r := range fetches.Records() {
			next[r.Partition] = r.Offset + 1
			if outcomeOf(r, &o) {
				c.add(&o, r.Partition, r.Offset)
				c.decisions.deliver(&o)
			}
		}
		c.readTo(next)
	}
}

// outcomeOf decodes outcome record r into o; false for a transaction's
// control record (a position only) or a record no reader can use.
func outcomeOf(r *kgo.Record, o *record.Outcome) bool {
	if r.Attrs.IsControl() {
		return false
	}
	payload, err := record.DecodeOutcome(r.Value, o)
	if err != nil {
		return false
	}
	o.Payload = []byte(payload)
	return true
}

// trimChat makes the chat forget the offsets below each partition's log
// start, so that its index holds no more than the topic's retention.
func (b *Bridge) trimChat(ctx context.Context, c *chat, topic string) {
	starts, err := b.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		b.log.Debug("listing the outcomes' log starts failed", "topic", topic, "err", err)
		return
	}
	at := map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			at[o.Partition] = o.Offset
		}
	})
	c.trim(at)
}
