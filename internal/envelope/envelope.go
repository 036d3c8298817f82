// Package envelope is the wire contract between driftguard's components:
// the Kafka headers ingest sets, the fields read from a webhook body through
// the catalogue's pointers, and the records processors emit to the state,
// outcomes and DLQ topics. Ingest, processors and sinks never import each
// other; they agree through this package.
package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
	Key     string
	EventID string
	Type    string
	// Version is the source's logical version; HasVersion is false when the
	// stream has no version pointer.
	Version    int64
	HasVersion bool
	// OccurredAtMs is the source clock in unix ms, 0 when absent.
	OccurredAtMs int64
}

// FieldError is a problem with one field of the body, located by pointer.
type FieldError struct {
	Pointer string
	Problem string
}

func (e *FieldError) Error() string { return e.Pointer + ": " + e.Problem }

// MaxDepth bounds the nesting of a webhook body: no event needs more, and
// deep nesting is a cheap way to make a parser work hard.
const MaxDepth = 64

// Decode parses body as one JSON value with numbers kept exact. It is the
// only JSON decoder of webhook bodies, so validation and extraction see the
// same value. It is strict where parsers disagree: invalid UTF-8 (which
// encoding/json would silently replace), duplicate keys (first or last
// wins, depending on the reader) and nesting deeper than MaxDepth are
// errors; a *FieldError locates the last two.
func Decode(body []byte) (any, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("not JSON: invalid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, err := decodeValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not JSON: data after the top-level value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, pointer string, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= MaxDepth {
		return nil, &FieldError{Pointer: pointer, Problem: fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
	}
	switch delim {
	case '{':
		obj := map[string]any{}
		for dec.More() {
			keyTok, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("not JSON: %w", err)
			}
			key, _ := keyTok.(string)
			child := pointer + "/" + EscapePointer(key)
			if _, dup := obj[key]; dup {
				return nil, &FieldError{Pointer: child, Problem: "duplicate key"}
			}
			if obj[key], err = decodeValue(dec, child, depth+1); err != nil {
				return nil, err
			}
		}
		_, err = dec.Token() // the closing brace
		return obj, err
	default: // '['
		arr := []any{}
		for i := 0; dec.More(); i++ {
			v, err := decodeValue(dec, pointer+"/"+strconv.Itoa(i), depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err = dec.Token()
		return arr, err
	}
}

// EscapePointer escapes one reference token of a JSON pointer (RFC 6901).
func EscapePointer(token string) string {
	return strings.ReplaceAll(strings.ReplaceAll(token, "~", "~0"), "/", "~1")
}

// Extract reads the catalogue fields of a decoded body. fallbackID is used
// when the stream has no event id pointer or the body lacks it (design §2:
// fall back to the webhook-id header).
func Extract(s *config.Stream, doc any, fallbackID string) (Fields, error) {
	var f Fields
	var err error
	if f.Type, err = EventType(s, doc); err != nil {
		return f, err
	}
	if f.Key, err = stringAt(doc, s.KeyPointer(f.Type)); err != nil {
		return f, err
	}
	if s.EventID != "" {
		f.EventID, err = stringAt(doc, s.EventID)
		var fe *FieldError
		if errors.As(err, &fe) && fe.Problem == problemMissing && fallbackID != "" {
			f.EventID, err = fallbackID, nil
		}
		if err != nil {
			return f, err
		}
	} else if f.EventID = fallbackID; f.EventID == "" {
		return f, &FieldError{Pointer: "", Problem: "the stream has no event_id pointer and the request no delivery id"}
	}
	if s.Version != "" {
		if f.Version, err = intAt(doc, s.Version); err != nil {
			return f, err
		}
		if f.Version < 0 {
			return f, &FieldError{Pointer: s.Version, Problem: "a version must not be negative"}
		}
		f.HasVersion = true
	}
	if s.OccurredAt != "" {
		if f.OccurredAtMs, err = occurredAt(s, doc); err != nil {
			return f, err
		}
	}
	return f, nil
}

// EventType returns the event's type: the stream's fixed type, or the field
// its type pointer names.
func EventType(s *config.Stream, doc any) (string, error) {
	if s.Type.Fixed != "" {
		return s.Type.Fixed, nil
	}
	return stringAt(doc, s.Type.Field)
}

const problemMissing = "missing"

// occurredAt reads the source clock in unix ms; an absent clock is 0.
func occurredAt(s *config.Stream, doc any) (int64, error) {
	var fe *FieldError
	if s.OccurredAtUnit == "rfc3339" {
		v, err := Lookup(doc, s.OccurredAt)
		if errors.As(err, &fe) && fe.Problem == problemMissing {
			return 0, nil
		}
		text, ok := v.(string)
		t, perr := time.Parse(time.RFC3339Nano, text)
		if err != nil || !ok || perr != nil {
			return 0, &FieldError{Pointer: s.OccurredAt, Problem: "must be an RFC 3339 time"}
		}
		return t.UnixMilli(), nil
	}
	v, err := intAt(doc, s.OccurredAt)
	switch {
	case errors.As(err, &fe) && fe.Problem == problemMissing:
		return 0, nil
	case err != nil:
		return 0, err
	case s.OccurredAtUnit == "ms":
		return v, nil
	case v > math.MaxInt64/1000 || v < math.MinInt64/1000:
		return 0, &FieldError{Pointer: s.OccurredAt, Problem: "timestamp out of range"}
	}
	return v * 1000, nil
}

func stringAt(doc any, pointer string) (string, error) {
	v, err := Lookup(doc, pointer)
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

func intAt(doc any, pointer string) (int64, error) {
	v, err := Lookup(doc, pointer)
	if err != nil {
		return 0, err
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, &FieldError{Pointer: pointer, Problem: "must be an integer"}
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, &FieldError{Pointer: pointer, Problem: "must be an integer that fits in 64 bits"}
	}
	return i, nil
}

// Lookup resolves an RFC 6901 JSON pointer in a decoded document.
func Lookup(doc any, pointer string) (any, error) {
	if pointer == "" {
		return doc, nil
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, &FieldError{Pointer: pointer, Problem: "not a JSON pointer"}
	}
	cur := doc
	for _, token := range strings.Split(pointer[1:], "/") {
		token = strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")
		switch node := cur.(type) {
		case map[string]any:
			next, ok := node[token]
			if !ok {
				return nil, &FieldError{Pointer: pointer, Problem: problemMissing}
			}
			cur = next
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
