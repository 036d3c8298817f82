package record

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// The scanner of the outcome and state decoders (codec.go). The flat
// objects the encoders write (strings without escapes, integers, one raw
// JSON value) are read here; any other input goes to encoding/json
// (FuzzDecodeOutcome and FuzzDecodeState hold the two to that).
//
// It reads data as a string without copying it, and every string field,
// the raw value included, is a part of that string: no allocation at all.

// flatFields describe the fields of a flat record type: strings,
// integers and one raw JSON value. Their keys are the JSON names, read
// from the tags so that a case-folded spelling of any of them, a field
// added later included, goes to encoding/json; their order is the
// struct's, the order the encoders write them in. quoted are the keys as
// they start a member (`"stream":`), and kinds and offsets say how to store
// each value.
type flatFields struct {
	keys, quoted []string
	kinds        []fieldKind
	offsets      []uintptr
}

type fieldKind uint8

const (
	// kindOther is a field the scanner cannot fill; its key hands the
	// record to encoding/json.
	kindOther fieldKind = iota
	kindString
	kindInt
	kindInt32
	kindInt64
	kindRaw
)

var rawMessage = reflect.TypeFor[json.RawMessage]()

func fieldsOf[T any]() *flatFields {
	t := reflect.TypeFor[T]()
	n := t.NumField()
	f := &flatFields{keys: make([]string, n), quoted: make([]string, n), kinds: make([]fieldKind, n), offsets: make([]uintptr, n)}
	for i := range n {
		field := t.Field(i)
		f.keys[i], _, _ = strings.Cut(field.Tag.Get("json"), ",")
		f.quoted[i] = `"` + f.keys[i] + `":`
		f.offsets[i] = field.Offset
		switch {
		case field.Type == rawMessage && !slices.Contains(f.kinds, kindRaw):
			f.kinds[i] = kindRaw // one per record: scanFlat returns it
		case field.Type.Kind() == reflect.String: // Result and Reason too
			f.kinds[i] = kindString
		case field.Type.Kind() == reflect.Int:
			f.kinds[i] = kindInt
		case field.Type.Kind() == reflect.Int32:
			f.kinds[i] = kindInt32
		case field.Type.Kind() == reflect.Int64:
			f.kinds[i] = kindInt64
		}
	}
	return f
}

// index is the index of key among the fields, or noField.
func (f *flatFields) index(key string) int {
	for i, k := range f.keys {
		if k == key {
			return i
		}
	}
	return noField
}

// noField is the index of a key that is none of the fields.
const noField = -1

// scanFlat fills v, a record of fields, but its raw field, which it
// returns as a string, from a flat JSON object; or reports false when the
// input needs encoding/json (escapes, nulls, floats, case-folded keys,
// anything invalid, a field of another kind). Members of other keys are
// passed over, as encoding/json does.
func scanFlat[T any](data []byte, v *T, fields *flatFields) (raw string, _ bool) {
	s := scanner{b: data, s: unsafe.String(unsafe.SliceData(data), len(data))}
	if !s.skip('{') {
		return "", false
	}
	if s.skip('}') {
		return "", s.end()
	}
	base := unsafe.Pointer(v)
	next := 0 // where the key after the last one would be, in write order
	for {
		field, ok := s.member(fields, next)
		if !ok {
			return "", false
		}
		if field == noField {
			_, ok = s.value()
		} else {
			next = field + 1
			// The offsets are those of T's fields, of the kinds fieldsOf
			// found there.
			at := unsafe.Add(base, fields.offsets[field])
			switch fields.kinds[field] {
			case kindString:
				*(*string)(at), ok = s.str()
			case kindInt64:
				*(*int64)(at), ok = s.int(64)
			case kindInt32:
				var n int64
				n, ok = s.int(32)
				*(*int32)(at) = int32(n)
			case kindInt:
				var n int64
				n, ok = s.int(strconv.IntSize)
				*(*int)(at) = int(n)
			case kindRaw:
				raw, ok = s.value()
			default:
				ok = false
			}
		}
		if !ok {
			return "", false
		}
		if s.skip('}') {
			return raw, s.end()
		}
		if !s.skip(',') {
			return "", false
		}
	}
}

// member reads a member's key and colon, and returns the key's index
// among fields, or noField for a key that is none of them. The encoders write
// the keys in order, some left out, so the next few expected keys are
// matched as they stand first; any other spelling goes through str. It
// reports false for a key that encoding/json would match case-folded.
func (s *scanner) member(fields *flatFields, next int) (int, bool) {
	s.space()
	for i := next; i < min(next+3, len(fields.quoted)); i++ {
		if strings.HasPrefix(s.s[s.i:], fields.quoted[i]) {
			s.i += len(fields.quoted[i])
			return i, true
		}
	}
	key, ok := s.str()
	if !ok || !s.skip(':') {
		return 0, false
	}
	if field := fields.index(key); field >= 0 {
		return field, true
	}
	// encoding/json matches keys case-insensitively.
	for _, k := range fields.keys {
		if strings.EqualFold(k, key) {
			return 0, false
		}
	}
	return noField, true
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
