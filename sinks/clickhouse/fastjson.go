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
// later included, goes to encoding/json.
var outcomeKeys = func() []string {
	t := reflect.TypeFor[envelope.Outcome]()
	keys := make([]string, t.NumField())
	for i := range keys {
		keys[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return keys
}()

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
	for {
		key, ok := s.str()
		if !ok || !s.skip(':') {
			return "", false
		}
		// A switch, not a map: the field names cost a few comparisons of
		// lengths and words.
		switch key {
		case "stream":
			o.Stream, ok = s.str()
		case "key":
			o.Key, ok = s.str()
		case "event_id":
			o.EventID, ok = s.str()
		case "type":
			o.EventType, ok = s.str()
		case "outcome":
			o.Outcome, ok = s.str()
		case "reason":
			o.Reason, ok = s.str()
		case "message_id":
			o.MessageID, ok = s.str()
		case "version":
			o.Version, ok = s.int(64)
		case "gap":
			o.Gap, ok = s.int(64)
		case "buffer_depth":
			var n int64
			n, ok = s.int(strconv.IntSize)
			o.BufferDepth = int(n)
		case "occurred_at_ms":
			o.OccurredAtMs, ok = s.int(64)
		case "received_at_ms":
			o.ReceivedAtMs, ok = s.int(64)
		case "processed_at_ms":
			o.ProcessedAtMs, ok = s.int(64)
		case "input_partition":
			var n int64
			n, ok = s.int(32)
			o.InputPartition = int32(n)
		case "input_offset":
			o.InputOffset, ok = s.int(64)
		case "payload":
			payload, ok = s.value()
		default:
			// encoding/json matches keys case-insensitively.
			for _, k := range outcomeKeys {
				if strings.EqualFold(k, key) {
					return "", false
				}
			}
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

// scanner reads JSON from b at i, skipping white space before each token;
// s is b as a string, whose parts it returns.
type scanner struct {
	b []byte
	s string
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
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
	start := s.i
	negative := s.i < len(s.b) && s.b[s.i] == '-'
	if negative {
		s.i++
	}
	first := s.i
	var n uint64 // wraps past 19 digits, which strconv reads instead
	for s.i < len(s.b) && s.b[s.i]-'0' < 10 {
		n = n*10 + uint64(s.b[s.i]-'0')
		s.i++
	}
	digits := s.i - first
	if digits == 0 || (digits > 1 && s.b[first] == '0') ||
		(s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E')) {
		return 0, false
	}
	if digits > 18 {
		// Might not fit in 63 bits: strconv decides.
		v, err := strconv.ParseInt(s.s[start:s.i], 10, bits)
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
