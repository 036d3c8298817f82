package processors

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/lovoo/goka"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/processors/decide/decidetest"
)

// The runtime is held to the same models as the rules (package decide's
// models_test.go): each history's deliveries go through the shipped
// runtime as records of `<stream>.in` received at their time, each tick
// through the timer visitor, and the model checks the outcome records and
// the last state record.

// modelRun is a stream's runtime, which every history of a check shares:
// each history gets a key of its own.
type modelRun struct {
	run            *shipped
	names          naming.Topics
	outQ, stateQ   *tracker
	historiesSoFar int
}

func startModelRun(t *testing.T, s *config.Stream) *modelRun {
	run, names := startRun(t, s, Options{})
	return &modelRun{run: run, names: names, outQ: run.NewQueueTracker(names.Outcomes), stateQ: run.NewQueueTracker(names.State)}
}

// nextKey is a key no history of the run has used.
func (g *modelRun) nextKey() string {
	g.historiesSoFar++
	return fmt.Sprintf("k%d", g.historiesSoFar)
}

// decide feeds one key's steps through the processor and returns its
// outcomes and last state. A key's state records must carry growing
// versions.
func (g *modelRun) decide(t *rapid.T, key string, steps []decidetest.Step) ([]decidetest.Outcome, decidetest.State) {
	for _, st := range steps {
		if st.Body == nil {
			if err := g.run.VisitAll(t.Context(), tickVisitor, st.AtMs); err != nil {
				t.Fatal(err)
			}
		} else {
			g.run.Consume(g.names.In, key, st.Body, withHeaders(goka.Headers{record.HeaderReceivedAt: []byte(strconv.FormatInt(st.AtMs, 10))}))
		}
	}
	var outs []decidetest.Outcome
	for _, o := range outcomes(t, g.outQ) {
		if o.Key != key {
			t.Fatalf("outcome of key %s in the history of %s", o.Key, key)
		}
		outs = append(outs, decidetest.Outcome{EventID: o.EventID, Outcome: o.Outcome, Reason: o.Reason,
			Version: o.Version, BufferDepth: o.BufferDepth, MessageID: o.MessageID})
	}
	var last decidetest.State
	revision := int64(-1)
	for _, state := range records[record.State](t, g.stateQ) {
		if state.Version <= revision {
			t.Fatalf("state record at version %d after %d", state.Version, revision)
		}
		revision = state.Version
		last = decidetest.State{JSON: state.State, ExpiresAtMs: state.ExpiresAtMs}
	}
	return outs, last
}

// Every model's histories through the shipped runtime: fewer than the
// rules' own (package decide runs a hundred of each), each history's
// deliveries decided through Kafka.
func TestModelsThroughTheRuntime(t *testing.T) {
	testenv.FewerChecks(t, 15)
	for _, m := range decidetest.Models {
		t.Run(m.Stream, func(t *testing.T) {
			s := m.StreamOf(t)
			g := startModelRun(t, s)
			rapid.Check(t, func(rt *rapid.T) {
				h := m.Draw(rt, s, g.nextKey())
				outs, last := g.decide(rt, h.Key, h.Steps)
				h.Check(rt, outs, last)
			})
		})
	}
}

// An assign stream that exists only in a config file, in names other than
// chat's (comments on support tickets, agents as members): its histories
// hold to the model, and the same history in chat's names gets the same
// outcomes from the shipped chat stream, message ids in each stream's own
// format.
func TestAssignStreamOfAConfigFileDecidesAsChat(t *testing.T) {
	testenv.FewerChecks(t, 15)
	cfg, err := config.Load(testenv.CustomStreams(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	tickets, chat := cfg.Streams["tickets"], cfg.Streams["chat"]
	ticketsRun, chatRun := startModelRun(t, tickets), startModelRun(t, chat)
	rapid.Check(t, func(rt *rapid.T) {
		key := ticketsRun.nextKey()
		chatRun.nextKey()
		h := decidetest.Assign(rt, tickets, key)
		got, last := ticketsRun.decide(rt, key, h.Steps)
		h.Check(rt, got, last)
		asChat := make([]decidetest.Step, len(h.Steps))
		for i, st := range h.Steps {
			asChat[i] = decidetest.Step{Body: translateAssign(rt, st.Body, tickets, chat), AtMs: st.AtMs}
		}
		want, _ := chatRun.decide(rt, key, asChat)
		if len(got) != len(want) {
			rt.Fatalf("%d outcomes for tickets, %d for chat", len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.EventID != w.EventID || g.Outcome != w.Outcome || g.Reason != w.Reason || g.Version != w.Version ||
				(g.MessageID == "") != (w.MessageID == "") {
				rt.Fatalf("outcome %d: tickets %+v, chat %+v", i, g, w)
			}
			if g.MessageID != "" && (g.MessageID != tickets.Assign.MessageIDOf(key, g.Version) || w.MessageID != chat.Assign.MessageIDOf(key, w.Version)) {
				rt.Fatalf("outcome %d: message ids %q and %q", i, g.MessageID, w.MessageID)
			}
		}
	})
}

// translateAssign renames an assign event of stream from into the names
// of stream to: its type (the type of the same part, at the same place),
// and each field it reads.
func translateAssign(t *rapid.T, body []byte, from, to *config.Stream) []byte {
	var fields map[string]any
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	name := func(pointer string) string { return strings.TrimPrefix(pointer, "/") }
	typ, _ := fields[name(from.Type.Field)].(string)
	out := map[string]any{}
	renames := map[string]string{from.EventID: to.EventID, from.Key: to.Key}
	fa, ta := &from.Assign, &to.Assign
	for _, part := range []struct {
		from, to []string
		pointers [][2]string
	}{
		{fa.Send.Types, ta.Send.Types, [][2]string{{fa.Send.Sender, ta.Send.Sender}, {fa.Send.Device, ta.Send.Device}, {fa.Send.ClientMessageID, ta.Send.ClientMessageID}}},
		{fa.Members.Added, ta.Members.Added, [][2]string{{fa.Members.User, ta.Members.User}}},
		{fa.Members.Removed, ta.Members.Removed, [][2]string{{fa.Members.User, ta.Members.User}}},
		{fa.Receipts.Read, ta.Receipts.Read, [][2]string{{fa.Receipts.User, ta.Receipts.User}, {fa.Receipts.Sequence, ta.Receipts.Sequence}}},
		{fa.Receipts.Delivered, ta.Receipts.Delivered, [][2]string{{fa.Receipts.User, ta.Receipts.User}, {fa.Receipts.Sequence, ta.Receipts.Sequence}}},
	} {
		for i, ft := range part.from {
			if ft == typ {
				out[name(to.Type.Field)] = part.to[i]
				for _, p := range part.pointers {
					renames[p[0]] = p[1]
				}
			}
		}
	}
	for pointer, target := range renames {
		if v, ok := fields[name(pointer)]; ok {
			out[name(target)] = v
		}
	}
	data, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
