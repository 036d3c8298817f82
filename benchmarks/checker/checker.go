// Package checker is the verdict every contender of the benchmarks gets:
// which acknowledged webhooks are missing downstream (lost), which were
// decided or written more than once (doubled), and which entities end in
// another state than the model's. driftguard is checked at every hop,
// `<stream>.in`, `<stream>.outcomes` and ClickHouse; a peer, from the
// state it reports, so that the same model judges both.
package checker

import (
	"fmt"
	"maps"
	"slices"

	"github.com/driftguard/driftguard/benchmarks/model"
)

// Report is the verdict on one run, per stream and in all.
type Report struct {
	Streams map[string]*StreamReport `json:"streams"`
	Verdict model.Verdict            `json:"verdict"`
	// Timings are driftguard's decisions and rows, for the runner's
	// latency figures; not written to JSON.
	Timings []Timing `json:"-"`
}

// StreamReport is one stream's verdict and counts.
type StreamReport struct {
	Accepted int `json:"accepted"`
	Failed   int `json:"failed"`
	// InLog, Decisions and Rows count records in `<stream>.in`, in
	// `<stream>.outcomes` and rows in ClickHouse's events (driftguard).
	InLog     int            `json:"in_log,omitempty"`
	Decisions int            `json:"decisions,omitempty"`
	Rows      int            `json:"rows,omitempty"`
	Outcomes  map[string]int `json:"outcomes,omitempty"`
	Entities  int            `json:"entities"`
	Lost      int            `json:"lost"`
	Doubled   int            `json:"doubled"`
	// Mismatched counts entities whose state differs from the model's.
	Mismatched int      `json:"mismatched"`
	Notes      []string `json:"notes,omitempty"`
}

// Timing is one decision of an accepted webhook: when ingest accepted it,
// when a processor decided it, when that decision's transaction committed,
// and where the decision's outcome record is, which the runner matches
// with when its row reached ClickHouse.
type Timing struct {
	Stream       string
	EventID      string
	ReceivedAtMs int64
	// DecidedAtMs is the outcome's processed_at: when the processor
	// decided, inside a transaction no reader sees yet.
	DecidedAtMs int64
	// CommittedAtMs is when the transaction that wrote the outcome
	// committed, from its commit marker: when read_committed readers (the
	// sink, the bridge, any consumer) can see the decision; 0 if no
	// marker followed it.
	CommittedAtMs int64
	// First is true for the first decision of its input record (a
	// buffered or quarantined event is decided again when it applies).
	First         bool
	OutcomePart   int32
	OutcomeOffset int64
	HasRow        bool
}

// maxNotes bounds the findings spelled out per kind and stream.
const maxNotes = 5

func (r *StreamReport) note(format string, args ...any) {
	if len(r.Notes) < 4*maxNotes {
		r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	}
}

// newReport counts the deliveries of streams.
func newReport(sent []model.Delivery, streams []string) *Report {
	r := &Report{Streams: map[string]*StreamReport{}}
	for _, s := range streams {
		r.Streams[s] = &StreamReport{Outcomes: map[string]int{}}
	}
	for _, d := range sent {
		sr := r.Streams[d.Stream]
		if sr == nil {
			continue
		}
		if d.Accepted() {
			sr.Accepted++
		} else {
			sr.Failed++
		}
	}
	return r
}

// compare adds the state verdict of every stream.
func (r *Report) compare(want, got model.State) {
	for name, sr := range r.Streams {
		mm := model.Compare(name, want, got)
		sr.Mismatched = len(mm)
		for i, m := range mm {
			if i == maxNotes {
				sr.note("... and %d more entities in another state", len(mm)-maxNotes)
				break
			}
			sr.note("state: %s", m)
		}
		sr.Entities = entities(name, got)
	}
}

func entities(stream string, st model.State) int {
	switch stream {
	case "presence":
		return len(st.Presence)
	case "orders":
		return len(st.Orders)
	case "workflow":
		return len(st.Workflow)
	case "chat":
		return len(st.Chat)
	}
	return 0
}

// finish sums the streams into the verdict.
func (r *Report) finish() *Report {
	v := model.Verdict{}
	for _, name := range slices.Sorted(maps.Keys(r.Streams)) {
		sr := r.Streams[name]
		v.Lost += sr.Lost
		v.Doubled += sr.Doubled
		v.Mismatched += sr.Mismatched
		v.Failed += sr.Failed
		for _, n := range sr.Notes {
			if len(v.Notes) < 3*maxNotes {
				v.Notes = append(v.Notes, name+": "+n)
			}
		}
	}
	v.Passed = v.Lost == 0 && v.Doubled == 0 && v.Mismatched == 0 && v.Failed == 0
	r.Verdict = v
	return r
}

// CheckState judges a contender from the state it reports: the state
// against the model, and for orders, each acknowledged child of an
// order that exists applied once (a child missing is lost, one listed
// twice doubled).
func CheckState(sent []model.Delivery, want, got model.State, streams []string) *Report {
	r := newReport(sent, streams)
	r.compare(want, got)
	if sr := r.Streams["orders"]; sr != nil {
		checkChildren(sr, sent, want, got)
	}
	return r.finish()
}

func checkChildren(sr *StreamReport, sent []model.Delivery, want, got model.State) {
	for key, o := range got.Orders {
		seen := map[string]bool{}
		for _, c := range o.Children {
			if seen[c] {
				sr.Doubled++
				sr.note("doubled: child %s of order %s applied twice", c, key)
			}
			seen[c] = true
		}
	}
	counted := map[string]bool{}
	for _, d := range sent {
		if d.Stream != "orders" || !d.Accepted() || d.Type == "order.created" || counted[d.EventID] {
			continue
		}
		counted[d.EventID] = true
		w, ok := want.Orders[d.Key]
		if !ok || !slices.Contains(w.Children, d.EventID) {
			continue // an orphan: never applied
		}
		if !slices.Contains(got.Orders[d.Key].Children, d.EventID) {
			sr.Lost++
			sr.note("lost: child %s of order %s acknowledged, not applied", d.EventID, d.Key)
		}
	}
}
