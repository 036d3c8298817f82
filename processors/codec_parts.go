package processors

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/driftguard/driftguard/processors/decide"
	"github.com/driftguard/driftguard/processors/eos"
)

// entityFormat6 is entityFormat5 with a conversation's remembered sends
// kept out of the value, in parts of their own (eos.PartedCodec): the
// value holds, where format 5 had the sends, two varints, the sequences
// of the first and the last send its parts hold (0 and 0 for none). A
// conversation's memory of up to limits.idempotency_keys sends was most
// of its value (about 24 KB of 2,000 sends), and the value is written
// whole with every transaction that touches the conversation; in parts,
// a message writes the value and the part its send joined.
//
// The sends are parted by sequence: part i holds those with a sequence
// from i×sendsPerPart to (i+1)×sendsPerPart − 1, named by the byte 's'
// and i as 8 big-endian bytes, so that parts sort in sequence order. The
// memory only grows at its end and loses sends at its start (the rules
// keep it so): a part is written while sends join it, and deleted once
// every send it holds is forgotten; a part some of whose sends are
// forgotten keeps them, and the value's first sequence passes them over
// when it is read.
const entityFormat6 byte = 6

// sendsPartFormat is the first byte of a part of sends: appendSends'
// layout follows.
const sendsPartFormat byte = 0x80

// sendsPerPart is how many sequences a part of sends spans: 64 sends of
// about 12 bytes, some 800 bytes written with a message instead of the
// whole memory.
const sendsPerPart = 64

// sendRange is the sequences of the first and the last send a value's
// parts hold; zero for none.
type sendRange struct{ first, last int64 }

func heldSends(sent []decide.SentMessage) sendRange {
	if len(sent) == 0 {
		return sendRange{}
	}
	return sendRange{first: sent[0].Seq, last: sent[len(sent)-1].Seq}
}

func sendsPartOf(seq int64) int64 { return seq / sendsPerPart }

func sendsPartName(i int64) string {
	return string(binary.BigEndian.AppendUint64([]byte{'s'}, uint64(i)))
}

// IsTablePart reports whether a record key of `<stream>-table` is a part
// of another key's value (a conversation's remembered sends) rather than
// an entity: tools that read the table's records pass those over, or
// read them with the entity whose key they start with.
func IsTablePart(key []byte) bool { return slices.Contains(key, eos.PartSeparator[0]) }

var errTablePart = errors.New("entity codec: a part of another key's value, not an entity (see IsTablePart)")

// EncodeParts writes the value (format 6) and the parts of its sends that
// changed since they were stored: those that sends joined, and those
// whose every send is forgotten (deleted).
func (entityCodec) EncodeParts(value any) (eos.Parts, error) {
	v, ok := value.(*tableValue)
	if !ok {
		return eos.Parts{}, fmt.Errorf("entity codec: got %T", value)
	}
	head, err := encodeEntity(v, entityFormat6)
	if err != nil {
		return eos.Parts{}, err
	}
	var sent []decide.SentMessage
	if v.Chat != nil {
		sent = v.Chat.Sent
	}
	ps := eos.Parts{Head: head, Replace: !v.stored, Size: len(head) + len(sent)*12}
	held, was := heldSends(sent), v.sends
	if !v.stored {
		was = sendRange{}
	}
	if was != (sendRange{}) {
		for i := sendsPartOf(was.first); i <= sendsPartOf(was.last); i++ {
			if held == (sendRange{}) || i < sendsPartOf(held.first) || i > sendsPartOf(held.last) {
				ps.Changed = append(ps.Changed, eos.Part{Name: sendsPartName(i)})
			}
		}
	}
	// The parts that sends joined: from the part of the first send after
	// the last stored, each whole.
	from, _ := slices.BinarySearchFunc(sent, was.last+1, func(m decide.SentMessage, seq int64) int { return cmp.Compare(m.Seq, seq) })
	if from < len(sent) {
		part := sendsPartOf(sent[from].Seq)
		for from > 0 && sendsPartOf(sent[from-1].Seq) == part {
			from--
		}
	}
	for from < len(sent) {
		part := sendsPartOf(sent[from].Seq)
		end := from + 1
		for end < len(sent) && sendsPartOf(sent[end].Seq) == part {
			end++
		}
		data := appendSends(append(make([]byte, 0, 2+(end-from)*12), sendsPartFormat), sent[from:end])
		ps.Changed = append(ps.Changed, eos.Part{Name: sendsPartName(part), Data: data})
		from = end
	}
	return ps, nil
}

// DecodeParts reads a value and, for a conversation, the sends its parts
// hold.
func (c entityCodec) DecodeParts(head []byte, parts []eos.Part) (any, error) {
	value, err := c.Decode(head)
	if err != nil {
		return nil, err
	}
	v := value.(*tableValue)
	v.stored = true
	held := v.sends
	if held == (sendRange{}) || v.Chat == nil {
		return v, nil
	}
	// Each part's sends, the first varint after its format byte, for one
	// allocation, with room for the send the next decision adds.
	count := 1
	for _, p := range parts {
		if len(p.Data) > 0 {
			count += (&reader{data: p.Data[1:]}).peekCount()
		}
	}
	sent := make([]decide.SentMessage, 0, count)
	for _, p := range parts {
		if len(p.Name) != 9 || p.Name[0] != 's' {
			return nil, fmt.Errorf("entity codec: unknown part %q", p.Name)
		}
		i := int64(binary.BigEndian.Uint64([]byte(p.Name[1:])))
		if i < sendsPartOf(held.first) || i > sendsPartOf(held.last) {
			continue // a part the value no longer names (deleted with it)
		}
		if len(p.Data) == 0 || p.Data[0] != sendsPartFormat {
			return nil, fmt.Errorf("entity codec: part %d of sends: unknown format", i)
		}
		r := reader{data: p.Data[1:]}
		from := len(sent)
		sent = r.appendSent(sent)
		if r.err == nil && len(r.data) > 0 {
			r.err = errors.New("trailing bytes")
		}
		if r.err != nil {
			return nil, fmt.Errorf("entity codec: part %d of sends: %w", i, r.err)
		}
		// Sends the value's start has passed stay in their part until
		// every send of it is forgotten.
		kept := from
		for _, m := range sent[from:] {
			if m.Seq >= held.first && m.Seq <= held.last {
				sent[kept] = m
				kept++
			}
		}
		sent = sent[:kept]
	}
	v.Chat.Sent = sent
	if got := heldSends(v.Chat.Sent); got != held {
		return nil, fmt.Errorf("entity codec: the parts hold sends %d to %d, the value names %d to %d", got.first, got.last, held.first, held.last)
	}
	return v, nil
}

// decodeStoredValue decodes a value from its head and its parts by name,
// as a reader of the table's records gathers them.
func decodeStoredValue(head []byte, parts map[string][]byte) (*tableValue, error) {
	stored := make([]eos.Part, 0, len(parts))
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		stored = append(stored, eos.Part{Name: name, Data: parts[name]})
	}
	v, err := entityCodec{}.DecodeParts(head, stored)
	if err != nil {
		return nil, err
	}
	return v.(*tableValue), nil
}

// Stored marks the value's sends as stored, as EncodeParts wrote them.
func (entityCodec) Stored(value any) {
	v := value.(*tableValue)
	v.stored = true
	v.sends = sendRange{}
	if v.Chat != nil {
		v.sends = heldSends(v.Chat.Sent)
	}
}
