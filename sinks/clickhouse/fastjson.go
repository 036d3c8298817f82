package clickhouse

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/driftguard/driftguard/internal/envelope"
)

// decodeOutcome reads an outcome record's value. Outcomes are most of what
// the sink reads and encoding/json spends more time on them than the
// INSERT does, so the flat objects the processors write (strings without
// escapes, integers, a raw payload) are read by a scanner of its own; any
// other input goes to encoding/json, so the result is always what
// encoding/json gives (FuzzDecodeOutcome holds the two to that).
//
// The fast path reads data as a string without copying it, and every
// string field, payload included, is a part of that string: no allocation
// at all (row is the caller's, reused record after record). The strings
// are copied into the block's columns right after.
func decodeOutcome(data []byte, row *outcomeRow) error {
	*row = outcomeRow{}
	var ok bool
	if row.payload, ok = scanOutcome(data, &row.Outcome); ok {
		return nil
	}
	*row = outcomeRow{}
	if err := json.Unmarshal(data, &row.Outcome); err != nil {
		return err
	}
	row.payload, row.Payload = string(row.Payload), nil
	return nil
}

// outcomeRow is a decoded outcome with its payload as the string the
// payload column takes (Payload is left nil).
type outcomeRow struct {
	envelope.Outcome
	payload string
}

// outcomeKeys are the JSON names of envelope.Outcome's fields, read from
// its tags so that a case-folded spelling of any of them, a field added
// later included, goes to encoding/json. Their order is the struct's, the
// order the processors write them in.
var outcomeKeys = func() []string {
	t := reflect.TypeFor[envelope.Outcome]()
	keys := make([]string, t.NumField())
	for i := range keys {
		keys[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return keys
}()

// quotedKeys are outcomeKeys as they start a member: `"stream":`.
var quotedKeys = func() []string {
	out := make([]string, len(outcomeKeys))
	for i, k := range outcomeKeys {
		out[i] = `"` + k + `":`
	}
	return out
}()

// The fields scanOutcome reads, by their index in outcomeKeys.
var (
	fieldStream         = outcomeField("stream")
	fieldKey            = outcomeField("key")
	fieldEventID        = outcomeField("event_id")
	fieldType           = outcomeField("type")
	fieldOutcome        = outcomeField("outcome")
	fieldReason         = outcomeField("reason")
	fieldMessageID      = outcomeField("message_id")
	fieldVersion        = outcomeField("version")
	fieldGap            = outcomeField("gap")
	fieldBufferDepth    = outcomeField("buffer_depth")
	fieldOccurredAtMs   = outcomeField("occurred_at_ms")
	fieldReceivedAtMs   = outcomeField("received_at_ms")
	fieldProcessedAtMs  = outcomeField("processed_at_ms")
	fieldInputPartition = outcomeField("input_partition")
	fieldInputOffset    = outcomeField("input_offset")
	fieldPayload        = outcomeField("payload")
)

// outcomeField is the index of key in outcomeKeys, or -1.
func outcomeField(key string) int {
	for i, k := range outcomeKeys {
		if k == key {
			return i
		}
	}
	return -1
}

// scanOutcome fills o but its Payload, which it returns as a string, from
// a flat JSON object; or reports false when the input needs encoding/json
// (escapes, nulls, floats, case-folded keys, anything invalid).
func scanOutcome(data []byte, o *envelope.Outcome) (payload string, _ bool) {
	s := scanner{b: data, s: unsafe.String(unsafe.SliceData(data), len(data))}
	if !s.skip('{') {
		return "", false
	}
	if s.skip('}') {
		return "", s.end()
	}
	next := 0 // where the key after the last one would be, in write order
	for {
		field, ok := s.member(next)
		if !ok {
			return "", false
		}
		if field >= 0 {
			next = field + 1
		}
		switch field {
		case fieldStream:
			o.Stream, ok = s.str()
		case fieldKey:
			o.Key, ok = s.str()
		case fieldEventID:
			o.EventID, ok = s.str()
		case fieldType:
			o.EventType, ok = s.str()
		case fieldOutcome:
			o.Outcome, ok = s.str()
		case fieldReason:
			o.Reason, ok = s.str()
		case fieldMessageID:
			o.MessageID, ok = s.str()
		case fieldVersion:
			o.Version, ok = s.int(64)
		case fieldGap:
			o.Gap, ok = s.int(64)
		case fieldBufferDepth:
			var n int64
			n, ok = s.int(strconv.IntSize)
			o.BufferDepth = int(n)
		case fieldOccurredAtMs:
			o.OccurredAtMs, ok = s.int(64)
		case fieldReceivedAtMs:
			o.ReceivedAtMs, ok = s.int(64)
		case fieldProcessedAtMs:
			o.ProcessedAtMs, ok = s.int(64)
		case fieldInputPartition:
			var n int64
			n, ok = s.int(32)
			o.InputPartition = int32(n)
		case fieldInputOffset:
			o.InputOffset, ok = s.int(64)
		case fieldPayload:
			payload, ok = s.value()
		default:
			_, ok = s.value()
		}
		if !ok {
			return "", false
		}
		if s.skip('}') {
			return payload, s.end()
		}
		if !s.skip(',') {
			return "", false
		}
	}
}

// member reads a member's key and colon, and returns the key's index in
// outcomeKeys, or -1 for a key the outcome does not have. The processors
// write the keys in order, some left out, so the next few expected keys
// are matched as they stand first; any other spelling goes through str.
// It reports false for a key that encoding/json would match case-folded.
func (s *scanner) member(next int) (int, bool) {
	s.space()
	for i := next; i < min(next+3, len(quotedKeys)); i++ {
		if strings.HasPrefix(s.s[s.i:], quotedKeys[i]) {
			s.i += len(quotedKeys[i])
			return i, true
		}
	}
	key, ok := s.str()
	if !ok || !s.skip(':') {
		return 0, false
	}
	if field := outcomeField(key); field >= 0 {
		return field, true
	}
	// encoding/json matches keys case-insensitively.
	for _, k := range outcomeKeys {
		if strings.EqualFold(k, key) {
			return 0, false
		}
	}
	return -1, true
}

// scanner reads JSON from b at i, skipping white space before each token;
// s is b as a string, whose parts it returns.
type scanner struct {
	b []byte
	s string
	i int
}

func (s *scanner) space() {
	b, i := s.b, s.i
	// Every byte of JSON's white space is below '!'; the records the
	// processors write have none, so one comparison usually settles it.
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	s.i = i
}

// skip consumes c if it is the next token.
func (s *scanner) skip(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// str reads a string without escapes, control characters or invalid UTF-8.
func (s *scanner) str() (string, bool) {
	if !s.skip('"') {
		return "", false
	}
	start := s.i
	nonASCII := s.plain()
	if s.i < len(s.b) && s.b[s.i] == '"' {
		s.i++
		return s.s[start : s.i-1], !nonASCII || utf8.ValidString(s.s[start:s.i-1])
	}
	return "", false // an escape, a control character or the end
}

// Eight bytes at a time: a byte of each, and their high bits.
const (
	eachByte  = 0x0101010101010101
	highBits  = 0x8080808080808080
	quotes    = '"' * eachByte
	backslash = '\\' * eachByte
	controls  = 0x20 * eachByte
)

// plain passes over the part of a string that needs no second look: up to
// a quote, a backslash, a control character or the end. It reads eight
// bytes at a time, and reports whether any byte it passed is not ASCII.
func (s *scanner) plain() (nonASCII bool) {
	b, i := s.b, s.i
	var seen uint64
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^quotes, x^backslash
		// Nonzero when a byte of q or bs is zero or a byte of x is below
		// 0x20 (the high bit of (v - 0x01…) &^ v marks a byte of v below
		// 1; exact as to whether there is one, if not which).
		if ((q-eachByte)&^q|(bs-eachByte)&^bs|(x-controls)&^x)&highBits != 0 {
			break
		}
		seen |= x
	}
	for ; i < len(b); i++ {
		c := b[i]
		if c == '"' || c == '\\' || c < 0x20 {
			break
		}
		seen |= uint64(c)
	}
	s.i = i
	return seen&highBits != 0
}

// int reads an integer in JSON's grammar (no fraction or exponent) that
// fits bits, reading its digits once.
func (s *scanner) int(bits int) (int64, bool) {
	s.space()
	b, i := s.b, s.i // in registers through the digit loop
	start := i
	negative := i < len(b) && b[i] == '-'
	if negative {
		i++
	}
	first := i
	var n uint64 // wraps past 19 digits, which strconv reads instead
	for ; i < len(b); i++ {
		d := b[i] - '0'
		if d >= 10 {
			break
		}
		n = n*10 + uint64(d)
	}
	s.i = i
	digits := i - first
	if digits == 0 || (digits > 1 && b[first] == '0') ||
		(i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E')) {
		return 0, false
	}
	if digits > 18 {
		// Might not fit in 63 bits: strconv decides.
		v, err := strconv.ParseInt(s.s[start:i], 10, bits)
		return v, err == nil
	}
	v := int64(n)
	if negative {
		v = -v
	}
	if bits < 64 && v != v<<(64-bits)>>(64-bits) {
		return 0, false
	}
	return v, true
}

// integer passes over JSON's integer part: -?(0|[1-9][0-9]*).
func (s *scanner) integer() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	start := s.i
	if !s.digits() {
		return false
	}
	return s.i-start == 1 || s.b[start] != '0'
}

// value reads any JSON value whole, checking it as encoding/json would,
// and returns its text.
func (s *scanner) value() (string, bool) {
	s.space()
	start := s.i
	if !s.skipValue(0) {
		return "", false
	}
	return s.s[start:s.i], true
}

// maxDepth bounds nesting; deeper values go to encoding/json.
const maxDepth = 1000

// skipValue passes over one value in a single pass, validating it.
func (s *scanner) skipValue(depth int) bool {
	s.space()
	if s.i >= len(s.b) || depth > maxDepth {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.skipString()
	case c == '-' || (c >= '0' && c <= '9'):
		return s.skipNumber()
	case c == '{':
		s.i++
		if s.skip('}') {
			return true
		}
		for {
			s.space()
			if !s.skipString() || !s.skip(':') || !s.skipValue(depth+1) {
				return false
			}
			if s.skip('}') {
				return true
			}
			if !s.skip(',') {
				return false
			}
		}
	case c == '[':
		s.i++
		if s.skip(']') {
			return true
		}
		for {
			if !s.skipValue(depth + 1) {
				return false
			}
			if s.skip(']') {
				return true
			}
			if !s.skip(',') {
				return false
			}
		}
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if strings.HasPrefix(s.s[s.i:], lit) {
				s.i += len(lit)
				return true
			}
		}
		return false
	}
}

// skipString passes over a string with any valid escapes.
func (s *scanner) skipString() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	s.i++
	for {
		s.plain()
		if s.i >= len(s.b) || s.b[s.i] < 0x20 {
			return false
		}
		if s.b[s.i] == '"' {
			s.i++
			return true
		}
		// A backslash.
		s.i++
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if s.i+4 >= len(s.b) {
				return false
			}
			for _, h := range s.b[s.i+1 : s.i+5] {
				if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
					return false
				}
			}
			s.i += 4
		default:
			return false
		}
		s.i++
	}
}

// skipNumber passes over a number in JSON's full grammar.
func (s *scanner) skipNumber() bool {
	if !s.integer() {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		return s.digits()
	}
	return true
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}
