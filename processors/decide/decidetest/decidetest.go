// Package decidetest holds the models the ordering rules are held to: for
// each policy of the shipped streams, random histories of one key's events
// as publishers deliver them (reordered, redelivered, retried under new
// ids, with the clock moving for timers), and a check of what must come of
// each. The rule tests in package decide run the histories through the
// rules directly; the runtime tests in package processors run the same
// histories through goka's tester; both hold the result to the same model.
package decidetest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// A Step is what happens next to the key: a delivery of Body received at
// AtMs, or, when Body is nil, the clock reaching AtMs (timers fire).
type Step struct {
	Body []byte
	AtMs int64
}

// Outcome is what a check reads of one decision.
type Outcome struct {
	EventID     string
	Outcome     record.Result
	Reason      record.Reason
	Version     int64
	BufferDepth int
	MessageID   string
}

// State is the key's last public state: its JSON (nil when no change was
// ever applied) and when it expires.
type State struct {
	JSON        json.RawMessage
	ExpiresAtMs int64
}

// History is one key's steps, and the model's check of the decisions they
// gave, in the order made, and of the key's last state.
type History struct {
	Key   string
	Steps []Step
	Check func(t *rapid.T, outs []Outcome, last State)
}

// body builds a JSON object from fields keyed by single-token JSON
// pointers ("/user_id").
func body(fields map[string]any) []byte {
	obj := make(map[string]any, len(fields))
	for pointer, v := range fields {
		name, ok := strings.CutPrefix(pointer, "/")
		if !ok || strings.Contains(name, "/") {
			panic(fmt.Sprintf("decidetest builds bodies from top-level pointers only, got %q", pointer))
		}
		obj[name] = v
	}
	data, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return data
}

// deliveries draws how the events reach the processor: each one to three
// times, some retried under a new id (retry(i) is event i's retry body),
// all in any order.
func deliveries(t *rapid.T, events [][]byte, retry func(i int) []byte) [][]byte {
	var out [][]byte
	for i, ev := range events {
		for range rapid.IntRange(1, 3).Draw(t, "copies") {
			out = append(out, ev)
		}
		if rapid.Bool().Draw(t, "retried under a new id") {
			out = append(out, retry(i))
		}
	}
	return rapid.Permutation(out).Draw(t, "order")
}

func steps(bodies [][]byte, atMs func(i int) int64) []Step {
	out := make([]Step, len(bodies))
	for i, b := range bodies {
		out[i] = Step{Body: b, AtMs: atMs(i)}
	}
	return out
}

// every reports a failure for each delivered event id that got no outcome.
func everyDecided(t *rapid.T, delivered []string, outs []Outcome) {
	got := map[string]bool{}
	for _, o := range outs {
		got[o.EventID] = true
	}
	for _, id := range delivered {
		if !got[id] {
			t.Fatalf("event %s was delivered and never decided", id)
		}
	}
}

// idOf reads the event id of a body the generators built.
func idOf(t *rapid.T, s *config.Stream, b []byte) string {
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	id, _ := obj[strings.TrimPrefix(s.EventID, "/")].(string)
	return id
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
