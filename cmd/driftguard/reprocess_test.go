package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors"
)

// Re-deciding a stream from its input (docs/operations.md, "Re-decide a
// stream"), on the real broker: generation 1 decides a disordered,
// duplicated presence history; generation 2, started beside it under
// kafka.generations, decides the same `<stream>.in` from its start into
// its own table, state and outcomes topics, while generation 1 keeps
// running and both decide what arrives meanwhile. With the same rules,
// generation 2's outputs equal generation 1's: every decision (all but
// processed_at_ms, the decision's clock) and every state change.
func TestNewGenerationRedecidesTheInputIntoNewTopics(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	brokers := testenv.Kafka(t)
	s := testenv.Shipped(t, "presence")
	s.Name = testenv.UniqueName("presence")
	s.Limits.Partitions = 2
	gen1 := testenv.OnlyStream(t, s)
	gen1.Kafka.Brokers = brokers
	gen2 := testenv.OnlyStream(t, s)
	gen2.Kafka.Brokers = brokers
	gen2.Kafka.Generations = map[string]int{s.Name: 2}
	if err := gen2.Validate(); err != nil {
		t.Fatal(err)
	}
	n1, n2 := gen1.Kafka.Naming().For(s.Name), gen2.Kafka.Naming().For(s.Name)
	if n1.In != n2.In || n1.Outcomes == n2.Outcomes || n1.Table == n2.Table {
		t.Fatalf("generation 2 names %+v, generation 1 %+v: want the same input and other outputs", n2, n1)
	}
	cl := testenv.Topics(t, ctx, gen1, brokers)
	defer cl.Close()
	log := testenv.Logger(t)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 25))
	send := func(users int) int {
		var records []*kgo.Record
		for u := range users {
			user := fmt.Sprintf("user-%d-%d", u, rng.IntN(1000))
			for _, d := range disorder(rng, presenceHistory(rng, user, rng.Int64N(100), 1+rng.IntN(5)), 0.3) {
				records = append(records, inputRecord(s.Name, d.Key, d.Body))
			}
		}
		if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return len(records)
	}
	runServices(t, ctx, "generation 1", processors.NewService(processors.ServiceOptions{Config: gen1, Logger: log, InMemoryTables: true}))
	sent := send(20)
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
	if !slices.Equal(old.outcomes, redecided.outcomes) {
		t.Errorf("generation 2 decided otherwise:\ngeneration 1 %q\ngeneration 2 %q", old.outcomes, redecided.outcomes)
	}
	if !slices.Equal(old.states, redecided.states) {
		t.Errorf("generation 2's states differ:\ngeneration 1 %q\ngeneration 2 %q", old.states, redecided.states)
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
