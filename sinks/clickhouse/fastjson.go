package clickhouse

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/driftguard/driftguard/internal/envelope"
)

// decodeOutcome reads an outcome record's value. Outcomes are most of what
// the sink reads and encoding/json spends more time on them than the
// INSERT does, so the flat objects the processors write (strings without
// escapes, integers, a raw payload) are read by a scanner of its own; any
// other input goes to encoding/json, so the result is always what
// encoding/json gives (FuzzDecodeOutcome holds the two to that).
//
// The fast path makes one string of the value and every string field,
// payload included, a part of it: one allocation per record.
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
	s := scanner{b: data, s: string(data)}
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
	start, ok := s.rawString(false)
	if !ok {
		return "", false
	}
	return s.s[start+1 : s.i-1], true
}

// rawString reads a string, returning where its opening quote is; escapes
// only when allowed, and then as they come (json.Valid checks them).
func (s *scanner) rawString(escapes bool) (int, bool) {
	if !s.skip('"') {
		return 0, false
	}
	start, ascii := s.i-1, true
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return start, ascii || utf8.Valid(s.b[start:s.i])
		case c == '\\' && escapes && s.i+1 < len(s.b):
			s.i++ // the escaped byte; json.Valid checks the escape
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
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - digits
	if n == 0 || (n > 1 && s.b[digits] == '0') {
		return "", false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return "", false
	}
	return s.s[start:s.i], true
}

// value reads any JSON value whole and returns its bytes; objects and
// arrays are checked with json.Valid, as encoding/json checks all input.
func (s *scanner) value() (string, bool) {
	s.space()
	if s.i >= len(s.b) {
		return "", false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		start, ok := s.rawString(true)
		if !ok {
			return "", false
		}
		return s.s[start:s.i], json.Valid(s.b[start:s.i])
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == '{' || c == '[':
		start, depth := s.i, 0
		for ; s.i < len(s.b); s.i++ {
			switch s.b[s.i] {
			case '"':
				if _, ok := s.rawString(true); !ok {
					return "", false
				}
				s.i--
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return s.s[start:s.i], json.Valid(s.b[start:s.i])
				}
			}
		}
		return "", false
	default:
		for _, lit := range []string{"true", "false"} {
			if strings.HasPrefix(s.s[s.i:], lit) {
				s.i += len(lit)
				return lit, true
			}
		}
		return "", false // null would need encoding/json's rules
	}
}
