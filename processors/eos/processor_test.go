package eos

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
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

// counterRun runs counter graphs of one group on brokers and reads what
// they emit.
type counterRun struct {
	t       *testing.T
	ctx     context.Context
	brokers []string
	group   string
	cl      *kgo.Client
	// want is how many records of each key were produced, got what was
	// emitted for each, in order.
	want map[string]int64
	got  map[string][]string
}

func newCounterRun(t *testing.T, ctx context.Context, brokers []string) *counterRun {
	group := testenv.UniqueName("eos")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(group+"-out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	for _, topic := range []string{group + "-in", group + "-out", group + "-table"} {
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	return &counterRun{t: t, ctx: ctx, brokers: brokers, group: group, cl: cl, want: map[string]int64{}, got: map[string][]string{}}
}

// start runs a processor of the graph with the table storage of build (nil:
// in memory) until the returned stop.
func (c *counterRun) start(build storage.Builder) (*Processor, func()) {
	p, err := New(counter(c.group), Options{Client: []kgo.Opt{kgo.SeedBrokers(c.brokers...)}, TransactionalID: c.group + "-0",
		CommitEvery: 20 * time.Millisecond, Logger: testenv.Logger(c.t), Storage: build})
	if err != nil {
		c.t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(c.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	testenv.WaitFor(c.t, c.ctx, "the processor recovered", p.Recovered)
	return p, func() {
		cancel()
		if err := <-done; err != nil {
			c.t.Errorf("run: %v", err)
		}
	}
}

// produce writes n records over seven keys.
func (c *counterRun) produce(n int) {
	for i := range n {
		key := fmt.Sprintf("k%d", i%7)
		c.want[key]++
		if err := c.cl.ProduceSync(c.ctx, &kgo.Record{Topic: c.group + "-in", Key: []byte(key), Value: []byte("x")}).FirstErr(); err != nil {
			c.t.Fatal(err)
		}
	}
}

// read reads what the processor emits until until holds.
func (c *counterRun) read(until func() bool) {
	testenv.WaitFor(c.t, c.ctx, "the outputs", func() bool {
		pollCtx, cancel := context.WithTimeout(c.ctx, 200*time.Millisecond)
		defer cancel()
		c.cl.PollFetches(pollCtx).EachRecord(func(r *kgo.Record) { c.got[string(r.Key)] = append(c.got[string(r.Key)], string(r.Value)) })
		return until()
	})
}

// counted reports whether every record produced has its count emitted.
func (c *counterRun) counted() bool {
	for k, n := range c.want {
		if int64(len(c.got[k])) < n {
			return false
		}
	}
	return true
}

// countedOnce fails unless each key's counts were emitted once each, in
// order, from 1.
func (c *counterRun) countedOnce() {
	for k, n := range c.want {
		var seq []string
		for i := range n {
			seq = append(seq, strconv.FormatInt(i+1, 10))
		}
		if fmt.Sprint(c.got[k]) != fmt.Sprint(seq) {
			c.t.Fatalf("%s: outputs %v, want %v", k, c.got[k], seq)
		}
	}
}

// The counter graph, run by the processor, restarted half way: every
// record counted once, each count emitted once and in order, the table
// read back across the restart, and a visit reaching every key.
func TestCounterGraphExactlyOnce(t *testing.T) {
	testenv.OnBothBrokers(t, func(t *testing.T, brokers []string) {
		ctx := testenv.Context(t, 2*time.Minute)
		c := newCounterRun(t, ctx, brokers)
		_, stop := c.start(nil)
		c.produce(30)
		c.read(c.counted)
		stop()
		p, stop := c.start(nil)
		defer stop()
		c.produce(40)
		c.read(c.counted)
		c.countedOnce()
		if err := p.VisitAll(ctx, "report", "visited"); err != nil {
			t.Fatal(err)
		}
		c.read(func() bool {
			for k, n := range c.want {
				if int64(len(c.got[k])) < n+1 {
					return false
				}
			}
			return true
		})
		for k, n := range c.want {
			if last := c.got[k][len(c.got[k])-1]; last != fmt.Sprintf("visited %d", n) {
				t.Fatalf("%s: the visit emitted %q, want %d", k, last, n)
			}
		}
	})
}

// A storage kept across restarts that stands past its changelog's end
// (the table topic was deleted and created anew) holds what that
// changelog never had: it is emptied, and the counts start again from 1.
func TestStorageAheadOfItsChangelogIsEmptied(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	brokers := testenv.Fake(t)
	kept := map[int32]storage.Storage{}
	build := func(_ string, id int32) (storage.Storage, error) {
		if kept[id] == nil {
			kept[id] = storage.NewMemory()
		}
		return kept[id], nil
	}
	first := newCounterRun(t, ctx, brokers)
	_, stop := first.start(build)
	first.produce(30)
	first.read(first.counted)
	stop()
	// The same storages under a group whose table is new and empty.
	second := newCounterRun(t, ctx, brokers)
	_, stop = second.start(build)
	defer stop()
	second.produce(20)
	second.read(second.counted)
	second.countedOnce()
}
