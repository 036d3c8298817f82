package decide

import (
	"encoding/json"
	"slices"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// assign has the processor number an entity's (a conversation's) messages
// 1, 2, 3... with no gaps: a send is idempotent on its client key (device
// and client message id) within the idempotency window, only members may
// send, and each member's read and delivery cursors only move forward,
// never past the last message. It knows the stream's event types only by
// the part the catalogue gives each (config.Assign). Once the conversation
// is terminal, every new event is rejected; a retried send still gets its
// sequence back.
type assign struct {
	stream *config.Stream
	// roles is the part of each event type, from the catalogue.
	roles map[string]config.AssignRole
}

// Conversation is the assign policy's part of the table value.
type Conversation struct {
	Members []string `json:"members,omitempty"`
	// Sent remembers recent sends by client key, oldest first.
	Sent    []SentMessage     `json:"sent,omitempty"`
	Cursors map[string]Cursor `json:"cursors,omitempty"`
}

// SentMessage is what a retried send must get back.
type SentMessage struct {
	ClientKey string `json:"client_key"`
	Seq       int64  `json:"seq"`
	MessageID string `json:"message_id"`
	AtMs      int64  `json:"at_ms"`
}

// Cursor is one member's read and delivery position.
type Cursor struct {
	Read      int64 `json:"read,omitempty"`
	Delivered int64 `json:"delivered,omitempty"`
}

// chatEntryOverhead is what one member, cursor or remembered send takes
// in the encoded conversation (JSON) besides its strings, at most.
const chatEntryOverhead = 96

// stringBytes is what strings take in JSON at worst: six bytes a byte.
func stringBytes(ss ...string) int {
	n := 0
	for _, s := range ss {
		n += 6 * len(s)
	}
	return n
}

// size is at least what the conversation takes in the table value. Its
// members and cursors count twice: the entity's public state (changed)
// repeats them.
func (c *Conversation) size() int {
	n := 0
	for _, m := range c.Members {
		n += 2 * (stringBytes(m) + chatEntryOverhead)
	}
	for m := range c.Cursors {
		n += 2 * (stringBytes(m) + chatEntryOverhead)
	}
	for _, sent := range c.Sent {
		n += sent.size()
	}
	return n
}

// size is what a remembered send takes in the conversation, at most.
func (m SentMessage) size() int { return stringBytes(m.ClientKey, m.MessageID) + chatEntryOverhead }

// chatBudget is the conversation's share of a table value: what the
// applied body and the dedup memory leave of config.TableValueBudget.
func chatBudget(s *config.Stream) int {
	return config.TableValueBudget - int(s.Limits.MaxBodyBytes) - config.DedupBudgetBytes
}

func (p assign) decide(e *Entity, ev Event) Effects {
	if e.Chat == nil {
		e.Chat = &Conversation{}
	}
	c := e.Chat
	role := p.roles[ev.Type]
	if role == config.RoleSend {
		// A retried send, under its old event id or a new one, gets back
		// the sequence and message id it was first given.
		p.forgetOld(c, ev.ReceivedAtMs)
		if i := slices.IndexFunc(c.Sent, func(m SentMessage) bool { return m.ClientKey == ev.ClientKey }); i >= 0 {
			e.firstSight(&e.Row, ev, dedupOf(p.stream))
			effects := one(ev, record.Duplicate, "", c.Sent[i].Seq)
			effects.Decisions[0].MessageID = c.Sent[i].MessageID
			return effects
		}
	}
	if !e.firstSight(&e.Row, ev, dedupOf(p.stream)) {
		return one(ev, record.Duplicate, "", e.Version)
	}
	if effects, ok := rejectTerminal(e, ev, e.Version); ok {
		return effects
	}
	switch role {
	case config.RoleSend:
		return p.send(e, c, ev)
	case config.RoleMemberAdded:
		if !slices.Contains(c.Members, ev.Member) {
			if c.size()+2*(stringBytes(ev.Member)+chatEntryOverhead) > chatBudget(p.stream) {
				return conversationFull(e, ev)
			}
			c.Members = append(c.Members, ev.Member)
			slices.Sort(c.Members)
		}
	case config.RoleMemberRemoved:
		c.Members = slices.DeleteFunc(c.Members, func(m string) bool { return m == ev.Member })
	case config.RoleReceiptRead, config.RoleReceiptDelivered:
		return p.receipt(e, c, ev, role)
	default:
		if !ev.Terminal {
			return one(ev, record.Rejected, record.ReasonUnknownType, e.Version)
		}
		// An event of no other part that ends the conversation.
	}
	return p.changed(e, ev)
}

func (assign) expire(e *Entity, _ int64) Effects { return noTimers(e) }

// send numbers a new message; decide has answered retries already.
func (p assign) send(e *Entity, c *Conversation, ev Event) Effects {
	if !slices.Contains(c.Members, ev.Member) {
		return one(ev, record.Rejected, record.ReasonNotMember, e.Version)
	}
	seq := e.Version + 1
	msg := SentMessage{ClientKey: ev.ClientKey, Seq: seq, MessageID: p.stream.Assign.MessageIDOf(ev.Key, seq), AtMs: ev.ReceivedAtMs}
	c.Sent = append(c.Sent, msg)
	if over := len(c.Sent) - p.stream.Limits.IdempotencyKeys; over > 0 {
		c.Sent = slices.Delete(c.Sent, 0, over)
	}
	// Within the conversation's bytes, the oldest client keys go first,
	// early (counted as the dedup memory's early evictions are).
	for size := c.size(); len(c.Sent) > 1 && size > chatBudget(p.stream); {
		size -= c.Sent[0].size()
		c.Sent = c.Sent[1:]
		e.evicted++
	}
	e.Version = seq
	effects := p.changed(e, ev)
	effects.Decisions[0].MessageID = msg.MessageID
	return effects
}

// forgetOld drops client keys older than the idempotency window, measured
// on the events' own received_at so a replay decides the same way.
func (p assign) forgetOld(c *Conversation, nowMs int64) {
	cutoff := nowMs - p.stream.Limits.IdempotencyWindow.Milliseconds()
	c.Sent = slices.DeleteFunc(c.Sent, func(m SentMessage) bool { return m.AtMs < cutoff })
}

func (p assign) receipt(e *Entity, c *Conversation, ev Event, role config.AssignRole) Effects {
	if ev.Seq > e.Version {
		return one(ev, record.Rejected, record.ReasonAheadOfConversation, ev.Seq)
	}
	if c.Cursors == nil {
		c.Cursors = map[string]Cursor{}
	}
	cur, known := c.Cursors[ev.Member]
	if !known && c.size()+2*(stringBytes(ev.Member)+chatEntryOverhead) > chatBudget(p.stream) {
		return conversationFull(e, ev)
	}
	pos := &cur.Read
	if role == config.RoleReceiptDelivered {
		pos = &cur.Delivered
	}
	if ev.Seq <= *pos {
		return one(ev, record.Stale, "", ev.Seq)
	}
	*pos = ev.Seq
	c.Cursors[ev.Member] = cur
	effects := p.changed(e, ev)
	effects.Decisions[0].Version = ev.Seq
	return effects
}

// changed records an applied change and renders the public state.
func (p assign) changed(e *Entity, ev Event) Effects {
	state := struct {
		LastSeq     int64             `json:"last_seq"`
		Members     []string          `json:"members"`
		Cursors     map[string]Cursor `json:"cursors,omitempty"`
		LastMessage json.RawMessage   `json:"last_message,omitempty"`
	}{LastSeq: e.Version, Members: e.Chat.Members, Cursors: e.Chat.Cursors}
	if p.roles[ev.Type] == config.RoleSend {
		state.LastMessage = ev.Body
	} else if e.State != nil {
		var prev struct {
			LastMessage json.RawMessage `json:"last_message"`
		}
		_ = json.Unmarshal(e.State, &prev)
		state.LastMessage = prev.LastMessage
	}
	if state.Members == nil {
		state.Members = []string{}
	}
	e.State, _ = json.Marshal(state)
	e.Applied = true
	e.UpdatedAtMs = ev.ReceivedAtMs
	e.Terminal = e.Terminal || ev.Terminal
	return one(ev, record.Applied, "", e.Version)
}

// conversationFull rejects an event that would grow the conversation past
// its share of the table value, and copies it to the DLQ.
func conversationFull(e *Entity, ev Event) Effects {
	effects := one(ev, record.Rejected, record.ReasonConversationFull, e.Version)
	effects.Decisions[0].DeadLetter = record.ReasonConversationFull
	return effects
}
