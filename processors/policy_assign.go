package processors

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
)

// Reasons of assign decisions.
const (
	ReasonNotMember       = "not_member"
	ReasonAheadOfMessages = "ahead_of_conversation"
	ReasonUnknownType     = "unknown_type"
)

// Chat event types (the chat stream's catalogue entry).
const (
	chatSend             = "message.send"
	chatMemberAdded      = "member.added"
	chatMemberRemoved    = "member.removed"
	chatReceiptRead      = "receipt.read"
	chatReceiptDelivered = "receipt.delivered"
)

// assign has the processor number a conversation's messages 1, 2, 3...
// with no gaps: a send is idempotent on (sender_device_id,
// client_message_id) within the idempotency window, only members may send,
// and read and delivery cursors only move forward, never past the last
// message.
type assign struct{ stream *config.Stream }

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

// Cursor is one user's read and delivery position.
type Cursor struct {
	Read      int64 `json:"read,omitempty"`
	Delivered int64 `json:"delivered,omitempty"`
}

// chatFields are the fields of a chat event the policy reads.
type chatFields struct {
	SenderID        string `json:"sender_id"`
	SenderDeviceID  string `json:"sender_device_id"`
	ClientMessageID string `json:"client_message_id"`
	UserID          string `json:"user_id"`
	ConversationSeq int64  `json:"conversation_seq"`
}

func (p assign) decide(e *Entity, ev Event) Effects {
	var f chatFields
	// The edge validated the body; a foreign producer's may not parse.
	_ = json.Unmarshal(ev.Body, &f)
	if e.Chat == nil {
		e.Chat = &Conversation{}
	}
	c := e.Chat
	if ev.Type == chatSend {
		// A retried send, under its old event id or a new one, gets back
		// the sequence and message id it was first given.
		p.forgetOld(c, ev.ReceivedAtMs)
		key := f.SenderDeviceID + "\x00" + f.ClientMessageID
		if i := slices.IndexFunc(c.Sent, func(m SentMessage) bool { return m.ClientKey == key }); i >= 0 {
			e.remember(ev.EventID, p.stream.Limits.DedupIDs)
			effects := one(ev, envelope.OutcomeDuplicate, "", c.Sent[i].Seq)
			effects.Decisions[0].MessageID = c.Sent[i].MessageID
			return effects
		}
	}
	if !e.firstSight(ev.EventID, p.stream.Limits.DedupIDs) {
		return one(ev, envelope.OutcomeDuplicate, "", e.Version)
	}
	var effects Effects
	switch ev.Type {
	case chatSend:
		effects = p.send(e, c, ev, f)
	case chatMemberAdded:
		if !slices.Contains(c.Members, f.UserID) {
			c.Members = append(c.Members, f.UserID)
			slices.Sort(c.Members)
		}
		effects = p.changed(e, ev)
	case chatMemberRemoved:
		c.Members = slices.DeleteFunc(c.Members, func(m string) bool { return m == f.UserID })
		effects = p.changed(e, ev)
	case chatReceiptRead, chatReceiptDelivered:
		effects = p.receipt(e, c, ev, f)
	default:
		effects = one(ev, envelope.OutcomeRejected, ReasonUnknownType, e.Version)
	}
	return effects
}

// send numbers a new message; decide has answered retries already.
func (p assign) send(e *Entity, c *Conversation, ev Event, f chatFields) Effects {
	key := f.SenderDeviceID + "\x00" + f.ClientMessageID
	if !slices.Contains(c.Members, f.SenderID) {
		return one(ev, envelope.OutcomeRejected, ReasonNotMember, e.Version)
	}
	seq := e.Version + 1
	msg := SentMessage{ClientKey: key, Seq: seq, MessageID: fmt.Sprintf("%s:%d", ev.Key, seq), AtMs: ev.ReceivedAtMs}
	c.Sent = append(c.Sent, msg)
	if over := len(c.Sent) - p.stream.Limits.IdempotencyKeys; over > 0 {
		c.Sent = slices.Delete(c.Sent, 0, over)
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

func (p assign) receipt(e *Entity, c *Conversation, ev Event, f chatFields) Effects {
	if f.ConversationSeq > e.Version {
		return one(ev, envelope.OutcomeRejected, ReasonAheadOfMessages, f.ConversationSeq)
	}
	if c.Cursors == nil {
		c.Cursors = map[string]Cursor{}
	}
	cur := c.Cursors[f.UserID]
	pos := &cur.Read
	if ev.Type == chatReceiptDelivered {
		pos = &cur.Delivered
	}
	if f.ConversationSeq <= *pos {
		return one(ev, envelope.OutcomeStale, "", f.ConversationSeq)
	}
	*pos = f.ConversationSeq
	c.Cursors[f.UserID] = cur
	effects := p.changed(e, ev)
	effects.Decisions[0].Version = f.ConversationSeq
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
	if ev.Type == chatSend {
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
	return one(ev, envelope.OutcomeApplied, "", e.Version)
}
