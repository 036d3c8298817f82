package decidetest

import (
	"fmt"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// Orders draws a history of the shipped orders stream s (latest with a
// parent join) for order key, within s's parent TTL and buffer: children
// of the order, parents, redelivered children and the clock moving, in any
// interleaving, then the clock past every TTL. The model: every child ends
// exactly once, applied, reconciled or expired (or is rejected when the
// quarantine is full), none is lost, and the quarantine never exceeds its
// bound.
func Orders(t *rapid.T, s *config.Stream, key string) History {
	now := int64(1_700_000_000_000)
	var all []Step
	children := map[string][]byte{} // by event id, as first sent
	var childIDs []string
	for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
		switch rapid.IntRange(0, 9).Draw(t, "action") {
		case 0:
			all = append(all, Step{AtMs: now, Body: body(map[string]any{"/event_id": fmt.Sprintf("%s-parent-%d", key, i),
				"/event_type": rapid.SampledFrom(s.Parent.Types).Draw(t, "parent type"), "/order_id": key, "/payload": map[string]any{}})})
		case 1, 2:
			now += rapid.Int64Range(0, 20_000).Draw(t, "advance ms")
			all = append(all, Step{AtMs: now})
		case 3:
			if len(childIDs) > 0 {
				id := rapid.SampledFrom(childIDs).Draw(t, "redelivered child")
				all = append(all, Step{AtMs: now, Body: children[id]})
			}
		default:
			id := fmt.Sprintf("%s-child-%d", key, i)
			children[id] = body(map[string]any{"/event_id": id, "/event_type": rapid.SampledFrom(s.Parent.Children).Draw(t, "child type"),
				"/parent_id": key, "/payload": map[string]any{}})
			childIDs = append(childIDs, id)
			all = append(all, Step{AtMs: now, Body: children[id]})
		}
	}
	// The clock passes every TTL: whatever still waits expires.
	all = append(all, Step{AtMs: now + s.Parent.TTL.Milliseconds()})
	h := History{Key: key, Steps: all}
	h.Check = func(t *rapid.T, outs []Outcome, _ State) {
		final := map[string]string{}
		for _, o := range outs {
			if children[o.EventID] == nil {
				continue
			}
			switch o.Outcome {
			case record.Applied, record.Reconciled, record.Expired:
				if prev, done := final[o.EventID]; done {
					t.Fatalf("%s ended twice: %s then %s", o.EventID, prev, o.Outcome)
				}
				final[o.EventID] = string(o.Outcome)
			case record.Rejected:
				final[o.EventID] = string(o.Outcome) + "/" + string(o.Reason)
			case record.Quarantined:
				if o.BufferDepth > s.Parent.Buffer {
					t.Fatalf("%d children quarantined, bound %d", o.BufferDepth, s.Parent.Buffer)
				}
			}
		}
		for _, id := range childIDs {
			if _, ok := final[id]; !ok {
				t.Fatalf("child %s was lost: no final outcome", id)
			}
		}
	}
	return h
}
