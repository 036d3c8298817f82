package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of a webhook body: no event needs more, and
// deep nesting is a cheap way to make a parser work hard.
const MaxDepth = 64

// maxExactInteger is the largest integer a float64 reader (JavaScript,
// ClickHouse's JSON functions) keeps exact; I-JSON (RFC 7493 §2.2) bounds
// integers by it.
const maxExactInteger = 1<<53 - 1

// maxSignificantDigits is the most digits a float64 writer prints: a
// decimal with more never comes back from a float64 reader as it was sent.
// One with 16 or 17 may not either, but refusing those would refuse what
// float64 writers such as JavaScript send.
const maxSignificantDigits = 17

// maxNumberLength caps a number literal: a float64 needs no more than
// about 330 characters even written out in full, and validators parse long
// literals with big-number arithmetic (a million zeros after "1." would
// cost a validator seconds).
const maxNumberLength = 400

// Problems of numbers that a float64 reader would change.
const (
	problemTooLong        = "number literal longer than 400 characters"
	problemInexactInteger = "integer outside ±(2^53−1): a float64 reader would change it"
	problemTooPrecise     = "more than 17 significant digits: a float64 reader would change it"
	problemTooLarge       = "number too large for a float64 reader"
	problemTooSmall       = "number too small for a float64 reader: it would read 0"
)

var errInvalidUTF8 = errors.New("not JSON: invalid UTF-8")

// Decode parses body as one JSON value with numbers kept exact: objects are
// map[string]any, arrays []any, numbers json.Number, as encoding/json with
// UseNumber would build them. It is the only JSON decoder of webhook bodies,
// so validation and extraction see the same value. It is strict where
// readers disagree: invalid UTF-8 (which encoding/json would silently
// replace), duplicate keys (first or last wins, depending on the reader),
// nesting deeper than MaxDepth, and numbers a float64 reader would change
// are errors; a *FieldError locates all but the first.
//
// It reads the body in one pass without a tokenizer, because it runs on
// every webhook the edge accepts; keys, strings and numbers without escapes
// share one copy of the body instead of one allocation each.
func Decode(body []byte) (any, error) {
	d := &decoder{text: string(body)}
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos < len(d.text) {
		return nil, d.syntaxError("data after the top-level value")
	}
	return v, nil
}

// topLevelMembers sizes the top-level object's map.
const topLevelMembers = 16

// decoder reads one JSON text. text is the body as a string so that
// substrings of it need no allocation.
type decoder struct {
	text string
	pos  int
}

// value reads the value starting at pos; depth is the number of containers
// it is in.
func (d *decoder) value(depth int) (any, error) {
	if d.pos >= len(d.text) {
		return nil, d.syntaxError("unexpected end of input")
	}
	switch c := d.text[d.pos]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, err := d.string()
		if err != nil {
			return nil, err
		}
		return s, nil
	case c == '-' || isDigit(c):
		return d.number()
	case c == 't':
		return d.literal("true", true)
	case c == 'f':
		return d.literal("false", false)
	case c == 'n':
		return d.literal("null", nil)
	default:
		return nil, d.syntaxError("looking for the beginning of a value")
	}
}

func (d *decoder) object(depth int) (any, error) {
	if depth >= MaxDepth {
		return nil, tooDeep()
	}
	d.pos++ // {
	var obj map[string]any
	if depth == 0 {
		// Room for a typical webhook's members at once: growing a map past
		// eight members rebuilds it.
		obj = make(map[string]any, topLevelMembers)
	} else {
		obj = map[string]any{}
	}
	if d.skipSpace(); d.consume('}') {
		return obj, nil
	}
	for {
		key, err := d.key()
		if err != nil {
			return nil, err
		}
		if _, dup := obj[key]; dup {
			return nil, within(&FieldError{Problem: "duplicate key"}, key)
		}
		if obj[key], err = d.value(depth + 1); err != nil {
			return nil, within(err, key)
		}
		if done, err := d.endOfMember('}'); done || err != nil {
			return obj, err
		}
	}
}

// key reads an object's key and the colon after it, leaving pos on the
// value.
func (d *decoder) key() (string, error) {
	if d.pos >= len(d.text) || d.text[d.pos] != '"' {
		return "", d.syntaxError("looking for the beginning of an object key")
	}
	key, err := d.string()
	if err != nil {
		return "", err
	}
	if d.skipSpace(); !d.consume(':') {
		return "", d.syntaxError("after an object key")
	}
	d.skipSpace()
	return key, nil
}

func (d *decoder) array(depth int) (any, error) {
	if depth >= MaxDepth {
		return nil, tooDeep()
	}
	d.pos++ // [
	// Never nil, as encoding/json builds it: an empty array is not null.
	arr := []any{}
	if d.skipSpace(); d.consume(']') {
		return arr, nil
	}
	for {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, within(err, strconv.Itoa(len(arr)))
		}
		arr = append(arr, v)
		if done, err := d.endOfMember(']'); done || err != nil {
			return arr, err
		}
	}
}

// endOfMember reads what follows a member of a container: a comma, then
// space up to the next member, or the closing byte.
func (d *decoder) endOfMember(closing byte) (done bool, err error) {
	d.skipSpace()
	switch {
	case d.consume(','):
		d.skipSpace()
		return false, nil
	case d.consume(closing):
		return true, nil
	default:
		return false, d.syntaxError("after a member of an object or array")
	}
}

// string reads a string; one without escapes is a slice of the text.
func (d *decoder) string() (string, error) {
	start := d.pos + 1
	for i := start; i < len(d.text); {
		switch c := d.text[i]; {
		case c == '"':
			d.pos = i + 1
			return d.text[start:i], nil
		case c == '\\':
			return d.unescape(start, i)
		case c < ' ':
			d.pos = i
			return "", d.syntaxError("control character in a string")
		case c < utf8.RuneSelf:
			i++
		default:
			size, ok := validRune(d.text[i:])
			if !ok {
				return "", errInvalidUTF8
			}
			i += size
		}
	}
	d.pos = len(d.text)
	return "", d.syntaxError("unexpected end of input in a string")
}

// unescape reads the rest of a string whose first escape is at i, into a
// new string.
func (d *decoder) unescape(start, i int) (string, error) {
	// Room for a few escapes; sizing it by the rest of the body would make
	// a body of many escaped strings quadratic in memory.
	buf := make([]byte, 0, i-start+16)
	buf = append(buf, d.text[start:i]...)
	for i < len(d.text) {
		c := d.text[i]
		switch {
		case c == '"':
			d.pos = i + 1
			return string(buf), nil
		case c == '\\':
			var ok bool
			if buf, i, ok = appendEscape(buf, d.text, i); !ok {
				d.pos = i
				return "", d.syntaxError("invalid escape in a string")
			}
		case c < ' ':
			d.pos = i
			return "", d.syntaxError("control character in a string")
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			size, ok := validRune(d.text[i:])
			if !ok {
				return "", errInvalidUTF8
			}
			buf = append(buf, d.text[i:i+size]...)
			i += size
		}
	}
	d.pos = len(d.text)
	return "", d.syntaxError("unexpected end of input in a string")
}

// appendEscape decodes the escape at text[i] onto buf and returns the index
// after it. A \u escape of half a surrogate pair that is not followed by the
// other half becomes U+FFFD, as encoding/json decodes it.
func appendEscape(buf []byte, text string, i int) ([]byte, int, bool) {
	if i+1 >= len(text) {
		return buf, i, false
	}
	if c, ok := unescapeByte(text[i+1]); ok {
		return append(buf, c), i + 2, true
	}
	r, ok := hex4(text, i)
	if !ok {
		return buf, i, false
	}
	i += 6
	if !utf16.IsSurrogate(r) {
		return utf8.AppendRune(buf, r), i, true
	}
	if low, ok := hex4(text, i); ok {
		if pair := utf16.DecodeRune(r, low); pair != unicode.ReplacementChar {
			return utf8.AppendRune(buf, pair), i + 6, true
		}
	}
	return utf8.AppendRune(buf, unicode.ReplacementChar), i, true
}

// unescapeByte returns the byte a one-letter escape such as \n stands for.
func unescapeByte(c byte) (byte, bool) {
	switch c {
	case '"', '\\', '/':
		return c, true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}

// hex4 reads the rune of a \uXXXX escape at text[i].
func hex4(text string, i int) (rune, bool) {
	if i+6 > len(text) || text[i] != '\\' || text[i+1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(text[i+2:i+6], 16, 32)
	return rune(n), err == nil
}

// validRune returns the length of the UTF-8 sequence text starts with, and
// whether it is valid.
func validRune(text string) (int, bool) {
	r, size := utf8.DecodeRuneInString(text)
	return size, r != utf8.RuneError || size > 1
}

// number reads a number literal and keeps its text.
func (d *decoder) number() (any, error) {
	start := d.pos
	d.consume('-')
	if !d.consume('0') && !d.digits() {
		return nil, d.syntaxError("in a number")
	}
	if d.consume('.') && !d.digits() {
		return nil, d.syntaxError("after the decimal point of a number")
	}
	if d.consume('e') || d.consume('E') {
		if !d.consume('+') {
			d.consume('-')
		}
		if !d.digits() {
			return nil, d.syntaxError("in the exponent of a number")
		}
	}
	literal := d.text[start:d.pos]
	if problem := numberProblem(literal); problem != "" {
		return nil, &FieldError{Problem: problem}
	}
	return json.Number(literal), nil
}

// digits reads one or more decimal digits.
func (d *decoder) digits() bool {
	start := d.pos
	for d.pos < len(d.text) && isDigit(d.text[d.pos]) {
		d.pos++
	}
	return d.pos > start
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (d *decoder) literal(word string, v any) (any, error) {
	if len(d.text)-d.pos < len(word) || d.text[d.pos:d.pos+len(word)] != word {
		return nil, d.syntaxError("in a literal")
	}
	d.pos += len(word)
	return v, nil
}

// consume advances past c if it is next.
func (d *decoder) consume(c byte) bool {
	if d.pos < len(d.text) && d.text[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.text) {
		switch d.text[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// syntaxError describes what was found at pos; like encoding/json's, it is
// not a *FieldError, because a body that is not JSON has no fields.
func (d *decoder) syntaxError(context string) error {
	if d.pos >= len(d.text) {
		return fmt.Errorf("not JSON: unexpected end of input (%s)", context)
	}
	return fmt.Errorf("not JSON: unexpected %q at byte %d (%s)", d.text[d.pos:d.pos+1], d.pos, context)
}

func tooDeep() error {
	return &FieldError{Problem: fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
}

// within locates a *FieldError from a member one level further out, under
// token. Pointers are built only for errors, while the decoder unwinds, so
// accepted bodies pay nothing for them.
func within(err error, token string) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		fe.Pointer = "/" + EscapePointer(token) + fe.Pointer
	}
	return err
}

// numberProblem says why a float64 reader would change a number literal,
// or returns "" when it would not.
func numberProblem(literal string) string {
	if len(literal) > maxNumberLength {
		return problemTooLong
	}
	if isIntegerLiteral(literal) {
		if _, ok := parseExactInteger(literal); !ok {
			return problemInexactInteger
		}
		return ""
	}
	digits := significantDigits(literal)
	if digits > maxSignificantDigits {
		return problemTooPrecise
	}
	f, err := strconv.ParseFloat(literal, 64)
	switch {
	case err != nil:
		return problemTooLarge
	case f == 0 && digits > 0:
		return problemTooSmall
	}
	return ""
}

// isIntegerLiteral reports whether a number literal has neither a fraction
// nor an exponent.
func isIntegerLiteral(literal string) bool {
	for i := 0; i < len(literal); i++ {
		if c := literal[i]; c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// parseExactInteger parses an integer literal within ±(2^53−1).
func parseExactInteger(literal string) (int64, bool) {
	n, err := strconv.ParseInt(literal, 10, 64)
	return n, err == nil && -maxExactInteger <= n && n <= maxExactInteger
}

// significantDigits counts the mantissa's digits from its first non-zero
// digit to its last: zeros outside that span only place the point, which
// the exponent of a float64 does exactly.
func significantDigits(literal string) int {
	first, last, at := -1, -1, 0
	for i := 0; i < len(literal); i++ {
		c := literal[i]
		if c == 'e' || c == 'E' {
			break
		}
		if !isDigit(c) {
			continue // the sign and the point
		}
		if c != '0' {
			if first < 0 {
				first = at
			}
			last = at
		}
		at++
	}
	if first < 0 {
		return 0
	}
	return last - first + 1
}
