package realtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/driftguard/driftguard/internal/problem"
)

// eventBody is the JSON object of an event the bridge writes for a
// client, built from the client's fields and those the bridge sets from
// the token and the path, each at the stream's JSON pointer for it.
// Numbers are kept as written (json.Number), so a large integer of the
// client's passes through exactly.
type eventBody map[string]any

// errNotObject is a client body that is not one JSON object.
var errNotObject = errors.New("the body must be one JSON object")

// parseObject reads a client's body, one JSON object.
func parseObject(raw []byte) (eventBody, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, errNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject
	}
	return obj, nil
}

// tokens splits a JSON pointer (RFC 6901) into its unescaped reference
// tokens; "" is the whole document, no token.
func tokens(pointer string) []string {
	if pointer == "" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts
}

// lookup is the value at pointer, if the body holds one.
func (b eventBody) lookup(pointer string) (any, bool) {
	var at any = map[string]any(b)
	for _, t := range tokens(pointer) {
		obj, ok := at.(map[string]any)
		if !ok {
			return nil, false
		}
		if at, ok = obj[t]; !ok {
			return nil, false
		}
	}
	return at, true
}

// has reports whether the body holds a value at pointer, the whole
// document aside.
func (b eventBody) has(pointer string) bool {
	_, ok := b.lookup(pointer)
	return ok && pointer != ""
}

// text is the string at pointer, "" when there is none.
func (b eventBody) text(pointer string) string {
	v, _ := b.lookup(pointer)
	s, _ := v.(string)
	return s
}

// set puts v at pointer, making the objects on the way; a value on the
// way that is not an object is replaced by one.
func (b eventBody) set(pointer string, v any) {
	ts := tokens(pointer)
	if len(ts) == 0 {
		return
	}
	obj := map[string]any(b)
	for _, t := range ts[:len(ts)-1] {
		next, ok := obj[t].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[t] = next
		}
		obj = next
	}
	obj[ts[len(ts)-1]] = v
}

// setByBridge are the fields the bridge sets, by pointer, with their
// values; empty pointers (a field the stream does not have) are skipped.
type setByBridge []struct{ pointer, value string }

// refuseClientValues lists the fields of set the client's body holds
// already: those are the bridge's to write (who sends, from which device,
// to which conversation, under which event id), never the client's.
func (b eventBody) refuseClientValues(set setByBridge) []problem.Field {
	var out []problem.Field
	for _, f := range set {
		if f.pointer != "" && b.has(f.pointer) {
			out = append(out, problem.Field{Pointer: f.pointer, Detail: "set by the bridge from the token and the path; leave it out"})
		}
	}
	return out
}

// fill sets the fields of set.
func (b eventBody) fill(set setByBridge) {
	for _, f := range set {
		if f.pointer != "" {
			b.set(f.pointer, f.value)
		}
	}
}
