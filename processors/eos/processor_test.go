package eos

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/testenv"
)

// counter is a graph that counts each key's records in its table and
// emits every new count, and on a visit emits the count it holds.
func counter(group string) *goka.GroupGraph {
	return goka.DefineGroup(goka.Group(group),
		goka.Input(goka.Stream(group+"-in"), new(codec.String), func(ctx goka.Context, _ any) {
			n, _ := ctx.Value().(int64)
			ctx.SetValue(n + 1)
			ctx.Emit(goka.Stream(group+"-out"), ctx.Key(), strconv.FormatInt(n+1, 10))
		}),
		goka.Persist(new(codec.Int64)),
		goka.Output(goka.Stream(group+"-out"), new(codec.String)),
		goka.Visitor("report", func(ctx goka.Context, meta any) {
			n, _ := ctx.Value().(int64)
			ctx.Emit(goka.Stream(group+"-out"), ctx.Key(), fmt.Sprintf("%s %d", meta, n))
		}),
	)
}

// The counter graph, run by the processor, restarted half way: every
// record counted once, each count emitted once and in order, the table
// read back across the restart, and a visit reaching every key.
func TestCounterGraphExactlyOnce(t *testing.T) {
	testenv.OnBothBrokers(t, func(t *testing.T, brokers []string) {
		ctx := testenv.Context(t, 2*time.Minute)
		group := testenv.UniqueName("eos")
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeTopics(group+"-out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		for _, topic := range []string{group + "-in", group + "-out", group + "-table"} {
			if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
		}
		run := func() (*Processor, func()) {
			p, err := New(counter(group), Options{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}, TransactionalID: group + "-0",
				CommitEvery: 20 * time.Millisecond, Logger: testenv.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- p.Run(runCtx) }()
			testenv.WaitFor(t, ctx, "the processor recovered", p.Recovered)
			return p, func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
			}
		}
		want := map[string]int64{}
		produce := func(n int) {
			for i := range n {
				key := fmt.Sprintf("k%d", i%7)
				want[key]++
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: group + "-in", Key: []byte(key), Value: []byte("x")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		got := map[string][]string{}
		read := func(until func() bool) {
			testenv.WaitFor(t, ctx, "the outputs", func() bool {
				pollCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				cl.PollFetches(pollCtx).EachRecord(func(r *kgo.Record) { got[string(r.Key)] = append(got[string(r.Key)], string(r.Value)) })
				return until()
			})
		}
		counted := func() bool {
			for k, n := range want {
				if int64(len(got[k])) < n {
					return false
				}
			}
			return true
		}
		_, stop := run()
		produce(30)
		read(counted)
		stop()
		p, stop := run()
		defer stop()
		produce(40)
		read(counted)
		for k, n := range want {
			var seq []string
			for i := range n {
				seq = append(seq, strconv.FormatInt(i+1, 10))
			}
			if fmt.Sprint(got[k]) != fmt.Sprint(seq) {
				t.Fatalf("%s: outputs %v, want %v", k, got[k], seq)
			}
		}
		if err := p.VisitAll(ctx, "report", "visited"); err != nil {
			t.Fatal(err)
		}
		read(func() bool {
			for k, n := range want {
				if int64(len(got[k])) < n+1 {
					return false
				}
			}
			return true
		})
		for k, n := range want {
			if last := got[k][len(got[k])-1]; last != fmt.Sprintf("visited %d", n) {
				t.Fatalf("%s: the visit emitted %q, want %d", k, last, n)
			}
		}
	})
}
