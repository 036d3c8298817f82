package processors

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/driftguard/driftguard/processors/decide"
)

// entityFormat5 is entityFormat4 with an assign stream's conversation in
// binary rather than JSON. A conversation is rewritten whole with every
// message, and its idempotency memory (up to limits.idempotency_keys
// sends) made JSON the processor's largest cost per chat message; here a
// remembered send is its client key's hash and two varints, about 12
// bytes. Its layout, after a byte that is 0 without a conversation and 1
// with one:
//
//	members (count, strings) · membership (count, per user in order: the
//	user, a count of intervals, varints from and to of each) · cursors
//	(count, per user in order: the user, varints read and delivered, a
//	count of devices, per device in order: the device, varint delivered)
//	· sends (count, that many little-endian 64-bit client hashes, then
//	varints: each send's sequence and received_at minus the one before,
//	the first's from 0, then how many of the first sends are keyed
//	without their sender, as earlier releases remembered them)
const entityFormat5 byte = 5

func appendConversation(b []byte, c *decide.Conversation, format byte) []byte {
	if c == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(c.Members)))
	for _, m := range c.Members {
		b = appendString(b, m)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Membership)))
	for _, user := range decide.SortedKeys(c.Membership, c.Members) {
		ivs := c.Membership[user]
		b = appendString(b, user)
		b = binary.AppendUvarint(b, uint64(len(ivs)))
		for _, iv := range ivs {
			b = binary.AppendVarint(binary.AppendVarint(b, iv.From), iv.To)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(c.Cursors)))
	for _, user := range decide.SortedKeys(c.Cursors, c.Members) {
		cur := c.Cursors[user]
		b = appendString(b, user)
		b = binary.AppendVarint(binary.AppendVarint(b, cur.Read), cur.Delivered)
		b = binary.AppendUvarint(b, uint64(len(cur.Devices)))
		for _, dev := range slices.Sorted(maps.Keys(cur.Devices)) {
			b = binary.AppendVarint(appendString(b, dev), cur.Devices[dev].Delivered)
		}
	}
	if format >= entityFormat6 {
		held := heldSends(c.Sent)
		return binary.AppendVarint(binary.AppendVarint(b, held.first), held.last)
	}
	return appendSends(b, c.Sent)
}

// appendSends appends remembered sends: their count, that many
// little-endian 64-bit client hashes, then varints: each send's sequence
// and received_at minus the one before, the first's from 0, then how many
// of the first sends are keyed without their sender.
func appendSends(b []byte, sent []decide.SentMessage) []byte {
	b = binary.AppendUvarint(b, uint64(len(sent)))
	for _, m := range sent {
		b = binary.LittleEndian.AppendUint64(b, m.Client)
	}
	var seq, at int64
	legacy := 0
	for i, m := range sent {
		b = binary.AppendVarint(binary.AppendVarint(b, m.Seq-seq), m.AtMs-at)
		seq, at = m.Seq, m.AtMs
		if m.Legacy && legacy == i {
			legacy++
		}
	}
	return binary.AppendVarint(b, int64(legacy))
}

// conversationSize is about what appendConversation writes, so the
// encoder mostly allocates once: a full memory is tens of kilobytes.
func conversationSize(c *decide.Conversation) int {
	if c == nil {
		return 1
	}
	n := 1 + 4*binary.MaxVarintLen64 + len(c.Sent)*16 // a hash and two varints, usually short
	for _, m := range c.Members {
		n += binary.MaxVarintLen64 + len(m)
	}
	for user, ivs := range c.Membership {
		n += 2*binary.MaxVarintLen64 + len(user) + len(ivs)*2*binary.MaxVarintLen64
	}
	for user, cur := range c.Cursors {
		n += 4*binary.MaxVarintLen64 + len(user)
		for dev := range cur.Devices {
			n += 2*binary.MaxVarintLen64 + len(dev)
		}
	}
	return n
}

// conversation reads what appendConversation wrote; from format 6 on,
// the range of sends its parts hold goes to held.
func (r *reader) conversation(format byte, held *sendRange) *decide.Conversation {
	if len(r.data) == 0 {
		r.fail("conversation")
		return nil
	}
	present := r.data[0]
	r.data = r.data[1:]
	if present == 0 {
		return nil
	}
	c := &decide.Conversation{}
	if n := r.count(); n > 0 {
		c.Members = make([]string, n)
		for i := range c.Members {
			c.Members[i] = r.str()
		}
	}
	if n := r.count(); n > 0 {
		c.Membership = make(map[string][]decide.Interval, n)
		for range n {
			user := r.str()
			ivs := make([]decide.Interval, r.count())
			for i := range ivs {
				ivs[i] = decide.Interval{From: r.varint(), To: r.varint()}
			}
			c.Membership[user] = ivs
		}
	}
	if n := r.count(); n > 0 {
		c.Cursors = make(map[string]decide.Cursor, n)
		for range n {
			user := r.str()
			cur := decide.Cursor{Read: r.varint(), Delivered: r.varint()}
			if d := r.count(); d > 0 {
				cur.Devices = make(map[string]decide.DeviceCursor, d)
				for range d {
					dev := r.str()
					cur.Devices[dev] = decide.DeviceCursor{Delivered: r.varint()}
				}
			}
			c.Cursors[user] = cur
		}
	}
	if format >= entityFormat6 {
		*held = sendRange{first: r.varint(), last: r.varint()}
	} else {
		c.Sent = r.sent()
	}
	if r.err != nil {
		return nil
	}
	return c
}

// sent reads a conversation's remembered sends.
func (r *reader) sent() []decide.SentMessage {
	// Room for the send the next decision adds, so it does not copy them.
	return r.appendSent(make([]decide.SentMessage, 0, r.peekCount()+1))
}

// peekCount is the count at the reader's position, left unread.
func (r *reader) peekCount() int {
	n, w := binary.Uvarint(r.data)
	if w <= 0 || n > uint64(len(r.data)) {
		return 0
	}
	return int(n)
}

// appendSent reads remembered sends onto sent.
func (r *reader) appendSent(sent []decide.SentMessage) []decide.SentMessage {
	n := r.count()
	if n == 0 {
		r.varint() // how many are legacy: none
		return sent
	}
	if n > len(r.data)/8 {
		r.fail("sends")
		return nil
	}
	base := len(sent)
	sent = slices.Grow(sent, n)[:base+n]
	read := sent[base:]
	for i := range read {
		read[i] = decide.SentMessage{Client: binary.LittleEndian.Uint64(r.data[8*i:])}
	}
	// A local slice: this loop is the hot part of decoding a full memory.
	data := r.data[8*n:]
	var seq, at int64
	for i := range read {
		ds, n1 := binary.Varint(data)
		if n1 <= 0 {
			r.fail("sends")
			return nil
		}
		da, n2 := binary.Varint(data[n1:])
		if n2 <= 0 {
			r.fail("sends")
			return nil
		}
		seq, at = seq+ds, at+da
		read[i].Seq, read[i].AtMs = seq, at
		data = data[n1+n2:]
	}
	r.data = data
	legacy := r.varint()
	if legacy < 0 || legacy > int64(n) {
		r.fail("sends")
		return nil
	}
	for i := range int(legacy) {
		read[i].Legacy = true
	}
	return sent
}
