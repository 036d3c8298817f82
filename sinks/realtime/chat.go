package realtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
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

// chat holds the recent applied sends of an assign stream's conversations,
// read from `<stream>.outcomes`: each conversation_seq once, in order,
// however often a processor restart repeated its outcome record.
type chat struct {
	cfg    *config.Stream
	roles  map[string]config.AssignRole
	window int
	// bound is the most conversations held.
	bound int

	mu            sync.RWMutex
	conversations map[string][]message
	// wake is closed, and replaced, whenever messages arrive.
	wake     chan struct{}
	caughtUp atomic.Bool
}

func newChat(s *config.Stream, window, bound int) *chat {
	return &chat{cfg: s, roles: s.Assign.Roles(), window: window, bound: bound,
		conversations: map[string][]message{}, wake: make(chan struct{})}
}

// add keeps an outcome when it is an applied send.
func (c *chat) add(o *record.Outcome) {
	if o.Outcome != record.Applied || o.MessageID == "" || c.roles[o.EventType] != config.RoleSend {
		return
	}
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
	key := strings.Clone(o.Key)
	c.mu.Lock()
	defer c.mu.Unlock()
	msgs, ok := c.conversations[key]
	if !ok && len(c.conversations) >= c.bound {
		return
	}
	i, found := slices.BinarySearchFunc(msgs, m.Seq, func(a message, seq int64) int { return int(a.Seq - seq) })
	if found {
		return // a repeated outcome record
	}
	msgs = slices.Insert(msgs, i, m)
	if over := len(msgs) - c.window; over > 0 {
		msgs = slices.Delete(msgs, 0, over)
	}
	c.conversations[key] = msgs
	close(c.wake)
	c.wake = make(chan struct{})
}

// read returns up to limit messages of conversation key after seq after
// for which may is true, in order, each once; next is the last sequence
// looked at (a caller pages on with after = next), and limited reports
// that messages after `after` the caller may read are no longer held.
func (c *chat) read(_ context.Context, key string, after int64, limit int, may func(seq int64) bool) (msgs []message, next int64, limited bool, err error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	held := c.conversations[key]
	next = after
	if len(held) > 0 {
		for seq := after + 1; seq < held[0].Seq; seq++ {
			if may(seq) {
				limited = true
				break
			}
		}
	}
	i, _ := slices.BinarySearchFunc(held, after+1, func(a message, seq int64) int { return int(a.Seq - seq) })
	for ; i < len(held) && len(msgs) < limit; i++ {
		next = held[i].Seq
		if may(held[i].Seq) {
			msgs = append(msgs, held[i])
		}
	}
	return msgs, next, limited, nil
}

// highest is the highest sequence held of conversation key, and the
// channel closed when more messages arrive.
func (c *chat) highest(key string) (int64, <-chan struct{}) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var top int64
	if msgs := c.conversations[key]; len(msgs) > 0 {
		top = msgs[len(msgs)-1].Seq
	}
	return top, c.wake
}

// readChat reads the stream's outcomes from chat_history ago (each
// partition from its first record at or after that time) until ctx ends.
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
	since, err := b.adm.ListOffsetsAfterMilli(ctx, time.Now().Add(-b.cfg.ChatHistory).UnixMilli(), topic)
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
	cl, err := b.reader("bridge-"+topic, b.ops.Registry, topic, start, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer cl.Close()
	var o record.Outcome
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
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, r := range fetches.Records() {
			next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				continue
			}
			payload, err := record.DecodeOutcome(r.Value, &o)
			if err != nil {
				continue
			}
			o.Payload = []byte(payload)
			c.add(&o)
		}
	}
}
