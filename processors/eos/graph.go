package eos

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unsafe"

	"github.com/lovoo/goka"
)

// plan is what the runtime reads of a goka group graph: its group, the
// input streams it consumes with their codecs and callbacks, the group
// table's topic and codec, the outputs it may emit to, its loopback and
// its visitors.
type plan struct {
	group   string
	inputs  map[string]input
	table   *topic
	outputs map[string]goka.Codec
	loop    *input
	// visitors are the graph's visitor callbacks by name.
	visitors map[string]goka.ProcessCallback
}

// topic is an edge's topic and codec.
type topic struct {
	name  string
	codec goka.Codec
}

// input is a consumed topic: its codec and the callback of its records.
type input struct {
	topic
	cb goka.ProcessCallback
}

// ErrUnsupportedEdge is wrapped by the error planFor returns for a graph
// with an edge the runtime does not run.
var ErrUnsupportedEdge = errors.New("the runtime does not run this edge")

// planFor reads graph g, after goka's own validation. A graph with an edge
// the runtime does not run (a Join or a Lookup: a table read beside the
// group's own, whose reads a transaction could not fence) is refused with
// an error naming the edge, before anything runs.
func planFor(g *goka.GroupGraph) (*plan, error) {
	if g == nil {
		return nil, errors.New("no group graph")
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("group graph %s: %w", g.Group(), err)
	}
	var refused []string
	for _, e := range append(g.JointTables(), g.LookupTables()...) {
		refused = append(refused, e.String())
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("group graph %s: %w: %s (tables other than the group's own are not read in the transaction; keep what a callback needs in the group table)",
			g.Group(), ErrUnsupportedEdge, strings.Join(refused, ", "))
	}
	callbacks, err := callbacksOf(g)
	if err != nil {
		return nil, err
	}
	p := &plan{group: string(g.Group()), inputs: map[string]input{}, outputs: map[string]goka.Codec{}, visitors: map[string]goka.ProcessCallback{}}
	for _, e := range g.InputStreams() {
		cb := callbacks[e.Topic()]
		if cb == nil {
			return nil, fmt.Errorf("group graph %s: no callback for input %s", p.group, e.Topic())
		}
		p.inputs[e.Topic()] = input{topic{e.Topic(), e.Codec()}, cb}
	}
	if e := g.GroupTable(); e != nil {
		p.table = &topic{e.Topic(), e.Codec()}
	}
	for _, e := range g.OutputStreams() {
		p.outputs[e.Topic()] = e.Codec()
	}
	if e := g.LoopStream(); e != nil {
		p.loop = &input{topic{e.Topic(), e.Codec()}, callbacks[e.Topic()]}
	}
	for _, e := range g.AllEdges() {
		if reflect.TypeOf(e) == visitorType {
			cb, err := visitorCallback(e)
			if err != nil {
				return nil, fmt.Errorf("group graph %s: %w", p.group, err)
			}
			p.visitors[e.Topic()] = cb
		}
	}
	return p, nil
}

// visitorType is the type of goka's visitor edges.
var visitorType = reflect.TypeOf(goka.Visitor("", nil))

// goka keeps a graph's callbacks, and a visitor's, in fields it does not
// export: the graph is goka's own DSL, and reading them is the one way to
// run it as declared. The reads are checked (a goka whose fields differ
// is refused at start with this error), and pinned by the tests.
var errGokaLayout = errors.New("this goka version keeps a graph's callbacks where the runtime cannot read them")

// callbacksOf reads the graph's callbacks by topic (inputs and loop).
func callbacksOf(g *goka.GroupGraph) (map[string]goka.ProcessCallback, error) {
	f := reflect.ValueOf(g).Elem().FieldByName("callbacks")
	if !f.IsValid() || f.Type() != reflect.TypeFor[map[string]goka.ProcessCallback]() {
		return nil, errGokaLayout
	}
	return readUnexported[map[string]goka.ProcessCallback](f), nil
}

// visitorCallback reads the callback of a visitor edge.
func visitorCallback(e goka.Edge) (goka.ProcessCallback, error) {
	v := reflect.ValueOf(e)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, errGokaLayout
	}
	f := v.Elem().FieldByName("cb")
	if !f.IsValid() || f.Type() != reflect.TypeFor[goka.ProcessCallback]() {
		return nil, errGokaLayout
	}
	return readUnexported[goka.ProcessCallback](f), nil
}

// readUnexported reads field f, addressable, whatever its export.
func readUnexported[T any](f reflect.Value) T {
	return *(*T)(unsafe.Pointer(f.UnsafeAddr()))
}

// emitHeaders are the headers goka.WithCtxEmitHeaders options carry, read
// by applying them to goka's own (unexported) option set.
func emitHeaders(opts []goka.ContextOption) (goka.Headers, error) {
	if len(opts) == 0 {
		return nil, nil
	}
	set := reflect.New(reflect.TypeOf(opts[0]).In(0).Elem())
	for _, o := range opts {
		reflect.ValueOf(o).Call([]reflect.Value{set})
	}
	f := set.Elem().FieldByName("emitHeaders")
	if !f.IsValid() || f.Type() != reflect.TypeFor[goka.Headers]() {
		return nil, errGokaLayout
	}
	return readUnexported[goka.Headers](f), nil
}
