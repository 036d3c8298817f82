package processors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/driftguard/driftguard/processors/decide"
)

// entityCodec stores the table value (LevelDB and the changelog topic)
// in a compact binary form: the table is written on every event, and JSON
// with its reflection and quoting was a large part of each decision's cost.
// The first byte is the format version; values written as JSON by earlier
// releases (they start with '{') are still read, so a changelog recovered
// after an upgrade decodes. Policy-specific parts that are rare or
// structured (gapless buffer, chat conversation, quarantine) stay JSON inside
// the binary value.
type entityCodec struct{}

// entityFormat1 is the first binary layout, after the version byte:
//
//	flags (applied, terminal, parent seen) · varints version, updated_at_ms,
//	expires_at_ms, next_revision, deadline_ms, gap_since_ms · state ·
//	recent ids · devices (count, then per device in id order: id, flags,
//	varints version, updated_at_ms, expires_at_ms, value, recent ids) ·
//	JSON of buffer, chat, quarantine (empty when absent)
//
// Byte strings are a uvarint length and the bytes; recent ids a uvarint
// count and that many little-endian 64-bit hashes.
const entityFormat1 byte = 1

// entityFormat2 is entityFormat1 followed by the redelivery memory
// (redeliver.go): varint next_input · the decided inputs as a byte string
// in decidedLog's layout. Values of format 1 decode with an empty memory.
const entityFormat2 byte = 2

// entityFormat3 is entityFormat2 with each recent id's seen time (the
// dedup window): the count and the hashes as before, then one varint per
// id, its received_at minus the one before it (the first's minus its row's
// updated_at_ms), about 3 bytes an id. The ids of formats 1 and 2 decode
// unseen, then dated by decide.Entity.DateSeenUnknown.
const entityFormat3 byte = 3

// entityFormat4 is entityFormat3 without the redelivery memory, which only
// goka's own processor needed: an input is decided again only when its
// transaction aborted with its table write. Formats 2 and 3 decode with
// their memory passed over.
const entityFormat4 byte = 4

const (
	flagApplied = 1 << iota
	flagTerminal
	flagParentSeen
	// flagAbandoned marks an entity an operator abandoned (always with
	// flagTerminal), in any format: a release that does not know it reads
	// the entity as terminal, which it is.
	flagAbandoned
)

func (entityCodec) Encode(value any) ([]byte, error) {
	v, ok := value.(*tableValue)
	if !ok {
		return nil, fmt.Errorf("entity codec: got %T", value)
	}
	// Whole, in one value: the runtime writes with EncodeParts, and this
	// is what goka's view and tools that write a value read back alone.
	return encodeEntity(v, entityFormat5)
}

// encodeEntity writes v in a binary format: the newest in production;
// tests write the older ones to check that they still decode.
func encodeEntity(v *tableValue, format byte) ([]byte, error) {
	e := &v.Entity
	seen := format >= entityFormat3
	b := make([]byte, 0, 64+len(e.State)+13*len(e.Recent)+conversationSize(e.Chat))
	f := flags(e.Applied, e.Terminal, e.ParentSeen)
	if e.Abandoned {
		f |= flagAbandoned
	}
	b = append(b, format, f)
	for _, n := range []int64{e.Version, e.UpdatedAtMs, e.ExpiresAtMs, e.NextRevision, e.DeadlineMs, e.GapSinceMs} {
		b = binary.AppendVarint(b, n)
	}
	b = appendBytes(b, e.State)
	b = appendIDs(b, e.Recent, e.UpdatedAtMs, seen)
	b = binary.AppendUvarint(b, uint64(len(e.Devices)))
	for _, id := range slices.Sorted(maps.Keys(e.Devices)) {
		d := e.Devices[id]
		b = appendString(b, id)
		b = append(b, flags(d.Applied, false, false))
		b = binary.AppendVarint(b, d.Version)
		b = binary.AppendVarint(b, d.UpdatedAtMs)
		b = binary.AppendVarint(b, d.ExpiresAtMs)
		b = appendString(b, d.Value)
		b = appendIDs(b, d.Recent, d.UpdatedAtMs, seen)
	}
	// The buffer, the conversation (binary from format 5) and the
	// quarantine.
	b, err := appendJSON(b, e.Buffer)
	if err == nil {
		if format >= entityFormat5 {
			b = appendConversation(b, e.Chat, format)
		} else {
			b, err = appendJSON(b, e.Chat)
		}
	}
	if err == nil {
		b, err = appendJSON(b, e.Quarantine)
	}
	if err != nil {
		return nil, fmt.Errorf("entity codec: %w", err)
	}
	if format == entityFormat2 || format == entityFormat3 {
		// An empty redelivery memory, as those formats carried it.
		b = binary.AppendVarint(b, 0)
		b = appendBytes(b, nil)
	}
	return b, nil
}

// DecodeTableValue reads the entity of a `<stream>-table` changelog
// record, for tools and tests that read the changelog.
func DecodeTableValue(data []byte) (*decide.Entity, error) {
	v, err := entityCodec{}.Decode(data)
	if err != nil {
		return nil, err
	}
	return &v.(*tableValue).Entity, nil
}

// EncodeTableValue writes entity e as a `<stream>-table` value, for tools
// and tests that write what DecodeTableValue reads.
func EncodeTableValue(e *decide.Entity) ([]byte, error) {
	return entityCodec{}.Encode(&tableValue{Entity: *e})
}

func (entityCodec) Decode(data []byte) (any, error) {
	var v tableValue
	e := &v.Entity
	if len(data) > 0 && data[0] == '{' {
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("entity codec: %w", err)
		}
		e.DateSeenUnknown()
		return &v, nil
	}
	if len(data) > 0 && data[0] == sendsPartFormat {
		return nil, errTablePart
	}
	if len(data) == 0 || data[0] < entityFormat1 || data[0] > entityFormat6 {
		return nil, fmt.Errorf("entity codec: unknown format %q", data[:min(len(data), 1)])
	}
	r := reader{data: data[1:], seen: data[0] >= entityFormat3}
	e.Abandoned = len(r.data) > 0 && r.data[0]&flagAbandoned != 0
	e.Applied, e.Terminal, e.ParentSeen = r.flags()
	for _, n := range []*int64{&e.Version, &e.UpdatedAtMs, &e.ExpiresAtMs, &e.NextRevision, &e.DeadlineMs, &e.GapSinceMs} {
		*n = r.varint()
	}
	e.State = r.bytes()
	e.Recent = r.ids(e.UpdatedAtMs)
	if n := r.count(); n > 0 {
		e.Devices = make(map[string]*decide.Device, n)
		for range n {
			id := r.str()
			d := &decide.Device{}
			d.Applied, _, _ = r.flags()
			d.Version, d.UpdatedAtMs, d.ExpiresAtMs = r.varint(), r.varint(), r.varint()
			d.Value = r.str()
			d.Recent = r.ids(d.UpdatedAtMs)
			e.Devices[id] = d
		}
	}
	r.json(&e.Buffer)
	if data[0] >= entityFormat5 {
		e.Chat = r.conversation(data[0], &v.sends)
	} else {
		r.json(&e.Chat)
	}
	r.json(&e.Quarantine)
	if data[0] == entityFormat2 || data[0] == entityFormat3 {
		// The redelivery memory of goka's processor: passed over.
		r.varint()
		r.bytes()
	}
	if r.err == nil && len(r.data) > 0 {
		r.err = errors.New("trailing bytes")
	}
	if r.err != nil {
		return nil, fmt.Errorf("entity codec: %w", r.err)
	}
	if !r.seen {
		e.DateSeenUnknown()
	}
	return &v, nil
}

func flags(applied, terminal, parentSeen bool) byte {
	var f byte
	if applied {
		f |= flagApplied
	}
	if terminal {
		f |= flagTerminal
	}
	if parentSeen {
		f |= flagParentSeen
	}
	return f
}

func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

func appendString(b []byte, v string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// appendIDs appends a row's recent ids: their hashes, then, when seen,
// their seen times as deltas, the first from base (the row's
// updated_at_ms).
func appendIDs(b []byte, ids decide.EventIDs, base int64, seen bool) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint64(b, id.Hash)
	}
	if !seen {
		return b
	}
	for _, id := range ids {
		b = binary.AppendVarint(b, id.AtMs-base)
		base = id.AtMs
	}
	return b
}

// appendJSON appends v as JSON, or an empty string when v is nil or empty.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case []decide.Event:
		if len(v) == 0 {
			return appendBytes(b, nil), nil
		}
	case *decide.Conversation:
		if v == nil {
			return appendBytes(b, nil), nil
		}
	}
	// Without HTML escaping: json.Marshal writes each <, > and & of a
	// held body as six bytes, which heldBytes (decide) does not count.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return appendBytes(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), err
}

// reader consumes a binary entity; the first problem sticks in err and
// later reads return zero values.
type reader struct {
	data []byte
	err  error
	// seen is set when recent ids carry their seen times (format 3).
	seen bool
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated %s", what)
	}
	r.data = nil
}

func (r *reader) flags() (applied, terminal, parentSeen bool) {
	if len(r.data) == 0 {
		r.fail("flags")
		return
	}
	f := r.data[0]
	r.data = r.data[1:]
	return f&flagApplied != 0, f&flagTerminal != 0, f&flagParentSeen != 0
}

func (r *reader) varint() int64 {
	n, size := binary.Varint(r.data)
	if size <= 0 {
		r.fail("number")
		return 0
	}
	r.data = r.data[size:]
	return n
}

// count reads a length and checks it against what is left, so a corrupt
// value cannot make the decoder allocate more than the value's size.
func (r *reader) count() int {
	n, size := binary.Uvarint(r.data)
	if size <= 0 || n > uint64(len(r.data)-size) {
		r.fail("length")
		return 0
	}
	r.data = r.data[size:]
	return int(n)
}

// str reads a byte string as a string (a copy).
func (r *reader) str() string {
	n := r.count()
	if n == 0 {
		return ""
	}
	v := string(r.data[:n])
	r.data = r.data[n:]
	return v
}

// bytes returns a copy: goka may reuse the buffer it decoded from.
func (r *reader) bytes() []byte {
	n := r.count()
	if n == 0 {
		return nil
	}
	v := slices.Clone(r.data[:n])
	r.data = r.data[n:]
	return v
}

// ids reads a row's recent ids, their seen times relative to base (the
// row's updated_at_ms), or unseen before format 3.
func (r *reader) ids(base int64) decide.EventIDs {
	n := r.count()
	if n == 0 || n > len(r.data)/8 {
		if n > 0 {
			r.fail("event ids")
		}
		return nil
	}
	// Room for the id the next decision adds, so it does not copy them.
	ids := make(decide.EventIDs, n, n+1)
	for i := range ids {
		ids[i] = decide.SeenID{Hash: binary.LittleEndian.Uint64(r.data[8*i:]), AtMs: decide.SeenUnknown}
	}
	r.data = r.data[8*n:]
	if !r.seen {
		return ids
	}
	// A local slice: this loop is the hot part of decoding a full memory.
	data := r.data
	for i := range ids {
		delta, size := binary.Varint(data)
		if size <= 0 {
			r.fail("seen times")
			return nil
		}
		base += delta
		ids[i].AtMs = base
		data = data[size:]
	}
	r.data = data
	return ids
}

func (r *reader) json(v any) {
	data := r.bytes()
	if len(data) == 0 || r.err != nil {
		return
	}
	if err := json.Unmarshal(data, v); err != nil {
		r.err = err
	}
}
