// Package envelope is the wire contract between driftguard's components:
// the Kafka headers ingest sets, the fields read from a webhook body through
// the catalogue's pointers, and the records processors emit to the state,
// outcomes and DLQ topics. Ingest, processors and sinks never import each
// other; they agree through this package.
package envelope

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/config"
)

// Kafka header names set by ingest on every `<stream>.in` record (design §3).
const (
	HeaderStream     = "dg-stream"
	HeaderEventID    = "dg-event-id"
	HeaderType       = "dg-type"
	HeaderReceivedAt = "dg-received-at" // unix milliseconds, decimal
	HeaderScheme     = "dg-scheme"
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

// Extract reads the catalogue fields of a decoded body. fallbackID is used
// when the stream has no event id pointer or the body lacks it (design §2:
// fall back to the webhook-id header).
func Extract(s *config.Stream, body any, fallbackID string) (Fields, error) {
	return NewDocument(body).Extract(s, fallbackID)
}

// Extract reads the catalogue fields of the document, as the package-level
// Extract does.
func (doc Document) Extract(s *config.Stream, fallbackID string) (Fields, error) {
	var f Fields
	var err error
	if f.Type, err = doc.EventType(s); err != nil {
		return f, err
	}
	if f.Key, err = doc.stringAt(s.KeyPointer(f.Type)); err != nil {
		return f, err
	}
	if s.EventID != "" {
		f.EventID, err = doc.stringAt(s.EventID)
		if isMissing(err) && fallbackID != "" {
			f.EventID, err = fallbackID, nil
		}
		if err != nil {
			return f, err
		}
	} else if f.EventID = fallbackID; f.EventID == "" {
		return f, &FieldError{Pointer: "", Problem: "the stream has no event_id pointer and the request no delivery id"}
	}
	if s.Version != "" {
		if f.Version, err = doc.intAt(s.Version); err != nil {
			return f, err
		}
		if f.Version < 0 {
			return f, &FieldError{Pointer: s.Version, Problem: "a version must not be negative"}
		}
		f.HasVersion = true
	}
	if f.OccurredAtMs, err = doc.clockAt(s, s.OccurredAt); err != nil {
		return f, err
	}
	if f.ExpiresAtMs, err = doc.clockAt(s, s.ExpiresAt); err != nil {
		return f, err
	}
	return f, nil
}

// EventType returns the event's type: the stream's fixed type, or the field
// its type pointer names.
func EventType(s *config.Stream, doc any) (string, error) {
	return NewDocument(doc).EventType(s)
}

// EventType returns the document's event type, as the package-level
// EventType does.
func (d Document) EventType(s *config.Stream) (string, error) {
	if s.Type.Fixed != "" {
		return s.Type.Fixed, nil
	}
	return d.stringAt(s.Type.Field)
}

// Document is a decoded body with its top-level keys listed once: the
// catalogue's fields are nearly all top-level, and each lookup checks the
// keys for case variants, which a walk of the map would make the costliest
// part of extraction. Read one body through one Document.
type Document struct {
	root any
	keys []string
}

// NewDocument lists the top-level keys of a decoded body.
func NewDocument(root any) Document {
	d := Document{root: root}
	if obj, ok := root.(map[string]any); ok {
		d.keys = make([]string, 0, len(obj))
		for k := range obj {
			d.keys = append(d.keys, k)
		}
	}
	return d
}

const problemMissing = "missing"

// clockAt reads a source clock (occurred_at, expires_at) in the stream's
// unit and returns unix ms; no pointer or an absent field is 0.
func (d Document) clockAt(s *config.Stream, pointer string) (int64, error) {
	if pointer == "" {
		return 0, nil
	}
	v, err := d.Lookup(pointer)
	switch {
	case isMissing(err):
		return 0, nil
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

func rfc3339Millis(v any, pointer string) (int64, error) {
	text, _ := v.(string)
	t, err := time.Parse(time.RFC3339Nano, text)
	if err != nil {
		return 0, &FieldError{Pointer: pointer, Problem: "must be an RFC 3339 time"}
	}
	return t.UnixMilli(), nil
}

func isMissing(err error) bool {
	// Lookup returns *FieldError unwrapped; errors.As would allocate on
	// every lookup, found or not.
	fe, ok := err.(*FieldError)
	return ok && fe.Problem == problemMissing
}

func (d Document) stringAt(pointer string) (string, error) {
	v, err := d.Lookup(pointer)
	if err != nil {
		return "", err
	}
	switch v := v.(type) {
	case string:
		if v == "" {
			return "", &FieldError{Pointer: pointer, Problem: "must not be empty"}
		}
		return v, nil
	case json.Number:
		// Numeric ids are common in webhooks; use their exact text.
		return v.String(), nil
	default:
		return "", &FieldError{Pointer: pointer, Problem: "must be a string or a number"}
	}
}

func (d Document) intAt(pointer string) (int64, error) {
	v, err := d.Lookup(pointer)
	if err != nil {
		return 0, err
	}
	return integer(v, pointer)
}

// integer reads an integer that every reader of the body sees alike: an
// integer literal within ±(2^53−1), as Decode already requires of every
// integer; checked again here for documents Decode did not build.
func integer(v any, pointer string) (int64, error) {
	n, ok := v.(json.Number)
	if !ok || !isIntegerLiteral(n.String()) {
		return 0, &FieldError{Pointer: pointer, Problem: "must be an integer"}
	}
	i, ok := parseExactInteger(n.String())
	if !ok {
		return 0, &FieldError{Pointer: pointer, Problem: problemInexactInteger}
	}
	return i, nil
}

// Lookup resolves an RFC 6901 JSON pointer in a decoded document. A member
// whose object also has a key differing from it only in case is ambiguous:
// readers that match keys case-insensitively, such as Go's struct decoding,
// may read the other one.
func Lookup(doc any, pointer string) (any, error) {
	return NewDocument(doc).Lookup(pointer)
}

// Lookup resolves pointer in the document, as the package-level Lookup does.
func (d Document) Lookup(pointer string) (any, error) {
	if pointer == "" {
		return d.root, nil
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, &FieldError{Pointer: pointer, Problem: "not a JSON pointer"}
	}
	cur, keys := d.root, d.keys
	for rest, more := pointer[1:], true; more; {
		var token string
		token, rest, more = strings.Cut(rest, "/")
		if strings.IndexByte(token, '~') >= 0 {
			token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
		}
		switch node := cur.(type) {
		case map[string]any:
			next, ok := node[token]
			if !ok {
				return nil, &FieldError{Pointer: pointer, Problem: problemMissing}
			}
			if hasCaseVariant(node, keys, token) {
				return nil, &FieldError{Pointer: pointer, Problem: "ambiguous: keys differing only in case"}
			}
			cur, keys = next, nil
		case []any:
			i, err := strconv.Atoi(token)
			if err != nil || i < 0 || i >= len(node) {
				return nil, &FieldError{Pointer: pointer, Problem: problemMissing}
			}
			cur = node[i]
		default:
			return nil, &FieldError{Pointer: pointer, Problem: problemMissing}
		}
	}
	if cur == nil {
		return nil, &FieldError{Pointer: pointer, Problem: problemMissing}
	}
	return cur, nil
}

// hasCaseVariant reports whether obj, whose keys are listed in keys when
// known, has a key other than key that equals it under Unicode case folding.
func hasCaseVariant(obj map[string]any, keys []string, key string) bool {
	if keys == nil {
		for other := range obj {
			keys = append(keys, other)
		}
	}
	for _, other := range keys {
		if other != key && strings.EqualFold(other, key) {
			return true
		}
	}
	return false
}
