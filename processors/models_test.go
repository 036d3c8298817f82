package processors

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors/decide/decidetest"
)

// The runtime is held to the same models as the rules (package decide's
// models_test.go): each history's deliveries go through goka's tester as
// records of `<stream>.in` received at their time, each tick through the
// timer visitor, and the model checks the outcome records and the last
// state record. State records of a key must carry growing versions.
func checkModelThroughGoka(t *testing.T, s *config.Stream, draw func(*rapid.T, *config.Stream, string) decidetest.History) {
	tt, proc, names := startTester(t, s, Options{})
	outQ, stateQ := tt.NewQueueTracker(names.Outcomes), tt.NewQueueTracker(names.State)
	iteration := 0
	rapid.Check(t, func(rt *rapid.T) {
		// One tester serves every history: each gets a key of its own.
		key := fmt.Sprintf("k%d", iteration)
		iteration++
		h := draw(rt, s, key)
		var outs []decidetest.Outcome
		var last decidetest.State
		revision := int64(-1)
		for _, st := range h.Steps {
			if st.Body == nil {
				if err := proc.VisitAll(t.Context(), tickVisitor, st.AtMs); err != nil {
					rt.Fatal(err)
				}
			} else {
				tt.Consume(names.In, key, st.Body, tester.WithHeaders(goka.Headers{
					record.HeaderReceivedAt: []byte(strconv.FormatInt(st.AtMs, 10))}))
			}
			for _, o := range outcomes(rt, outQ) {
				if o.Key != key {
					rt.Fatalf("outcome of key %s in the history of %s", o.Key, key)
				}
				outs = append(outs, decidetest.Outcome{EventID: o.EventID, Outcome: o.Outcome, Reason: o.Reason,
					Version: o.Version, BufferDepth: o.BufferDepth, MessageID: o.MessageID})
			}
			for _, state := range records[record.State](rt, stateQ) {
				if state.Version <= revision {
					rt.Fatalf("state record at version %d after %d", state.Version, revision)
				}
				revision = state.Version
				last = decidetest.State{JSON: state.State, ExpiresAtMs: state.ExpiresAtMs}
			}
		}
		h.Check(rt, outs, last)
	})
}

func TestPresenceModelThroughGoka(t *testing.T) {
	checkModelThroughGoka(t, testenv.Shipped(t, "presence"), decidetest.Presence)
}

func TestWorkflowModelThroughGoka(t *testing.T) {
	checkModelThroughGoka(t, testenv.Shipped(t, "workflow"), decidetest.Workflow)
}

func TestChatModelThroughGoka(t *testing.T) {
	checkModelThroughGoka(t, testenv.Shipped(t, "chat"), decidetest.Assign)
}

func TestOrdersModelThroughGoka(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	s.Parent.TTL, s.Parent.Buffer = 20*time.Second, 4
	checkModelThroughGoka(t, s, decidetest.Orders)
}
