package clickhouse

import (
	"encoding/json"
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
// but the row. That holds only while nothing writes to data again, which
// is so for a record value: franz-go allocates a fresh buffer for every
// fetch response and every decompressed batch unless the client is given
// pools (kgo.WithPools), which the sink's client is not.
func decodeOutcome(data []byte) (*outcomeRow, error) {
	row := new(outcomeRow)
	var ok bool
	if row.payload, ok = scanOutcome(data, &row.Outcome); ok {
		return row, nil
	}
	row = new(outcomeRow)
	if err := json.Unmarshal(data, &row.Outcome); err != nil {
		return nil, err
	}
	row.payload, row.Payload = string(row.Payload), nil
	return row, nil
}

// outcomeRow is a decoded outcome with its payload as the string the
// payload column takes (Payload is left nil).
type outcomeRow struct {
	envelope.Outcome
	payload string
}

// outcomeKeys are the JSON names of envelope.Outcome's fields.
var outcomeKeys = []string{"stream", "key", "event_id", "type", "version", "outcome", "reason", "gap", "buffer_depth",
	"message_id", "occurred_at_ms", "received_at_ms", "processed_at_ms", "input_partition", "input_offset", "payload"}

// The string and integer fields of envelope.Outcome by JSON name.
var outcomeStrings = map[string]func(*envelope.Outcome) *string{
	"stream":     func(o *envelope.Outcome) *string { return &o.Stream },
	"key":        func(o *envelope.Outcome) *string { return &o.Key },
	"event_id":   func(o *envelope.Outcome) *string { return &o.EventID },
	"type":       func(o *envelope.Outcome) *string { return &o.EventType },
	"outcome":    func(o *envelope.Outcome) *string { return &o.Outcome },
	"reason":     func(o *envelope.Outcome) *string { return &o.Reason },
	"message_id": func(o *envelope.Outcome) *string { return &o.MessageID },
}

type intField struct {
	bits int
	set  func(*envelope.Outcome, int64)
}

var outcomeInts = map[string]intField{
	"version":         {64, func(o *envelope.Outcome, n int64) { o.Version = n }},
	"gap":             {64, func(o *envelope.Outcome, n int64) { o.Gap = n }},
	"buffer_depth":    {strconv.IntSize, func(o *envelope.Outcome, n int64) { o.BufferDepth = int(n) }},
	"occurred_at_ms":  {64, func(o *envelope.Outcome, n int64) { o.OccurredAtMs = n }},
	"received_at_ms":  {64, func(o *envelope.Outcome, n int64) { o.ReceivedAtMs = n }},
	"processed_at_ms": {64, func(o *envelope.Outcome, n int64) { o.ProcessedAtMs = n }},
	"input_partition": {32, func(o *envelope.Outcome, n int64) { o.InputPartition = int32(n) }},
	"input_offset":    {64, func(o *envelope.Outcome, n int64) { o.InputOffset = n }},
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
	for {
		key, ok := s.str()
		if !ok || !s.skip(':') {
			return "", false
		}
		if field, isString := outcomeStrings[key]; isString {
			*field(o), ok = s.str()
		} else if field, isInt := outcomeInts[key]; isInt {
			var n int64
			n, ok = s.int(field.bits)
			field.set(o, n)
		} else if key == "payload" {
			payload, ok = s.value()
		} else {
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
	start, ok := s.rawString()
	if !ok {
		return "", false
	}
	return s.s[start+1 : s.i-1], true
}

// rawString reads a string without escapes, returning where its opening
// quote is.
func (s *scanner) rawString() (int, bool) {
	if !s.skip('"') {
		return 0, false
	}
	start, ascii := s.i-1, true
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return start, ascii || utf8.Valid(s.b[start:s.i])
		case c == '\\' || c < 0x20:
			return 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return 0, false
}

// int reads an integer in JSON's grammar (no fraction or exponent) that
// fits bits.
func (s *scanner) int(bits int) (int64, bool) {
	raw, ok := s.number()
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(raw, 10, bits)
	return n, err == nil
}

func (s *scanner) number() (string, bool) {
	s.space()
	start := s.i
	if !s.integer() || (s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E')) {
		return "", false
	}
	return s.s[start:s.i], true
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
	for s.i++; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
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
		}
	}
	return false
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
