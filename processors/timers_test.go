package processors

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The punctuator fires a due timer through goka's visitor even though no
// further event for the key arrives.
func TestTimersFireWithoutFurtherEvents(t *testing.T) {
	s := testenv.Shipped(t, "workflow")
	tt, proc, names := startTester(t, s, Options{})
	outQ, replayQ := tt.NewQueueTracker(names.Outcomes), tt.NewQueueTracker(names.Replay)
	headers := goka.Headers{record.HeaderReceivedAt: []byte("1700000000000")}
	for _, seq := range []int{1, 3} {
		tt.Consume(names.In, "op-9", fmt.Appendf(nil, `{"event_id":"e%d","operation_id":"op-9","sequence":%d,"status":"running","occurred_at":"2026-11-30T10:00:00Z"}`, seq, seq), tester.WithHeaders(headers))
	}
	outcomes(t, outQ) // applied, buffered
	for replayQ.NextOffset() < replayQ.Hwm() {
		replayQ.NextRaw()
	}
	// Before the deadline nothing fires; after it, the gap is reported.
	deadline := int64(1_700_000_000_000) + s.Limits.GapTimeout.Milliseconds()
	for _, now := range []int64{deadline - 1, deadline} {
		if err := proc.VisitAll(t.Context(), tickVisitor, now); err != nil {
			t.Fatal(err)
		}
	}
	got := outcomes(t, outQ)
	if len(got) != 1 || got[0].Outcome != record.Expired || got[0].Reason != record.ReasonGapTimeout || got[0].Version != 2 || got[0].Key != "op-9" {
		t.Fatalf("outcomes after the deadline: %+v", got)
	}
	var replays []string
	for {
		_, raw, ok := replayQ.NextRaw()
		if !ok {
			break
		}
		replays = append(replays, string(raw))
	}
	if len(replays) != 1 || !slices.ContainsFunc(replays, func(r string) bool { return strings.Contains(r, `"first_missing":2`) }) {
		t.Fatalf("replay requests %v, want one for sequence 2", replays)
	}
}

// A group that falls behind keeps the end offsets sampled in the last hour,
// however short the tick: the window is a duration, not a count of ticks.
func TestWatermarkKeepsAnHourOfSamples(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	var w watermark
	for _, tick := range []time.Duration{10 * time.Millisecond, time.Second, time.Minute} {
		w.samples = nil
		for at := time.Duration(0); at <= 2*time.Hour; at += tick {
			w.samples = append(w.samples, endSample{at: start.Add(at)})
			w.forgetBefore(start.Add(at - sampleWindow))
		}
		if first := w.samples[0].at; first != start.Add(time.Hour) {
			t.Errorf("tick %s: oldest sample kept at %s, want an hour before the last", tick, first.Sub(start))
		}
	}
}
