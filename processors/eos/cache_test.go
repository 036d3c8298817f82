package eos

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/testenv"
)

// The cache against a model: take returns what the last put of the key
// kept and forgets it, drop forgets, and the bytes kept never pass the
// bound, the oldest put going first.
func TestValueCacheAgainstAModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bound := rapid.IntRange(1, 40).Draw(t, "bound")
		c := newValueCache(bound)
		type entry struct{ value, size int }
		model := map[string]entry{}
		var order []string // keys in put order, oldest first
		forget := func(k string) {
			delete(model, k)
			for i, o := range order {
				if o == k {
					order = append(order[:i], order[i+1:]...)
					break
				}
			}
		}
		key := rapid.SampledFrom([]string{"a", "b", "c", "d", "e"})
		for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
			k := key.Draw(t, "key")
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				size := rapid.IntRange(0, 15).Draw(t, "size")
				c.put(k, i, size)
				forget(k)
				if size <= bound {
					model[k] = entry{i, size}
					order = append(order, k)
				}
				total := 0
				for _, e := range model {
					total += e.size
				}
				for total > bound {
					total -= model[order[0]].size
					forget(order[0])
				}
			case 1:
				v, ok := c.take(k)
				want, wantOK := model[k]
				if ok != wantOK || ok && v != want.value {
					t.Fatalf("take %s: %v %v, want %v %v", k, v, ok, want.value, wantOK)
				}
				forget(k)
			case 2:
				c.drop(k)
				forget(k)
			}
			if c.bytes > bound {
				t.Fatalf("%d bytes kept, bound %d", c.bytes, bound)
			}
		}
	})
}

// tally is a table value a callback changes in place.
type tally struct{ N int }

// tallyCodec encodes a *tally as its count.
type tallyCodec struct{}

func (tallyCodec) Encode(v any) ([]byte, error) { return []byte(strconv.Itoa(v.(*tally).N)), nil }
func (tallyCodec) Decode(b []byte) (any, error) {
	n, err := strconv.Atoi(string(b))
	return &tally{N: n}, err
}

// A callback that changes the value it read and does not set it leaves
// nothing behind, in the cache as in the storage: the next record of the
// key reads the committed value.
func TestCachedValueChangedButNotSetIsForgotten(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	brokers := testenv.Fake(t)
	c := newCounterRun(t, ctx, brokers)
	graph := goka.DefineGroup(goka.Group(c.group),
		goka.Input(goka.Stream(c.group+"-in"), new(codec.String), func(ctx goka.Context, msg any) {
			v, _ := ctx.Value().(*tally)
			if v == nil {
				v = &tally{}
			}
			v.N += 1000 // changed in place whatever the record
			if msg.(string) == "count" {
				v.N -= 999
				ctx.SetValue(v)
			}
			ctx.Emit(goka.Stream(c.group+"-out"), ctx.Key(), strconv.Itoa(v.N))
		}),
		goka.Persist(tallyCodec{}),
		goka.Output(goka.Stream(c.group+"-out"), new(codec.String)),
	)
	p, err := New(graph, Options{Client: []kgo.Opt{kgo.SeedBrokers(brokers...)}, TransactionalID: c.group + "-0",
		CommitEvery: 5 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testenv.WaitFor(t, ctx, "the processor recovered", p.Recovered)
	// Each record in a transaction of its own, so each reads what the
	// one before committed, through the cache.
	records := []string{"count", "peek", "count", "peek", "peek", "count"}
	want := []string{"1", "1001", "2", "1002", "1002", "3"}
	for _, msg := range records {
		if err := c.cl.ProduceSync(ctx, &kgo.Record{Topic: c.group + "-in", Key: []byte("k"), Value: []byte(msg)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		c.want["k"]++
		c.read(c.counted)
	}
	if fmt.Sprint(c.got["k"]) != fmt.Sprint(want) {
		t.Fatalf("outputs %v, want %v: a change that was never set was read back", c.got["k"], want)
	}
}
