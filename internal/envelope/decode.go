package envelope

import (
	"errors"
	"fmt"
	"math"
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

// Parse reads body as one JSON value into a flat Document, with numbers
// kept as their literal text. It is the only JSON decoder of webhook bodies,
// so validation and extraction see the same value. It is strict where
// readers disagree: invalid UTF-8 (which encoding/json would silently
// replace), duplicate keys (first or last wins, depending on the reader),
// nesting deeper than MaxDepth, and numbers a float64 reader would change
// are errors; a *FieldError locates all but the first.
//
// It reads the body in one pass into one array of values in document order,
// with no map or boxed value per member, because it runs on every webhook
// the edge accepts: keys, strings and numbers without escapes are slices of
// one copy of the body. Release the Document when done with its Values.
func Parse(body []byte) (*Document, error) {
	return ParseString(string(body))
}

// ParseString is Parse of a body held as a string, which the Document then
// reads in place instead of copying it.
func ParseString(text string) (*Document, error) {
	if len(text) > math.MaxInt32 {
		return nil, errors.New("not JSON: a body over 2 GiB")
	}
	doc := documents.Get().(*Document)
	p := parser{Document: *doc}
	p.text = text
	p.skipSpace()
	err := p.value(0)
	if p.skipSpace(); err == nil && p.pos < len(p.text) {
		err = p.syntaxError("data after the top-level value")
	}
	*doc = p.Document
	if err != nil {
		doc.Release()
		return nil, err
	}
	return doc, nil
}

// linearKeys is how many members of an object are checked for duplicates
// by comparing each key with those before it; past it, a set of the keys
// keeps a body of many members linear.
const linearKeys = 16

// parser reads one JSON text into the Document it holds, which is a copy
// of the one Parse returns: a local one, so growing its token array costs
// no write barriers.
type parser struct {
	Document
	pos int
}

// value reads the value starting at pos; depth is the number of containers
// it is in.
func (p *parser) value(depth int) error {
	text := p.text
	if p.pos >= len(text) {
		return p.syntaxError("unexpected end of input")
	}
	switch c := text[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.string()
	case c == '-' || isDigit(c):
		return p.number()
	case c == 't':
		return p.literal("true", KindBool, true)
	case c == 'f':
		return p.literal("false", KindBool, false)
	case c == 'n':
		return p.literal("null", KindNull, false)
	default:
		return p.syntaxError("looking for the beginning of a value")
	}
}

// open appends a container's token, to be finished by close.
func (p *parser) open(kind Kind) int32 {
	p.pos++ // { or [
	p.tokens = append(p.tokens, token{kind: kind})
	return int32(len(p.tokens) - 1)
}

// close records a container's size and where its members end.
func (p *parser) close(at int32, n int) {
	t := &p.tokens[at]
	t.a, t.b = int32(n), int32(len(p.tokens))
}

func (p *parser) object(depth int) error {
	if depth >= MaxDepth {
		return tooDeep()
	}
	at := p.open(KindObject)
	if p.skipSpace(); p.consume('}') {
		p.close(at, 0)
		return nil
	}
	var seen map[string]struct{}
	for n := 0; ; n++ {
		keyAt := int32(len(p.tokens))
		if err := p.key(); err != nil {
			return err
		}
		key := p.str(keyAt)
		if p.duplicate(at, key, n, &seen) {
			return within(&FieldError{Problem: "duplicate key"}, key)
		}
		if err := p.value(depth + 1); err != nil {
			return within(err, key)
		}
		if done, err := p.endOfMember('}'); done || err != nil {
			p.close(at, n+1)
			return err
		}
	}
}

// duplicate reports whether the object at at already has key among its n
// members read so far. Small objects compare the keys in place; from
// linearKeys members on, seen holds them.
func (p *parser) duplicate(at int32, key string, n int, seen *map[string]struct{}) bool {
	if n < linearKeys {
		for k := range p.keys(at, n) {
			if p.isKey(k, key) {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*linearKeys)
		for k := range p.keys(at, n) {
			(*seen)[p.str(k)] = struct{}{}
		}
	}
	if _, dup := (*seen)[key]; dup {
		return true
	}
	(*seen)[key] = struct{}{}
	return false
}

// key reads an object's key and the colon after it, leaving pos on the
// value.
func (p *parser) key() error {
	if p.pos >= len(p.text) || p.text[p.pos] != '"' {
		return p.syntaxError("looking for the beginning of an object key")
	}
	if err := p.string(); err != nil {
		return err
	}
	if p.skipSpace(); !p.consume(':') {
		return p.syntaxError("after an object key")
	}
	p.skipSpace()
	return nil
}

func (p *parser) array(depth int) error {
	if depth >= MaxDepth {
		return tooDeep()
	}
	at := p.open(KindArray)
	if p.skipSpace(); p.consume(']') {
		p.close(at, 0)
		return nil
	}
	for n := 0; ; n++ {
		if err := p.value(depth + 1); err != nil {
			return within(err, strconv.Itoa(n))
		}
		if done, err := p.endOfMember(']'); done || err != nil {
			p.close(at, n+1)
			return err
		}
	}
}

// endOfMember reads what follows a member of a container: a comma, then
// space up to the next member, or the closing byte.
func (p *parser) endOfMember(closing byte) (done bool, err error) {
	p.skipSpace()
	switch {
	case p.consume(','):
		p.skipSpace()
		return false, nil
	case p.consume(closing):
		return true, nil
	default:
		return false, p.syntaxError("after a member of an object or array")
	}
}

// scalar appends the token of a string, number or literal and returns it
// for the caller to complete. It writes the fields in place: a token built
// whole and copied in is read back from the stack in pieces other than
// those written, which stalls the processor on every value.
func (p *parser) scalar(kind Kind, a, b int32) *token {
	p.tokens = append(p.tokens, token{})
	t := &p.tokens[len(p.tokens)-1]
	t.kind, t.a, t.b = kind, a, b
	return t
}

// string reads a string; one without escapes is a slice of the text.
func (p *parser) string() error {
	text := p.text
	start := p.pos + 1
	ascii := true
	for i := start; i < len(text); {
		// Most of a body is plain ASCII inside strings: skip it a byte
		// at a time without the cases below.
		for i < len(text) && plainString[text[i]] {
			i++
		}
		if i == len(text) {
			break
		}
		switch c := text[i]; {
		case c == '"':
			p.pos = i + 1
			p.scalar(KindString, int32(start), int32(i)).ascii = ascii
			return nil
		case c == '\\':
			s, err := p.unescape(start, i)
			if err != nil {
				return err
			}
			t := p.scalar(KindString, int32(len(p.unescaped)), 0)
			t.escaped, t.ascii = true, isASCII(s)
			p.unescaped = append(p.unescaped, s)
			return nil
		case c < ' ':
			p.pos = i
			return p.syntaxError("control character in a string")
		case c < utf8.RuneSelf:
			i++
		default:
			size, ok := validRune(text[i:])
			if !ok {
				return errInvalidUTF8
			}
			i += size
			ascii = false
		}
	}
	p.pos = len(text)
	return p.syntaxError("unexpected end of input in a string")
}

// plainString marks the bytes a string holds as they are: printable ASCII
// other than the quote and the backslash.
var plainString = func() (plain [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		plain[c] = c != '"' && c != '\\'
	}
	return plain
}()

// unescape reads the rest of a string whose first escape is at i, into a
// new string.
func (p *parser) unescape(start, i int) (string, error) {
	// Room for a few escapes; sizing it by the rest of the body would make
	// a body of many escaped strings quadratic in memory.
	buf := make([]byte, 0, i-start+16)
	buf = append(buf, p.text[start:i]...)
	for i < len(p.text) {
		c := p.text[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return string(buf), nil
		case c == '\\':
			var ok bool
			if buf, i, ok = appendEscape(buf, p.text, i); !ok {
				p.pos = i
				return "", p.syntaxError("invalid escape in a string")
			}
		case c < ' ':
			p.pos = i
			return "", p.syntaxError("control character in a string")
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			size, ok := validRune(p.text[i:])
			if !ok {
				return "", errInvalidUTF8
			}
			buf = append(buf, p.text[i:i+size]...)
			i += size
		}
	}
	p.pos = len(p.text)
	return "", p.syntaxError("unexpected end of input in a string")
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
func (p *parser) number() error {
	start := p.pos
	p.consume('-')
	if !p.consume('0') && !p.digits() {
		return p.syntaxError("in a number")
	}
	fraction := p.consume('.')
	if fraction && !p.digits() {
		return p.syntaxError("after the decimal point of a number")
	}
	exponent := p.consume('e') || p.consume('E')
	if exponent {
		if !p.consume('+') {
			p.consume('-')
		}
		if !p.digits() {
			return p.syntaxError("in the exponent of a number")
		}
	}
	literal, integer := p.text[start:p.pos], !fraction && !exponent
	if problem := numberProblem(literal, integer); problem != "" {
		return &FieldError{Problem: problem}
	}
	p.scalar(KindNumber, int32(start), int32(p.pos)).truth = integer
	return nil
}

// digits reads one or more decimal digits.
func (p *parser) digits() bool {
	start := p.pos
	for p.pos < len(p.text) && isDigit(p.text[p.pos]) {
		p.pos++
	}
	return p.pos > start
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (p *parser) literal(word string, kind Kind, truth bool) error {
	if len(p.text)-p.pos < len(word) || p.text[p.pos:p.pos+len(word)] != word {
		return p.syntaxError("in a literal")
	}
	p.pos += len(word)
	p.scalar(kind, 0, 0).truth = truth
	return nil
}

// consume advances past c if it is next.
func (p *parser) consume(c byte) bool {
	if p.pos < len(p.text) && p.text[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *parser) skipSpace() {
	for p.pos < len(p.text) {
		switch p.text[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// syntaxError describes what was found at pos; like encoding/json's, it is
// not a *FieldError, because a body that is not JSON has no fields.
func (p *parser) syntaxError(context string) error {
	if p.pos >= len(p.text) {
		return fmt.Errorf("not JSON: unexpected end of input (%s)", context)
	}
	return fmt.Errorf("not JSON: unexpected %q at byte %d (%s)", p.text[p.pos:p.pos+1], p.pos, context)
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
// an integer one when it has neither fraction nor exponent, or returns ""
// when it would not.
func numberProblem(literal string, integer bool) string {
	if len(literal) > maxNumberLength {
		return problemTooLong
	}
	if integer {
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

// parseExactInteger parses an integer literal within ±(2^53−1).
func parseExactInteger(literal string) (int64, bool) {
	if digits := literal; len(digits) <= maxSafeDigits+1 {
		// Every integer of up to 15 digits is within 2^53−1: add the
		// digits up rather than parse in general, as every webhook's
		// versions and clocks are read.
		negative := digits != "" && digits[0] == '-'
		if negative {
			digits = digits[1:]
		}
		if digits != "" && len(digits) <= maxSafeDigits {
			var n int64
			for i := 0; i < len(digits); i++ {
				c := digits[i]
				if !isDigit(c) {
					return 0, false
				}
				n = n*10 + int64(c-'0')
			}
			if negative {
				n = -n
			}
			return n, true
		}
	}
	n, err := strconv.ParseInt(literal, 10, 64)
	return n, err == nil && -maxExactInteger <= n && n <= maxExactInteger
}

// maxSafeDigits is the most decimal digits every integer within
// ±(2^53−1) can have: 10^15 < 2^53.
const maxSafeDigits = 15

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
