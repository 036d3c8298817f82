package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// Re-deciding a stream from its input after a rule change
// (docs/operations.md, "Re-decide a stream"), on the real broker:
// generation 1 decides a disordered, duplicated presence history;
// generation 2, started beside it under kafka.generations with OFFLINE
// made a terminal state in its copy of the configuration, decides the same
// `<stream>.in` from its start into its own table, state and outcomes
// topics, while generation 1 keeps running and both decide what arrives
// meanwhile. Generation 2's decisions are generation 1's as the new rule
// changes them (redecidedUnderTerminal), and nothing else differs: every
// decision but its processed_at_ms (the decision's clock), and every
// state change but those of the events the rule now rejects. Then the
// switch: a bridge given the new configuration serves generation 2's
// states, and answers a cursor of generation 1's bridge 410.
func TestNewGenerationRedecidesTheInputIntoNewTopics(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	brokers := testenv.Kafka(t)
	s := testenv.Shipped(t, "presence")
	s.Name = testenv.UniqueName("presence")
	s.Limits.Partitions = 2
	// Terminal states and device rows exclude each other, and the history
	// is about members only: both generations keep no device rows.
	s.Devices = config.Devices{}
	changed := *s
	changed.Terminal = config.Terminal{Field: "/presence", Values: []string{"OFFLINE"}}
	gen1 := testenv.OnlyStream(t, s)
	gen2 := testenv.OnlyStream(t, &changed)
	gen2.Kafka.Generations = map[string]int{s.Name: 2}
	for _, cfg := range []*config.Config{gen1, gen2} {
		cfg.Kafka.Brokers = brokers
		cfg.Bridge.Secret = redecideBridgeSecret
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	n1, n2 := gen1.Kafka.Naming().For(s.Name), gen2.Kafka.Naming().For(s.Name)
	if n1.In != n2.In || n1.Outcomes == n2.Outcomes || n1.Table == n2.Table || n1.State == n2.State {
		t.Fatalf("generation 2 names %+v, generation 1 %+v: want the same input and other outputs", n2, n1)
	}
	cl := testenv.Topics(t, ctx, gen1, brokers)
	defer cl.Close()
	log := testenv.Logger(t)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 25))
	produce := func(records []*kgo.Record) int {
		if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return len(records)
	}
	send := func(users int) int {
		var records []*kgo.Record
		for u := range users {
			user := fmt.Sprintf("user-%d-%d", u, rng.IntN(1000))
			for _, d := range disorder(rng, presenceHistory(rng, user, rng.Int64N(100), 1+rng.IntN(5)), 0.3) {
				records = append(records, inputRecord(s.Name, d.Key, d.Body))
			}
		}
		return produce(records)
	}
	// A member who goes OFFLINE and comes back, in order, so that the new
	// rule changes at least one decision whatever the random histories.
	returns := fmt.Sprintf("returns-%d", rng.IntN(1000))
	var comeback []*kgo.Record
	for i, status := range []string{"OFFLINE", "ONLINE"} {
		p := testenv.Presence{EventID: fmt.Sprintf("%s-v%d", returns, i+1), User: returns, Status: status, Version: int64(i + 1)}
		comeback = append(comeback, inputRecord(s.Name, returns, p.Body()))
	}
	runServices(t, ctx, "generation 1", processors.NewService(processors.ServiceOptions{Config: gen1, Logger: log, InMemoryTables: true}))
	sent := produce(comeback) + send(20)
	first := readOutputs(t, ctx, brokers, n1.Outcomes, n1.State, sent)

	// Generation 2 beside generation 1 (its own group and transactional
	// ids: neither fences the other), then more input for both.
	testenv.Topics(t, ctx, gen2, brokers).Close()
	runServices(t, ctx, "generation 2", processors.NewService(processors.ServiceOptions{Config: gen2, Logger: log, InMemoryTables: true}))
	sent += send(10)
	old := readOutputs(t, ctx, brokers, n1.Outcomes, n1.State, sent)
	redecided := readOutputs(t, ctx, brokers, n2.Outcomes, n2.State, sent)
	if len(old.outcomes) <= len(first.outcomes) {
		t.Errorf("generation 1 stopped deciding once generation 2 started: %d decisions, %d before", len(old.outcomes), len(first.outcomes))
	}
	want := redecidedUnderTerminal(t, old, "OFFLINE")
	if !slices.Contains(want.outcomes, returnRejected(t, old, returns)) {
		t.Fatalf("the new rule rejects nothing of %s: %q", returns, want.outcomes)
	}
	if !slices.Equal(want.outcomes, redecided.outcomes) {
		t.Errorf("generation 2 decided otherwise than the new rule says:\nwant %q\ngot  %q", want.outcomes, redecided.outcomes)
	}
	if !slices.Equal(want.states, redecided.states) {
		t.Errorf("generation 2's states differ from what the new rule says:\nwant %q\ngot  %q", want.states, redecided.states)
	}
	// Each generation's own table holds the entities.
	for _, table := range []string{n1.Table, n2.Table} {
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, table)
		if err != nil || ends.Error() != nil {
			t.Fatalf("end offsets of %s: %v %v", table, err, ends.Error())
		}
		var written int64
		ends.Each(func(o kadm.ListedOffset) { written += o.Offset })
		if written == 0 {
			t.Errorf("table topic %s is empty", table)
		}
	}

	// The switch: a bridge of each configuration, each serving its own
	// generation's states; a client of the old one that moves to the new
	// one with its cursor is answered 410, and its new snapshot is
	// generation 2's.
	tok, err := realtime.Sign([]byte(redecideBridgeSecret), "watcher", []string{s.Name}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	oldBridge, newBridge := startRedecideBridge(t, ctx, gen1, tok), startRedecideBridge(t, ctx, gen2, tok)
	cursor := waitForSnapshot(t, ctx, oldBridge)
	waitForSnapshot(t, ctx, newBridge)
	if want := lastApplied(t, old); !maps.Equal(oldBridge.held, want) {
		t.Errorf("generation 1's bridge holds %v, want %v", oldBridge.held, want)
	}
	if want := lastApplied(t, redecided); !maps.Equal(newBridge.held, want) {
		t.Errorf("generation 2's bridge holds %v, want %v", newBridge.held, want)
	}
	if newBridge.held[returns] != 1 || oldBridge.held[returns] != 2 {
		t.Errorf("%s at version %d on generation 2's bridge, %d on generation 1's: want 1 (OFFLINE is final) and 2", returns, newBridge.held[returns], oldBridge.held[returns])
	}
	moved := &bridgeClient{base: newBridge.base, tok: tok, stream: s.Name, held: map[string]int64{}, cursor: cursor}
	if err := moved.connect(ctx); err == nil || err.Error() != "410" {
		t.Errorf("generation 1's cursor on generation 2's bridge: %v, want 410", err)
	}
}

const redecideBridgeSecret = "redecide-test-bridge-secret-0123456789"

// startRedecideBridge runs a bridge of cfg until the test ends and
// returns a client of it without a snapshot yet.
func startRedecideBridge(t *testing.T, ctx context.Context, cfg *config.Config, tok string) *bridgeClient {
	t.Helper()
	ln := listen(t)
	bridge, err := realtime.New(realtime.Options{Config: cfg, Logger: testenv.Logger(t), Listener: ln, OpsListener: listen(t)})
	if err != nil {
		t.Fatal(err)
	}
	runServices(t, ctx, "bridge", bridge)
	name := cfg.StreamNames()[0]
	return &bridgeClient{base: "http://" + ln.Addr().String(), tok: tok, stream: name, held: map[string]int64{}}
}

// waitForSnapshot takes c's snapshot once its bridge has read the stream
// to its end, and returns the snapshot's cursor.
func waitForSnapshot(t *testing.T, ctx context.Context, c *bridgeClient) string {
	t.Helper()
	var cursor string
	testenv.WaitFor(t, ctx, "a snapshot of "+c.base, func() bool {
		var err error
		cursor, err = c.snapshot(ctx)
		return err == nil
	})
	return cursor
}

// redecidedUnderTerminal is what a generation with terminal states
// decides of the input that decided (a generation without them): each
// key's decisions, in input order, stay as they were up to the first
// applied event whose presence is terminal; every later one but a
// duplicate (the id memory does not depend on the decision) is then
// rejected with reason terminal, at its version and with no gap, and the
// state changes of those decided applied are gone.
func redecidedUnderTerminal(t *testing.T, decided outputs, terminal string) outputs {
	t.Helper()
	byKey := map[string][]record.Outcome{}
	for _, text := range decided.outcomes {
		var o record.Outcome
		if err := json.Unmarshal([]byte(text), &o); err != nil {
			t.Fatal(err)
		}
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	type change struct {
		key     string
		version int64
	}
	gone := map[change]bool{}
	var want outputs
	for _, decisions := range byKey {
		slices.SortFunc(decisions, func(a, b record.Outcome) int { return cmp.Compare(a.InputOffset, b.InputOffset) })
		ended := false
		for _, o := range decisions {
			switch {
			case o.Outcome == record.Duplicate:
			case ended:
				if o.Outcome == record.Applied {
					gone[change{o.Key, o.Version}] = true
				}
				o.Outcome, o.Reason, o.Gap = record.Rejected, record.ReasonTerminal, 0
			case o.Outcome == record.Applied:
				var body struct{ Presence string }
				if err := json.Unmarshal(o.Payload, &body); err != nil {
					t.Fatal(err)
				}
				ended = body.Presence == terminal
			}
			text, _ := json.Marshal(o)
			want.outcomes = append(want.outcomes, string(text))
		}
	}
	for _, text := range decided.states {
		var st record.State
		if err := json.Unmarshal([]byte(text), &st); err != nil {
			t.Fatal(err)
		}
		if !gone[change{st.Key, st.Version}] {
			want.states = append(want.states, text)
		}
	}
	slices.Sort(want.outcomes)
	return want
}

// returnRejected is, as outputs hold it, the terminal rejection of key's
// version 2 in place of its decision in decided.
func returnRejected(t *testing.T, decided outputs, key string) string {
	t.Helper()
	for _, text := range decided.outcomes {
		var o record.Outcome
		if err := json.Unmarshal([]byte(text), &o); err != nil {
			t.Fatal(err)
		}
		if o.Key == key && o.Version == 2 && o.Outcome == record.Applied {
			o.Outcome, o.Reason, o.Gap = record.Rejected, record.ReasonTerminal, 0
			text, _ := json.Marshal(o)
			return string(text)
		}
	}
	t.Fatalf("%s's version 2 was not applied: %q", key, decided.outcomes)
	return ""
}

// lastApplied is each key's version after the decisions of decided, as
// a bridgeClient holds it: a key from version 1 on (it keeps a version only
// above the one it holds, 0 for a key it has not seen).
func lastApplied(t *testing.T, decided outputs) map[string]int64 {
	t.Helper()
	last := map[string]int64{}
	for _, text := range decided.states {
		var st record.State
		if err := json.Unmarshal([]byte(text), &st); err != nil {
			t.Fatal(err)
		}
		if st.Version > last[st.Key] {
			last[st.Key] = st.Version
		}
	}
	return last
}

// outputs are a generation's decisions and state changes, each as
// comparable text, sorted.
type outputs struct {
	outcomes, states []string
}

// readOutputs reads, read_committed, the outcomes topic until it holds
// decisions of every one of inputs, and the state topic until it holds a
// change per applied decision (the presence stream: one decision per
// input, one state per applied decision).
func readOutputs(t *testing.T, ctx context.Context, brokers []string, outcomesTopic, stateTopic string, inputs int) outputs {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(outcomesTopic, stateTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out outputs
	applied := 0
	for len(out.outcomes) < inputs || len(out.states) < applied {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s and %s: %d decisions of %d inputs, %d states of %d applied", outcomesTopic, stateTopic, len(out.outcomes), inputs, len(out.states), applied)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			switch r.Topic {
			case outcomesTopic:
				var o record.Outcome
				if err := json.Unmarshal(r.Value, &o); err != nil {
					t.Fatal(err)
				}
				if o.Outcome == record.Applied {
					applied++
				}
				o.ProcessedAtMs = 0 // the decision's clock
				text, _ := json.Marshal(o)
				out.outcomes = append(out.outcomes, string(text))
			case stateTopic:
				if !record.IsViewMark(r.Key, r.Value) {
					out.states = append(out.states, string(r.Value))
				}
			}
		})
	}
	slices.Sort(out.outcomes)
	slices.Sort(out.states)
	return out
}
