// Package envelope reads webhook bodies as driftguard must: a strict JSON
// parser (Parse) that refuses what readers could disagree on and builds one
// flat document, RFC 6901 pointers into it (Lookup), and the fields the
// stream catalogue points at (Extract: the entity key, event id, type,
// version and clocks). Ingest and the processors read every body through
// it, so both see the same event. The records the components exchange on
// Kafka are package record's.
package envelope

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/driftguard/driftguard/internal/config"
)

// Fields are what the catalogue's pointers read from one event body.
type Fields struct {
	Key     string `json:"key"`
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	// Version is the source's logical version; HasVersion is false when the
	// stream has no version pointer.
	Version    int64 `json:"version"`
	HasVersion bool  `json:"has_version,omitempty"`
	// OccurredAtMs is the source clock in unix ms, 0 when absent.
	OccurredAtMs int64 `json:"occurred_at_ms,omitempty"`
	// ExpiresAtMs is when the source says the claim goes stale, unix ms, 0
	// when absent.
	ExpiresAtMs int64 `json:"expires_at_ms,omitempty"`
}

// FieldError is a problem with one field of the body, located by pointer.
type FieldError struct {
	Pointer string
	Problem string
}

func (e *FieldError) Error() string { return e.Pointer + ": " + e.Problem }

// EscapePointer escapes one reference token of a JSON pointer (RFC 6901).
func EscapePointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

// Extract reads the catalogue fields of the document. fallbackID is used
// when the stream has no event id pointer or the body lacks it (design §2:
// fall back to the webhook-id header).
func (d *Document) Extract(s *config.Stream, fallbackID string) (Fields, error) {
	eventType, err := d.EventType(s)
	if err != nil {
		return Fields{Type: eventType}, err
	}
	return d.ExtractTyped(s, eventType, fallbackID)
}

// ExtractTyped is Extract for a caller that has read the event's type
// already, with EventType.
func (d *Document) ExtractTyped(s *config.Stream, eventType, fallbackID string) (Fields, error) {
	f := Fields{Type: eventType}
	var err error
	if f.Key, err = d.stringAt(s.KeyPointer(f.Type)); err != nil {
		return f, err
	}
	if strings.ContainsRune(f.Key, 0) {
		// The processors keep parts of a key's value under the key, U+0000
		// and a name: a key with it could reach another key's parts.
		return f, &FieldError{Pointer: s.KeyPointer(f.Type), Problem: "must not contain U+0000"}
	}
	if s.EventID != "" {
		f.EventID, err = d.stringAt(s.EventID)
		if IsMissing(err) && fallbackID != "" {
			f.EventID, err = fallbackID, nil
		}
		if err != nil {
			return f, err
		}
	} else if f.EventID = fallbackID; f.EventID == "" {
		return f, &FieldError{Pointer: "", Problem: "the stream has no event_id pointer and the request no delivery id"}
	}
	if s.Version != "" {
		if f.Version, err = d.intAt(s.Version); err != nil {
			return f, err
		}
		if f.Version < 0 {
			return f, &FieldError{Pointer: s.Version, Problem: "a version must not be negative"}
		}
		f.HasVersion = true
	}
	if f.OccurredAtMs, err = d.clockAt(s, s.OccurredAt); err != nil {
		return f, err
	}
	if f.ExpiresAtMs, err = d.clockAt(s, s.ExpiresAt); err != nil {
		return f, err
	}
	return f, nil
}

// EventType returns the event's type: the stream's fixed type, or the field
// its type pointer names.
func (d *Document) EventType(s *config.Stream) (string, error) {
	if s.Type.Fixed != "" {
		return s.Type.Fixed, nil
	}
	return d.stringAt(s.Type.Field)
}

const problemMissing = "missing"

// clockAt reads a source clock (occurred_at, expires_at) in the stream's
// unit and returns unix ms; no pointer or an absent field is 0.
func (d *Document) clockAt(s *config.Stream, pointer string) (int64, error) {
	if pointer == "" {
		return 0, nil
	}
	ms, err := d.Clock(s, pointer)
	if IsMissing(err) {
		return 0, nil
	}
	return ms, err
}

// Clock reads the time at pointer in the stream's occurred_at_unit (the
// unit of all its clocks) and returns unix ms. An absent field is an
// error that IsMissing reports, for a reader that needs the time.
func (d *Document) Clock(s *config.Stream, pointer string) (int64, error) {
	v, err := d.Lookup(pointer)
	switch {
	case err != nil:
		return 0, err
	case s.OccurredAtUnit == "rfc3339":
		return rfc3339Millis(v, pointer)
	}
	n, err := integer(v, pointer)
	if err != nil || s.OccurredAtUnit == "ms" {
		return n, err
	}
	// Cannot overflow: integer keeps n within ±(2^53−1).
	return n * 1000, nil
}

func rfc3339Millis(v Value, pointer string) (int64, error) {
	var text string
	if v.Kind() == KindString {
		text = v.Text()
	}
	t, err := time.Parse(time.RFC3339Nano, text)
	if err != nil {
		return 0, &FieldError{Pointer: pointer, Problem: "must be an RFC 3339 time"}
	}
	return t.UnixMilli(), nil
}

// OptionalString is the string at pointer, "" when the field is absent; a
// field of another type is an error.
func (d *Document) OptionalString(pointer string) (string, error) {
	v, err := d.Lookup(pointer)
	if IsMissing(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if v.Kind() != KindString {
		return "", &FieldError{Pointer: pointer, Problem: "must be a string"}
	}
	return v.Text(), nil
}

// IsMissing reports whether err is Lookup's error for an absent (or null)
// field.
func IsMissing(err error) bool {
	// Lookup returns *FieldError unwrapped; errors.As would allocate on
	// every lookup, found or not.
	fe, ok := err.(*FieldError)
	return ok && fe.Problem == problemMissing
}

func (d *Document) stringAt(pointer string) (string, error) {
	v, err := d.Lookup(pointer)
	if err != nil {
		return "", err
	}
	switch v.Kind() {
	case KindString:
		if v.Text() == "" {
			return "", &FieldError{Pointer: pointer, Problem: "must not be empty"}
		}
		return v.Text(), nil
	case KindNumber:
		// Numeric ids are common in webhooks; use their exact text.
		return v.Text(), nil
	default:
		return "", &FieldError{Pointer: pointer, Problem: "must be a string or a number"}
	}
}

func (d *Document) intAt(pointer string) (int64, error) {
	v, err := d.Lookup(pointer)
	if err != nil {
		return 0, err
	}
	return integer(v, pointer)
}

// integer reads an integer that every reader of the body sees alike: an
// integer literal, which Parse admits only within ±(2^53−1).
func integer(v Value, pointer string) (int64, error) {
	i, ok := v.Int()
	if !ok {
		return 0, &FieldError{Pointer: pointer, Problem: "must be an integer"}
	}
	return i, nil
}

// Lookup resolves an RFC 6901 JSON pointer in the document; a null is
// missing. A member whose object also has a key differing from it only in
// case is ambiguous: readers that match keys case-insensitively, such as
// Go's struct decoding, may read the other one.
func (d *Document) Lookup(pointer string) (Value, error) {
	if pointer == "" {
		return d.Root(), nil
	}
	if !strings.HasPrefix(pointer, "/") {
		return Value{}, &FieldError{Pointer: pointer, Problem: "not a JSON pointer"}
	}
	cur := d.Root()
	for rest, more := pointer[1:], true; more; {
		var token string
		token, rest, more = strings.Cut(rest, "/")
		if strings.IndexByte(token, '~') >= 0 {
			token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
		}
		switch cur.Kind() {
		case KindObject:
			next, ambiguous := cur.member(token)
			if next.doc == nil {
				return Value{}, &FieldError{Pointer: pointer, Problem: problemMissing}
			}
			if ambiguous {
				return Value{}, &FieldError{Pointer: pointer, Problem: "ambiguous: keys differing only in case"}
			}
			cur = next
		case KindArray:
			i, err := strconv.Atoi(token)
			if err != nil || i < 0 || i >= cur.Len() {
				return Value{}, &FieldError{Pointer: pointer, Problem: problemMissing}
			}
			cur = cur.item(i)
		default:
			return Value{}, &FieldError{Pointer: pointer, Problem: problemMissing}
		}
	}
	if cur.Kind() == KindNull {
		return Value{}, &FieldError{Pointer: pointer, Problem: problemMissing}
	}
	return cur, nil
}

// member finds key in an object (the zero Value when absent) and reports
// whether another key equals it under Unicode case folding. Folding can
// change a key's length only outside ASCII (the Kelvin sign is k), so
// ASCII keys of another length are not compared.
func (v Value) member(key string) (found Value, ambiguous bool) {
	keyASCII := isASCII(key)
	tokens := v.doc.tokens
	k := v.i + 1
	for range tokens[v.i].a {
		if t := &tokens[k]; !t.ascii || !keyASCII || t.escaped || int(t.b-t.a) == len(key) {
			switch other := v.doc.str(k); {
			case other == key:
				found = Value{v.doc, k + 1}
			case strings.EqualFold(other, key):
				ambiguous = true
			}
		}
		k = v.doc.next(k + 1)
	}
	return found, ambiguous
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// item is an array's i-th item, which must exist.
func (v Value) item(i int) Value {
	at := v.i + 1
	for range i {
		at = v.doc.next(at)
	}
	return Value{v.doc, at}
}
