package decide

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// assign has the processor number an entity's (a conversation's) messages
// 1, 2, 3... with no gaps: a send is idempotent on its client key (device
// and client message id) within the idempotency window, only members may
// send, and each member's read and delivery cursors only move forward,
// never past the last message. It knows the stream's event types only by
// the part the catalogue gives each (config.Assign). Membership is kept as
// intervals of sequences (who may read what is the readers' rule, by the
// stream's assign.history), receipts count only from members, and delivery
// is recorded per device. Once the conversation
// is terminal, every new event is rejected; a retried send still gets its
// sequence back.
type assign struct {
	stream *config.Stream
	// roles is the part of each event type, from the catalogue.
	roles map[string]config.AssignRole
}

// Conversation is the assign policy's part of the table value.
type Conversation struct {
	// Members are the current members, sorted.
	Members []string `json:"members,omitempty"`
	// Membership holds, per user, the intervals of conversation_seq they
	// were a member for, oldest first; the last is open while they are.
	Membership map[string][]Interval `json:"membership,omitempty"`
	// Sent remembers recent sends by client key, oldest first.
	Sent    []SentMessage     `json:"sent,omitempty"`
	Cursors map[string]Cursor `json:"cursors,omitempty"`
}

// Interval is a run of sequences a user was a member for: From is the
// first message sent after they joined, To the last sent before they left
// (inclusive), 0 while they are a member.
type Interval struct {
	From int64 `json:"from"`
	To   int64 `json:"to,omitempty"`
}

// MaxIntervals bounds the intervals kept per user. A user who joins once
// more drops their oldest: they lose access to its messages, never gain
// access to what was sent while they were out.
const MaxIntervals = 16

// SentMessage is what a retried send must get back: its sequence (the
// message id is the stream's assign.message_id of the key and sequence),
// remembered under its client key's hash.
type SentMessage struct {
	// Client is the 64-bit FNV-1a hash of the send's sender and client key
	// (device and client message id; see sentKey): 8 bytes whatever their
	// length. Two sends of one conversation would have to collide in 64
	// bits among the 2,000 remembered for a new message to be taken for a
	// retry (odds about 1e-16 per message).
	Client uint64 `json:"client"`
	Seq    int64  `json:"seq"`
	AtMs   int64  `json:"at_ms"`
	// Legacy marks a send remembered by a release that keyed it without
	// its sender (the device and client message id only): a retry matches
	// it on those. Such sends come first, and age out.
	Legacy bool `json:"legacy,omitempty"`
}

// sentKey is the hash a send is remembered under: its sender with its
// client key, so that one user naming another's device and client
// message id is not answered with the other's message; and, for a send
// remembered by an earlier release, the client key alone.
func sentKey(ev Event, legacy bool) uint64 {
	if legacy {
		return idHash(ev.ClientKey)
	}
	return idHash(ev.Member + "\x00" + ev.ClientKey)
}

// UnmarshalJSON also reads a send as tables of earlier releases wrote it,
// by its client key itself (with its message id, now derived).
func (m *SentMessage) UnmarshalJSON(data []byte) error {
	var v struct {
		Client    uint64  `json:"client"`
		ClientKey *string `json:"client_key"`
		Seq       int64   `json:"seq"`
		AtMs      int64   `json:"at_ms"`
		Legacy    bool    `json:"legacy"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*m = SentMessage{Client: v.Client, Seq: v.Seq, AtMs: v.AtMs, Legacy: v.Legacy}
	if v.ClientKey != nil {
		m.Client, m.Legacy = idHash(*v.ClientKey), true
	}
	return nil
}

// Cursor is one member's read position and how far their messages were
// delivered: Delivered is the highest any of their devices reached
// ("delivered" means it reached at least one device), Devices each
// device's own, bounded by limits.devices.
type Cursor struct {
	Read      int64                   `json:"read,omitempty"`
	Delivered int64                   `json:"delivered,omitempty"`
	Devices   map[string]DeviceCursor `json:"devices,omitempty"`
}

// DeviceCursor is how far one device has received a conversation.
type DeviceCursor struct {
	Delivered int64 `json:"delivered"`
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

// intervalOverhead is what one interval takes in the encoded
// conversation, at most.
const intervalOverhead = 48

// size is at least what the conversation takes in the table value. Its
// members, membership and cursors count twice: the entity's public state
// (changed) repeats them.
func (c *Conversation) size() int {
	n := 0
	for _, m := range c.Members {
		n += 2 * (stringBytes(m) + chatEntryOverhead)
	}
	for m, ivs := range c.Membership {
		n += 2 * (stringBytes(m) + chatEntryOverhead + len(ivs)*intervalOverhead)
	}
	for m, cur := range c.Cursors {
		n += 2 * (stringBytes(m) + chatEntryOverhead)
		for d := range cur.Devices {
			n += 2 * (stringBytes(d) + chatEntryOverhead)
		}
	}
	return n + len(c.Sent)*sentSize
}

// sentSize is what a remembered send takes in the conversation, at most:
// its hash and two varints.
const sentSize = 8 + 2*binary.MaxVarintLen64

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
	c.dateMembers()
	role := p.roles[ev.Type]
	if role == config.RoleSend {
		// A retried send, under its old event id or a new one, gets back
		// the sequence, message id and acceptance time it was first given.
		cutoff := p.forgetOld(c, ev.ReceivedAtMs)
		client, legacy := sentKey(ev, false), sentKey(ev, true)
		if i := slices.IndexFunc(c.Sent, func(m SentMessage) bool {
			return m.AtMs >= cutoff && (m.Client == client || m.Legacy && m.Client == legacy)
		}); i >= 0 {
			e.firstSight(&e.Row, ev, dedupOf(p.stream))
			effects := one(ev, record.Duplicate, "", c.Sent[i].Seq)
			effects.Decisions[0].MessageID = p.stream.Assign.MessageIDOf(ev.Key, c.Sent[i].Seq)
			effects.Decisions[0].AcceptedAtMs = c.Sent[i].AtMs
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
			grows := intervalOverhead
			if c.Membership[ev.Member] == nil {
				grows += stringBytes(ev.Member) + chatEntryOverhead
			}
			if c.size()+2*(stringBytes(ev.Member)+chatEntryOverhead+grows) > chatBudget(p.stream) {
				return conversationFull(e, ev)
			}
			c.join(ev.Member, e.Version)
		}
	case config.RoleMemberRemoved:
		c.leave(ev.Member, e.Version)
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
	c.Sent = append(c.Sent, SentMessage{Client: sentKey(ev, false), Seq: seq, AtMs: ev.ReceivedAtMs})
	if over := len(c.Sent) - p.stream.Limits.IdempotencyKeys; over > 0 {
		// Resliced, not moved: a full memory drops one key a message, and
		// append copies the rest only when it runs out of room.
		c.Sent = c.Sent[over:]
	}
	// Within the conversation's bytes, the oldest client keys go first,
	// early (counted as the dedup memory's early evictions are).
	for size := c.size(); len(c.Sent) > 1 && size > chatBudget(p.stream); {
		size -= sentSize
		c.Sent = c.Sent[1:]
		e.evicted++
	}
	e.Version = seq
	effects := p.changed(e, ev)
	effects.Decisions[0].MessageID = p.stream.Assign.MessageIDOf(ev.Key, seq)
	return effects
}

// forgetOld drops the client keys older than the idempotency window from
// the memory's start, measured on the events' own received_at so a
// replay decides the same way, and returns the window's start: a send
// older than it and still held, behind a newer one (ingest's clocks are
// not in sequence order to the millisecond), matches no retry. The memory
// only ever grows at its end and shrinks at its start, which lets the
// table keep it in parts written once (the processors' codec).
func (p assign) forgetOld(c *Conversation, nowMs int64) int64 {
	cutoff := nowMs - p.stream.Limits.IdempotencyWindow.Milliseconds()
	i := 0
	for i < len(c.Sent) && c.Sent[i].AtMs < cutoff {
		i++
	}
	c.Sent = c.Sent[i:]
	return cutoff
}

// join makes user a member from the message after lastSeq on.
func (c *Conversation) join(user string, lastSeq int64) {
	c.Members = append(c.Members, user)
	slices.Sort(c.Members)
	if c.Membership == nil {
		c.Membership = map[string][]Interval{}
	}
	ivs := append(c.Membership[user], Interval{From: lastSeq + 1})
	if over := len(ivs) - MaxIntervals; over > 0 {
		ivs = slices.Delete(ivs, 0, over)
	}
	c.Membership[user] = ivs
}

// leave ends user's membership after message lastSeq; an interval in which
// nothing was sent is not kept. Removing a non-member changes nothing.
func (c *Conversation) leave(user string, lastSeq int64) {
	i, found := slices.BinarySearch(c.Members, user)
	if !found {
		return
	}
	c.Members = slices.Delete(c.Members, i, i+1)
	ivs := c.Membership[user]
	if n := len(ivs); n > 0 && ivs[n-1].To == 0 {
		if ivs[n-1].To = lastSeq; lastSeq < ivs[n-1].From {
			ivs = ivs[:n-1]
		}
	}
	if len(ivs) == 0 {
		delete(c.Membership, user)
	} else {
		c.Membership[user] = ivs
	}
}

// dateMembers gives a member of a conversation stored before membership
// intervals one from the first message: they read everything, as then.
func (c *Conversation) dateMembers() {
	for _, m := range c.Members {
		if ivs := c.Membership[m]; len(ivs) == 0 || ivs[len(ivs)-1].To != 0 {
			if c.Membership == nil {
				c.Membership = map[string][]Interval{}
			}
			c.Membership[m] = append(ivs, Interval{From: 1})
		}
	}
}

// receipt moves a member's read position, or a device's delivery, forward.
// A receipt from someone who is not a member when it is decided never
// enters the state.
func (p assign) receipt(e *Entity, c *Conversation, ev Event, role config.AssignRole) Effects {
	if !slices.Contains(c.Members, ev.Member) {
		return one(ev, record.Rejected, record.ReasonNotMember, ev.Seq)
	}
	if ev.Seq > e.Version {
		return one(ev, record.Rejected, record.ReasonAheadOfConversation, ev.Seq)
	}
	cur, known := c.Cursors[ev.Member]
	grows := 0
	if !known {
		grows += 2 * (stringBytes(ev.Member) + chatEntryOverhead)
	}
	switch {
	case role == config.RoleReceiptRead:
		if ev.Seq <= cur.Read {
			return one(ev, record.Stale, "", ev.Seq)
		}
		cur.Read = ev.Seq
	case ev.Device == "":
		// A delivery receipt that names no device counts for the user.
		if ev.Seq <= cur.Delivered {
			return one(ev, record.Stale, "", ev.Seq)
		}
		cur.Delivered = ev.Seq
	default:
		d, seen := cur.Devices[ev.Device]
		if ev.Seq <= d.Delivered {
			return one(ev, record.Stale, "", ev.Seq)
		}
		devices := maps.Clone(cur.Devices)
		if devices == nil {
			devices = map[string]DeviceCursor{}
		}
		if !seen {
			if len(devices) >= p.stream.Limits.Devices {
				delete(devices, leastDelivered(devices))
			}
			grows += 2 * (stringBytes(ev.Device) + chatEntryOverhead)
		}
		devices[ev.Device] = DeviceCursor{Delivered: ev.Seq}
		cur.Devices = devices
		cur.Delivered = max(cur.Delivered, ev.Seq)
	}
	if grows > 0 && c.size()+grows > chatBudget(p.stream) {
		return conversationFull(e, ev)
	}
	if c.Cursors == nil {
		c.Cursors = map[string]Cursor{}
	}
	c.Cursors[ev.Member] = cur
	effects := p.changed(e, ev)
	effects.Decisions[0].Version = ev.Seq
	return effects
}

// leastDelivered is the device a new one replaces at limits.devices: the
// one that received least (ties by id, so the choice is deterministic).
func leastDelivered(devices map[string]DeviceCursor) string {
	return slices.MinFunc(slices.Collect(maps.Keys(devices)), func(a, b string) int {
		return cmp.Or(cmp.Compare(devices[a].Delivered, devices[b].Delivered), strings.Compare(a, b))
	})
}

// changed records an applied change and renders the public state.
func (p assign) changed(e *Entity, ev Event) Effects {
	var last json.RawMessage
	if p.roles[ev.Type] == config.RoleSend {
		last = ev.Body
	} else if e.State != nil {
		var prev struct {
			LastMessage json.RawMessage `json:"last_message"`
		}
		_ = json.Unmarshal(e.State, &prev)
		last = prev.LastMessage
	}
	e.State = appendChatState(make([]byte, 0, len(e.State)+len(last)+64), e.Version, e.Chat, last)
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
