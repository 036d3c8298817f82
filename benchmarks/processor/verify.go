package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/internal/record"
)

// Check is what a contender's outcomes and state show against the
// deliveries it was given. Both are read with driftguard's own decoders,
// so a peer that writes another shape fails here too.
type Check struct {
	// Outcomes counts the decisions by outcome, each input once.
	Outcomes map[record.Result]int `json:"outcomes"`
	// Missing inputs got no outcome; Doubled got more than one; Wrong got
	// another outcome than the rules give; Undecodable outcome or state
	// records did not parse.
	Missing     int `json:"missing"`
	Doubled     int `json:"doubled"`
	Wrong       int `json:"wrong"`
	Undecodable int `json:"undecodable"`
	// StateWrong counts members whose last state record is not their
	// highest applied version and its presence, or who have none.
	StateWrong int `json:"state_wrong"`
	// StateRecords is how many state records were written (one per
	// applied event).
	StateRecords int `json:"state_records"`
	// Failure says what failed, empty when the contender passed.
	Failure string `json:"failure,omitempty"`
}

// OK reports whether the contender decided every event once, as the
// rules do, and left the right state.
func (c *Check) OK() bool { return c.Failure == "" }

// check holds outcomes and states to the deliveries ds, placed at at.
func check(ds []Delivery, at []placed, exp Expected, outcomes, states []*kgo.Record) Check {
	c := Check{Outcomes: map[record.Result]int{}}
	index := make(map[placed]int, len(at))
	for i, p := range at {
		index[p] = i
	}
	seen := make([]int, len(ds))
	var o record.Outcome
	for _, r := range outcomes {
		if _, err := record.DecodeOutcome(r.Value, &o); err != nil {
			c.Undecodable++
			continue
		}
		i, ok := index[placed{o.InputPartition, o.InputOffset}]
		if !ok {
			c.Wrong++
			continue
		}
		seen[i]++
		if seen[i] > 1 {
			c.Doubled++
			continue
		}
		c.Outcomes[o.Outcome]++
		if o.Outcome != ds[i].Expected || o.Key != ds[i].User || o.EventID != ds[i].EventID {
			c.Wrong++
		}
	}
	for _, n := range seen {
		if n == 0 {
			c.Missing++
		}
	}
	// A compacted topic read from its start: the last record per key
	// (each key in one partition, read in order) is the state a reader
	// ends with.
	final := map[string]model.Presence{}
	var st record.State
	for _, r := range states {
		body, err := record.DecodeState(r.Value, &st)
		if err != nil {
			c.Undecodable++
			continue
		}
		var fields struct {
			Presence string `json:"presence"`
		}
		if err := json.Unmarshal([]byte(body), &fields); err != nil {
			c.Undecodable++
			continue
		}
		final[strings.Clone(st.Key)] = model.Presence{Presence: fields.Presence, SequenceNumber: st.Version}
	}
	c.StateRecords = len(states)
	c.StateWrong = len(model.Compare("presence", model.State{Presence: exp.Final}, model.State{Presence: final}))
	var problems []string
	for _, p := range []struct {
		n    int
		what string
	}{
		{c.Missing, "inputs without an outcome"}, {c.Doubled, "inputs decided twice"},
		{c.Wrong, "outcomes unlike the rules'"}, {c.Undecodable, "undecodable records"},
		{c.StateWrong, "members with the wrong final state"},
	} {
		if p.n != 0 {
			problems = append(problems, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if applied := exp.Outcomes[record.Applied]; c.StateRecords != applied {
		problems = append(problems, fmt.Sprintf("%d state records for %d applied events", c.StateRecords, applied))
	}
	c.Failure = strings.Join(problems, ", ")
	return c
}
