package realtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/problem"
)

// eventBody is the JSON object a client sent, from which the bridge
// builds its event with the fields it sets from the token and the path,
// each at the stream's JSON pointer for it.
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

// setByBridge are the fields the bridge sets, by pointer, with their
// values; empty pointers (a field the stream does not have) are skipped.
type setByBridge []struct {
	pointer string
	value   any
}

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

// build is the event: the client's fields, and those of set at their
// pointers (envelope.Build, as every event the bridge writes). A pointer
// of set inside a value of the client's is an error.
func (b eventBody) build(set setByBridge) ([]byte, error) {
	fields := make(map[string]any, len(b)+len(set))
	for name, v := range b {
		fields["/"+envelope.EscapePointer(name)] = v
	}
	for _, f := range set {
		if f.pointer != "" {
			fields[f.pointer] = f.value
		}
	}
	return envelope.Build(fields)
}
