package eos

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
)

// The plan reads every edge of a graph declared with goka's DSL: the
// inputs' callbacks, the group table, the outputs, the loopback and the
// visitors, as declared.
func TestPlanReadsTheGraph(t *testing.T) {
	var called []string
	cb := func(name string) goka.ProcessCallback {
		return func(goka.Context, any) { called = append(called, name) }
	}
	g := goka.DefineGroup("g",
		goka.Input("in-a", new(codec.String), cb("a")),
		goka.Inputs(goka.Streams{"in-b", "in-c"}, new(codec.Bytes), cb("bc")),
		goka.Persist(new(codec.Int64)),
		goka.Output("out", new(codec.String)),
		goka.Loop(new(codec.String), cb("loop")),
		goka.Visitor("tick", cb("tick")),
	)
	p, err := planFor(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"in-a", "in-b", "in-c"} {
		p.inputs[topic].cb(nil, nil)
	}
	p.loop.cb(nil, nil)
	p.visitors["tick"](nil, nil)
	if want := []string{"a", "bc", "bc", "loop", "tick"}; !slices.Equal(called, want) {
		t.Fatalf("callbacks called %v, want %v", called, want)
	}
	if p.group != "g" || p.table.name != "g-table" || p.loop.name != "g-loop" || len(p.outputs) != 1 || p.outputs["out"] == nil {
		t.Fatalf("plan %+v", p)
	}
	if _, ok := p.table.codec.(*codec.Int64); !ok {
		t.Fatalf("table codec %T", p.table.codec)
	}
}

// A graph with an edge the runtime does not run is refused, naming it.
func TestPlanRefusesJoinAndLookup(t *testing.T) {
	for _, edge := range []goka.Edge{goka.Join("profiles", new(codec.String)), goka.Lookup("countries", new(codec.String))} {
		g := goka.DefineGroup("g", goka.Input("in", new(codec.String), func(goka.Context, any) {}), edge)
		_, err := planFor(g)
		if !errors.Is(err, ErrUnsupportedEdge) || !strings.Contains(err.Error(), edge.Topic()) {
			t.Errorf("%s: %v", edge, err)
		}
	}
}

// Emit headers given as goka's context options are read.
func TestEmitHeaders(t *testing.T) {
	h, err := emitHeaders([]goka.ContextOption{goka.WithCtxEmitHeaders(goka.Headers{"a": []byte("1")}), goka.WithCtxEmitHeaders(goka.Headers{"b": []byte("2")})})
	if err != nil || string(h["a"]) != "1" || string(h["b"]) != "2" {
		t.Fatalf("%v %v", h, err)
	}
}
