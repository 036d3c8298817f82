package main

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/record"
)

// decidedRecords are the outcome and state records a contender that
// decides ds as the rules do writes, each input at its place.
func decidedRecords(ds []Delivery, at []placed) (outcomes, states []*kgo.Record) {
	for i, d := range ds {
		o := record.Outcome{Stream: "s", Key: d.User, EventID: d.EventID, EventType: "presence.changed", Version: d.Version,
			Outcome: d.Expected, InputPartition: at[i].partition, InputOffset: at[i].offset, Payload: d.Body}
		outcomes = append(outcomes, &kgo.Record{Value: record.AppendOutcome(nil, &o)})
		if d.Expected == record.Applied {
			st := record.State{Stream: "s", Key: d.User, Version: d.Version, State: d.Body}
			states = append(states, &kgo.Record{Value: record.AppendState(nil, &st)})
		}
	}
	return outcomes, states
}

func TestCheck(t *testing.T) {
	mix := DefaultMix(3000)
	mix.Users = 50
	ds, exp := Generate(mix)
	at := make([]placed, len(ds))
	for i := range at {
		at[i] = placed{int32(i % 6), int64(i / 6)}
	}
	outcomes, states := decidedRecords(ds, at)
	if c := check(ds, at, exp, outcomes, states); !c.OK() {
		t.Fatalf("a contender that decided as the rules do failed: %s", c.Failure)
	}

	// Each way of failing is caught and named.
	lastApplied := 0
	for i, d := range ds {
		if d.Expected == record.Applied {
			lastApplied = i
		}
	}
	wrongOutcome := append([]*kgo.Record{}, outcomes...)
	o := record.Outcome{Key: ds[0].User, EventID: ds[0].EventID, Outcome: record.Stale, InputPartition: at[0].partition, InputOffset: at[0].offset}
	wrongOutcome[0] = &kgo.Record{Value: record.AppendOutcome(nil, &o)}
	for _, tc := range []struct {
		name             string
		outcomes, states []*kgo.Record
		want             string
	}{
		{"lost", outcomes[1:], states, "1 inputs without an outcome"},
		{"doubled", append(append([]*kgo.Record{}, outcomes...), outcomes[5]), states, "1 inputs decided twice"},
		{"wrong outcome", wrongOutcome, states, "1 outcomes unlike the rules'"},
		{"garbage", append(append([]*kgo.Record{}, outcomes...), &kgo.Record{Value: []byte("{")}), states, "1 undecodable records"},
		{"last state lost", outcomes, stateWithout(states, ds, lastApplied), "members with the wrong final state"},
	} {
		c := check(ds, at, exp, tc.outcomes, tc.states)
		if c.OK() || !strings.Contains(c.Failure, tc.want) {
			t.Errorf("%s: failure %q, want it to say %q", tc.name, c.Failure, tc.want)
		}
	}
}

// stateWithout drops the state record of delivery i, the last applied one.
func stateWithout(states []*kgo.Record, ds []Delivery, i int) []*kgo.Record {
	n := 0
	for j := range i {
		if ds[j].Expected == record.Applied {
			n++
		}
	}
	return append(append([]*kgo.Record{}, states[:n]...), states[n+1:]...)
}
