package processors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"iter"
	"slices"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/processors/decide"
)

// decidedLog is a key's redelivery memory (redeliver.go) in the form the
// table stores it. Every decision appends an input to it and cuts inputs
// off its front, which needs only each input's header; the inputs are
// decoded only when one is redelivered, so remembering costs a decision
// little more than copying a few dozen bytes.
//
// Each input, oldest first: uvarint size of the rest · varint offset and
// varint at_ms, each less the previous input's (the first input's less 0) ·
// varint replay · uvarint count of decisions, each: outcome (its index in
// knownOutcomes plus one, or 0 and the outcome as a byte string) · flags ·
// varint version · then, as flagged, reason, varint gap, varint buffer
// depth, message id, dead letter reason, JSON of the other event. Byte
// strings are a uvarint length and the bytes. An input usually takes 8 to
// 12 bytes.
type decidedLog struct {
	raw []byte
	// n is the count of inputs; lastOffset and lastAtMs are the last
	// input's (0 when empty), which the next input is written relative to.
	n                  int
	lastOffset, lastAt int64
}

// knownOutcomes are the outcomes the memory stores as one byte.
var knownOutcomes = []record.Result{record.Applied, record.Duplicate, record.Stale,
	record.Buffered, record.Quarantined, record.Reconciled, record.Expired,
	record.Rejected}

// Flags of a remembered decision: which optional parts follow.
const (
	pastReason = 1 << iota
	pastGap
	pastBufferDepth
	pastMessageID
	pastDeadLetter
	pastOther
)

var errDecidedLog = errors.New("damaged redelivery memory")

// logHeader is the header of the input at pos: where it ends, where its
// replay starts, and its offset and at_ms deltas.
func logHeader(raw []byte, pos int) (end, rest int, dOffset, dAt int64, err error) {
	size, k := binary.Uvarint(raw[pos:])
	if k <= 0 || size > uint64(len(raw)-pos-k) {
		return 0, 0, 0, 0, errDecidedLog
	}
	start := pos + k
	end = start + int(size)
	dOffset, k1 := binary.Varint(raw[start:end])
	if k1 <= 0 {
		return 0, 0, 0, 0, errDecidedLog
	}
	dAt, k2 := binary.Varint(raw[start+k1 : end])
	if k2 <= 0 {
		return 0, 0, 0, 0, errDecidedLog
	}
	return end, start + k1 + k2, dOffset, dAt, nil
}

// logEntry is one remembered input: its offset and at_ms, and where its
// replay starts (rest) and its bytes end.
type logEntry struct {
	offset, at int64
	rest, end  int
}

// entries walks the inputs of raw, oldest first, ending with the error of
// a damaged header.
func entries(raw []byte) iter.Seq2[logEntry, error] {
	return func(yield func(logEntry, error) bool) {
		var e logEntry
		for pos := 0; pos < len(raw); pos = e.end {
			end, rest, dOffset, dAt, err := logHeader(raw, pos)
			if err != nil {
				yield(logEntry{}, err)
				return
			}
			e = logEntry{offset: e.offset + dOffset, at: e.at + dAt, rest: rest, end: end}
			if !yield(e, nil) {
				return
			}
		}
	}
}

// readDecidedLog takes a stored memory, checking its inputs' headers.
func readDecidedLog(raw []byte) (decidedLog, error) {
	l := decidedLog{raw: raw}
	for e, err := range entries(raw) {
		if err != nil {
			return decidedLog{}, err
		}
		l.n++
		l.lastOffset, l.lastAt = e.offset, e.at
	}
	return l, nil
}

// add appends an input.
func (l *decidedLog) add(in *DecidedInput) error {
	var scratch [64]byte
	body := binary.AppendVarint(scratch[:0], in.Offset-l.lastOffset)
	body = binary.AppendVarint(body, in.AtMs-l.lastAt)
	body, err := appendDecidedBody(body, in)
	if err != nil {
		return err
	}
	l.raw = append(binary.AppendUvarint(l.raw, uint64(len(body))), body...)
	l.n++
	l.lastOffset, l.lastAt = in.Offset, in.AtMs
	return nil
}

// forget cuts the inputs before offset committed off the front, and the
// oldest beyond keep.
func (l *decidedLog) forget(committed int64, keep int) {
	var drop int
	var kept logEntry // the first input left
	// The headers were checked when the memory was read.
	for e := range entries(l.raw) {
		if e.offset >= committed && l.n-drop <= keep {
			kept = e
			break
		}
		drop++
	}
	switch {
	case drop == 0:
	case drop == l.n:
		*l = decidedLog{}
	default:
		// The first input left is written relative to 0 instead of the
		// one dropped before it.
		first := binary.AppendVarint(nil, kept.offset)
		first = binary.AppendVarint(first, kept.at)
		first = append(first, l.raw[kept.rest:kept.end]...)
		raw := make([]byte, 0, binary.MaxVarintLen64+len(first)+len(l.raw)-kept.end+32)
		raw = append(binary.AppendUvarint(raw, uint64(len(first))), first...)
		l.raw = append(raw, l.raw[kept.end:]...)
		l.n -= drop
	}
}

// inputs decodes the whole memory.
func (l decidedLog) inputs() ([]DecidedInput, error) {
	var out []DecidedInput
	for e, err := range entries(l.raw) {
		if err != nil {
			return nil, err
		}
		in, err := decodeDecidedBody(l.raw[e.rest:e.end], e.offset, e.at)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// find decodes the input at offset, if remembered.
func (l decidedLog) find(offset int64) (DecidedInput, bool, error) {
	for e, err := range entries(l.raw) {
		if err != nil {
			return DecidedInput{}, false, err
		}
		if e.offset == offset {
			in, err := decodeDecidedBody(l.raw[e.rest:e.end], e.offset, e.at)
			return in, err == nil, err
		}
	}
	return DecidedInput{}, false, nil
}

// MarshalJSON writes the memory as a list of inputs, as JSON tables hold
// it.
func (l decidedLog) MarshalJSON() ([]byte, error) {
	inputs, err := l.inputs()
	if err != nil {
		return nil, err
	}
	return json.Marshal(inputs)
}

// UnmarshalJSON reads a list of inputs.
func (l *decidedLog) UnmarshalJSON(data []byte) error {
	var inputs []DecidedInput
	if err := json.Unmarshal(data, &inputs); err != nil {
		return err
	}
	*l = decidedLog{}
	for i := range inputs {
		if err := l.add(&inputs[i]); err != nil {
			return err
		}
	}
	return nil
}

// appendDecidedBody appends an input's replay and decisions.
func appendDecidedBody(b []byte, in *DecidedInput) ([]byte, error) {
	b = binary.AppendVarint(b, in.Replay)
	b = binary.AppendUvarint(b, uint64(len(in.Decisions)))
	for i := range in.Decisions {
		p := &in.Decisions[i]
		outcome := slices.Index(knownOutcomes, p.Outcome) + 1
		var f byte
		for bit, set := range []bool{p.Reason != "", p.Gap != 0, p.BufferDepth != 0, p.MessageID != "", p.DeadLetter != "", p.Other != nil} {
			if set {
				f |= 1 << bit
			}
		}
		b = append(b, byte(outcome), f)
		if outcome == 0 {
			b = appendString(b, string(p.Outcome))
		}
		b = binary.AppendVarint(b, p.Version)
		if f&pastReason != 0 {
			b = appendString(b, string(p.Reason))
		}
		if f&pastGap != 0 {
			b = binary.AppendVarint(b, p.Gap)
		}
		if f&pastBufferDepth != 0 {
			b = binary.AppendVarint(b, int64(p.BufferDepth))
		}
		if f&pastMessageID != 0 {
			b = appendString(b, p.MessageID)
		}
		if f&pastDeadLetter != 0 {
			b = appendString(b, string(p.DeadLetter))
		}
		if f&pastOther != 0 {
			data, err := json.Marshal(p.Other)
			if err != nil {
				return nil, err
			}
			b = appendBytes(b, data)
		}
	}
	return b, nil
}

// decodeDecidedBody reads an input's replay and decisions.
func decodeDecidedBody(data []byte, offset, at int64) (DecidedInput, error) {
	in := DecidedInput{Offset: offset, AtMs: at}
	r := reader{data: data}
	in.Replay = r.varint()
	for range r.count() {
		in.Decisions = append(in.Decisions, r.pastDecision())
	}
	if r.err == nil && len(r.data) > 0 {
		r.err = errDecidedLog
	}
	return in, r.err
}

func (r *reader) pastDecision() PastDecision {
	var p PastDecision
	if len(r.data) < 2 {
		r.fail("decision")
		return p
	}
	outcome, f := int(r.data[0]), r.data[1]
	r.data = r.data[2:]
	switch {
	case outcome == 0:
		p.Outcome = record.Result(r.str())
	case outcome <= len(knownOutcomes):
		p.Outcome = knownOutcomes[outcome-1]
	default:
		r.fail("outcome")
	}
	p.Version = r.varint()
	if f&pastReason != 0 {
		p.Reason = record.Reason(r.str())
	}
	if f&pastGap != 0 {
		p.Gap = r.varint()
	}
	if f&pastBufferDepth != 0 {
		p.BufferDepth = int(r.varint())
	}
	if f&pastMessageID != 0 {
		p.MessageID = r.str()
	}
	if f&pastDeadLetter != 0 {
		p.DeadLetter = record.Reason(r.str())
	}
	if f&pastOther != 0 {
		p.Other = &decide.Event{}
		if data := r.bytes(); r.err == nil {
			if err := json.Unmarshal(data, p.Other); err != nil {
				r.err = err
			}
		}
	}
	return p
}
