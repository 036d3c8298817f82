package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// workflowEvent is a workflow progress webhook.
type workflowEvent struct {
	EventID     string `json:"event_id"`
	OperationID string `json:"operation_id"`
	Sequence    int64  `json:"sequence"`
	Status      string `json:"status"`
	Progress    int    `json:"progress"`
	OccurredAt  string `json:"occurred_at"`
}

// demoOperations is how many operations the workflow demo keeps under way.
const demoOperations = 2

var demoOperationKinds = []string{"build", "deploy", "backup", "import", "report"}

// workflowDemo is long-running operations reporting their steps 1, 2, 3…:
// each round every operation under way sends its next step, except that
// each operation once sends two steps in reverse order (the later one is
// buffered until the gap before it fills), and one in three sends a step
// again under a new event id, as a producer's retry does. Every operation
// ends completed, failed or cancelled, and a new one starts in its place.
type workflowDemo struct {
	demoSource
	started int
	ops     []*demoOperation
}

// demoOperation is an operation under way.
type demoOperation struct {
	id string
	// statuses are those of its steps 1, 2, 3…; the last is terminal.
	statuses []string
	// sent is how many of its steps have been sent.
	sent int
	// swap is the step sent after the one that follows it.
	swap int
	// retry is the step sent twice, 0 for none.
	retry int
}

func newWorkflowDemo(rng *rand.Rand) *workflowDemo {
	return &workflowDemo{demoSource: newDemoSource(rng)}
}

func (w *workflowDemo) next(now time.Time) []delivery {
	for len(w.ops) < demoOperations {
		w.ops = append(w.ops, w.start())
	}
	var out []delivery
	for _, op := range w.ops {
		out = append(out, op.advance(w.rng, now)...)
	}
	w.ops = slices.DeleteFunc(w.ops, func(op *demoOperation) bool { return op.sent == len(op.statuses) })
	return out
}

// start plans a new operation of 5 to 9 steps: queued, running, progress…
// and a terminal status, mostly completed.
func (w *workflowDemo) start() *demoOperation {
	w.started++
	n := 5 + w.rng.IntN(5)
	st := make([]string, n)
	st[0], st[1] = "queued", "running"
	for i := 2; i < n-1; i++ {
		st[i] = "progress"
	}
	switch r := w.rng.IntN(10); {
	case r < 7:
		st[n-1] = "completed"
	case r < 9:
		st[n-1] = "failed"
	default:
		st[n-1] = "cancelled"
	}
	kind := demoOperationKinds[w.rng.IntN(len(demoOperationKinds))]
	op := &demoOperation{id: fmt.Sprintf("%s-%s-%d", kind, w.run, w.started), statuses: st, swap: 2 + w.rng.IntN(n-2)}
	if w.rng.IntN(3) == 0 {
		op.retry = 1 + w.rng.IntN(n)
	}
	return op
}

// advance sends the operation's next step, or its swapped pair later step
// first; each happened a second after the one before it, the last now.
func (op *demoOperation) advance(rng *rand.Rand, now time.Time) []delivery {
	seqs := []int{op.sent + 1}
	if op.sent+1 == op.swap {
		seqs = []int{op.swap + 1, op.swap}
	}
	op.sent += len(seqs)
	var out []delivery
	for _, seq := range seqs {
		ev := workflowEvent{OperationID: op.id, Sequence: int64(seq), Status: op.statuses[seq-1], Progress: op.progress(seq),
			OccurredAt: now.Add(-time.Duration(op.sent-seq) * time.Second).UTC().Format(time.RFC3339)}
		for attempt := 0; attempt == 0 || attempt == 1 && seq == op.retry; attempt++ {
			ev.EventID = demoID(rng, fmt.Sprintf("%s-s%d", op.id, seq))
			out = append(out, newDelivery(ev.EventID, op.id, ev.Sequence, ev.Status, ev))
		}
	}
	return out
}

// progress is the percentage done at step seq: from 0 when queued up to
// 100 when completed; a failed or cancelled operation stops where it was.
func (op *demoOperation) progress(seq int) int {
	n := len(op.statuses)
	if seq == n && op.statuses[n-1] == "completed" {
		return 100
	}
	return 100 * (min(seq, n-1) - 1) / (n - 1)
}
