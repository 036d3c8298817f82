package decidetest

import (
	"fmt"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Workflow draws a history of the shipped workflow stream s (gapless, with
// terminal states) for operation key: steps 1..n, one of them perhaps
// terminal, redelivered and retried under new ids in any order, within
// the stream's buffer. The model: every step up to the terminal one (or
// the last) applies exactly once, none after it ever does, nothing stays
// buffered, and the operation ends in the body of its last applied step.
func Workflow(t *rapid.T, s *config.Stream, key string) History {
	n := rapid.IntRange(1, min(30, s.Limits.Buffer-1)).Draw(t, "steps")
	terminalAt := rapid.IntRange(1, n+5).Draw(t, "terminal at") // > n: never
	last := min(n, terminalAt)
	seqOf := map[string]int{}
	var originals, retries [][]byte
	for seq := 1; seq <= n; seq++ {
		status := rapid.SampledFrom([]string{"running", "progress"}).Draw(t, "status")
		if seq == terminalAt {
			status = rapid.SampledFrom(s.Terminal.Values).Draw(t, "terminal status")
		}
		step := func(id string) []byte {
			seqOf[id] = seq
			return body(map[string]any{"/event_id": id, "/operation_id": key, "/sequence": seq, "/status": status,
				"/occurred_at": "2026-01-01T00:00:00Z"})
		}
		id := fmt.Sprintf("%s-s%d", key, seq)
		originals = append(originals, step(id))
		retries = append(retries, step(id+"-retry"))
	}
	delivered := deliveries(t, originals, func(i int) []byte { return retries[i] })
	bodies := map[string][]byte{}
	var ids []string
	for _, b := range delivered {
		id := idOf(t, s, b)
		ids = append(ids, id)
		bodies[id] = b
	}
	h := History{Key: key, Steps: steps(delivered, func(i int) int64 { return 1_700_000_000_000 + int64(i) })}
	h.Check = func(t *rapid.T, outs []Outcome, state State) {
		everyDecided(t, ids, outs)
		applied := map[int]int{}
		var lastID string
		waiting := map[string]bool{} // buffered, not yet applied or rejected
		for _, o := range outs {
			switch o.Outcome {
			case record.Buffered:
				waiting[o.EventID] = true
			case record.Applied:
				delete(waiting, o.EventID)
				applied[seqOf[o.EventID]]++
				if seqOf[o.EventID] == last {
					lastID = o.EventID
				}
			case record.Rejected:
				delete(waiting, o.EventID)
			}
		}
		for seq := 1; seq <= n; seq++ {
			if want := map[bool]int{true: 1, false: 0}[seq <= last]; applied[seq] != want {
				t.Fatalf("step %d applied %d times, want %d (last applicable step %d)", seq, applied[seq], want, last)
			}
		}
		if len(waiting) > 0 {
			t.Fatalf("%d steps left buffered after every step arrived: %v", len(waiting), sortedKeys(waiting))
		}
		if !testenv.SameJSON(state.JSON, bodies[lastID]) {
			t.Fatalf("final state %s, want step %d's body %s", state.JSON, last, bodies[lastID])
		}
	}
	return h
}
