package checker

import (
	"testing"

	"github.com/driftguard/driftguard/benchmarks/model"
)

func TestCheckState(t *testing.T) {
	sent := []model.Delivery{
		{Stream: "orders", EventID: "p1", Key: "o1", Type: "order.created", Status: 202},
		{Stream: "orders", EventID: "c1", Key: "o1", Type: "order.shipped", Status: 202},
		{Stream: "orders", EventID: "c1", Key: "o1", Type: "order.shipped", Status: 202}, // a redelivery
		{Stream: "orders", EventID: "c2", Key: "o1", Type: "payment.captured", Status: 202},
		{Stream: "orders", EventID: "c3", Key: "orphan", Type: "payment.captured", Status: 202},
		{Stream: "orders", EventID: "c4", Key: "o1", Type: "payment.captured", Status: 503},
	}
	want := model.State{Orders: map[string]model.Order{"o1": {Created: true, Children: []string{"c1", "c2", "c4"}}}}
	for name, tc := range map[string]struct {
		got                       model.State
		lost, doubled, mismatched int
	}{
		"as the model, an orphan reported empty": {got: model.State{Orders: map[string]model.Order{
			"o1": {Created: true, Children: []string{"c1", "c2", "c4"}}, "orphan": {}}}},
		"a child lost": {got: model.State{Orders: map[string]model.Order{"o1": {Created: true, Children: []string{"c1", "c4"}}}},
			lost: 1, mismatched: 1},
		"a child twice": {got: model.State{Orders: map[string]model.Order{"o1": {Created: true, Children: []string{"c1", "c1", "c2", "c4"}}}},
			doubled: 1, mismatched: 1},
		"an orphan applied": {got: model.State{Orders: map[string]model.Order{"o1": {Created: true, Children: []string{"c1", "c2", "c4"}},
			"orphan": {Children: []string{"c3"}}}}, mismatched: 1},
	} {
		t.Run(name, func(t *testing.T) {
			r := CheckState(sent, want, tc.got, []string{"orders"})
			v := r.Verdict
			if v.Lost != tc.lost || v.Doubled != tc.doubled || v.Mismatched != tc.mismatched {
				t.Errorf("verdict %+v, want lost %d doubled %d mismatched %d", v, tc.lost, tc.doubled, tc.mismatched)
			}
			// One webhook never got a 2xx: never a clean run.
			if v.Failed != 1 || v.Passed {
				t.Errorf("verdict %+v: the 503 not counted as failed", v)
			}
		})
	}
}

func TestCheckStatePresence(t *testing.T) {
	sent := []model.Delivery{{Stream: "presence", EventID: "e1", Key: "u1", Status: 202}}
	want := model.State{Presence: map[string]model.Presence{"u1": {Presence: "BUSY", SequenceNumber: 3}}}
	if r := CheckState(sent, want, want, []string{"presence"}); !r.Verdict.Passed {
		t.Errorf("the model's own state failed: %+v", r.Verdict)
	}
	stale := model.State{Presence: map[string]model.Presence{"u1": {Presence: "ONLINE", SequenceNumber: 2}}}
	if r := CheckState(sent, want, stale, []string{"presence"}); r.Verdict.Passed || r.Verdict.Mismatched != 1 {
		t.Errorf("a stale presence passed: %+v", r.Verdict)
	}
}
