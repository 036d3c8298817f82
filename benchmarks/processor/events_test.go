package main

import (
	"testing"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/processors/decide"
)

// The outcome each delivery is checked against is the one driftguard's
// own rules (processors/decide) give it, and the mix holds every outcome
// in realistic shares.
func TestExpectedOutcomesAreTheRules(t *testing.T) {
	cfg, err := presenceConfig(0, "presence")
	if err != nil {
		t.Fatal(err)
	}
	rules := decide.For(cfg.Streams["presence"])
	mix := DefaultMix(30_000)
	mix.Users = 400
	ds, exp := Generate(mix)
	if len(ds) != mix.Events {
		t.Fatalf("%d deliveries, want %d", len(ds), mix.Events)
	}
	entities := map[string]*decide.Entity{}
	final := map[string]model.Presence{}
	now := time.Now().UnixMilli()
	for i, d := range ds {
		doc, err := envelope.Parse(d.Body)
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		ev, err := rules.Read(doc, "")
		doc.Release()
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		ev.Body, ev.ReceivedAtMs, ev.InputOffset = d.Body, now, int64(i)
		e := entities[d.User]
		if e == nil {
			e = &decide.Entity{}
			entities[d.User] = e
		}
		effects := rules.Decide(e, ev)
		if len(effects.Decisions) != 1 {
			t.Fatalf("delivery %d: %d decisions", i, len(effects.Decisions))
		}
		if got := effects.Decisions[0].Outcome; got != d.Expected {
			t.Fatalf("delivery %d (%s v%d): the rules say %s, the model %s", i, d.EventID, d.Version, got, d.Expected)
		}
		if effects.Decisions[0].Applied() {
			final[d.User] = model.Presence{Presence: d.Presence, SequenceNumber: d.Version}
		}
	}
	if len(final) != len(exp.Final) {
		t.Fatalf("%d members with state, the model has %d", len(final), len(exp.Final))
	}
	for user, want := range exp.Final {
		if final[user] != want {
			t.Errorf("%s: the rules leave %+v, the model %+v", user, final[user], want)
		}
	}
	for _, outcome := range []record.Result{record.Applied, record.Duplicate, record.Stale} {
		if share := float64(exp.Outcomes[outcome]) / float64(len(ds)); share < 0.02 {
			t.Errorf("only %.1f%% %s", 100*share, outcome)
		}
	}
	t.Logf("outcomes: %v over %d members", exp.Outcomes, len(exp.Final))
}

// A run's input is the same for every contender: the mix is a function of
// its settings.
func TestGenerateIsReproducible(t *testing.T) {
	a, _ := Generate(DefaultMix(5000))
	b, _ := Generate(DefaultMix(5000))
	for i := range a {
		if a[i].EventID != b[i].EventID || string(a[i].Body) != string(b[i].Body) {
			t.Fatalf("delivery %d differs between two generations", i)
		}
	}
}
