// Package eos runs goka group graphs exactly once, on Kafka transactions.
//
// A graph is declared with goka's own DSL (goka.DefineGroup with
// goka.Input, goka.Persist, goka.Output, goka.Loop and goka.Visitor), and
// its callbacks take a goka.Context, as under goka's processor. goka's
// processor commits the input offsets apart from the writes they caused,
// so a crash between the two repeats or loses effects: at least once. This
// runtime consumes, calls the callbacks and commits everything one input or
// one visit causes (emits, loopbacks, table writes) with the input offsets
// in one Kafka transaction; read_committed readers never see the effects
// of an input that was not committed, and an input is decided again only
// when nothing of its first decision survived.
//
// It runs the edges whose reads and writes a transaction covers: inputs,
// the group table, outputs, the loopback and visitors. A graph with a Join
// or a Lookup is refused at start with an error naming the edge: a table
// read beside the group's own could not be fenced with it. The package
// names no rule of the processors it runs.
package eos
