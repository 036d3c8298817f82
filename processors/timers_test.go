package processors

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The punctuator fires a due timer through the graph's visitor even though no
// further event for the key arrives.
func TestTimersFireWithoutFurtherEvents(t *testing.T) {
	s := testenv.Shipped(t, "workflow")
	tt, names := startRun(t, s, Options{})
	proc := tt
	outQ, replayQ := tt.NewQueueTracker(names.Outcomes), tt.NewQueueTracker(names.Replay)
	headers := goka.Headers{record.HeaderReceivedAt: []byte("1700000000000")}
	for _, seq := range []int{1, 3} {
		tt.Consume(names.In, "op-9", fmt.Appendf(nil, `{"event_id":"e%d","operation_id":"op-9","sequence":%d,"status":"running","occurred_at":"2026-11-30T10:00:00Z"}`, seq, seq), withHeaders(headers))
	}
	outcomes(t, outQ)   // applied, buffered
	rawRecords(replayQ) // the first gap's request
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

// A timer visit counts the keys waiting on a gap and the events they hold
// ahead of it, and how long the oldest gap has been open, for the gauges.
func TestTimerVisitCountsGapsAndBufferedEvents(t *testing.T) {
	s := testenv.Shipped(t, "workflow")
	metrics := NewMetrics(prometheus.NewRegistry())
	// The clock stays before every gap deadline, so nothing expires: op-1's
	// gap opened 90 s before it, op-2's 30 s before.
	at := time.UnixMilli(1_700_000_090_000)
	tt, names := startRun(t, s, Options{Metrics: metrics, Now: func() time.Time { return at }})
	proc := tt
	for _, ev := range []struct {
		op         string
		seq        int
		receivedAt string
	}{{"op-1", 1, "1700000000000"}, {"op-1", 3, "1700000000000"}, {"op-1", 4, "1700000000000"}, {"op-2", 2, "1700000060000"}, {"op-3", 1, "1700000000000"}, {"op-3", 2, "1700000000000"}} {
		headers := goka.Headers{record.HeaderReceivedAt: []byte(ev.receivedAt)}
		tt.Consume(names.In, ev.op, fmt.Appendf(nil, `{"event_id":"%s-%d","operation_id":%q,"sequence":%d,"status":"running","occurred_at":"2026-11-30T10:00:00Z"}`, ev.op, ev.seq, ev.op, ev.seq), withHeaders(headers))
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- proc.RunTimers(ctx, 10*time.Millisecond) }()
	defer func() {
		stop()
		<-done
	}()
	// op-1 waits for 2 holding 3 and 4; op-2 waits for 1 holding 2; op-3 is whole.
	gauges := func() (gaps, buffered, oldest float64) {
		return testutil.ToFloat64(metrics.gaps.WithLabelValues(s.Name)), testutil.ToFloat64(metrics.buffered.WithLabelValues(s.Name)),
			testutil.ToFloat64(metrics.oldestGap.WithLabelValues(s.Name))
	}
	if !testenv.Poll(t.Context(), func() bool { g, b, o := gauges(); return g == 2 && b == 3 && o == 90 }) {
		g, b, o := gauges()
		t.Fatalf("gauges show %v gaps, %v buffered events and the oldest gap open %v s, want 2, 3 and 90", g, b, o)
	}
}

// The lag sums each partition's records past its commit, from offset 0
// where the group has committed none.
func TestInputLag(t *testing.T) {
	if lag := inputLag(nil, nil); lag != 0 {
		t.Fatalf("lag %d of no partition", lag)
	}
	if lag := inputLag(map[int32]int64{0: 10, 1: 20, 2: 7}, map[int32]int64{0: 4, 1: 20}); lag != 6+0+7 {
		t.Fatalf("lag %d, want 13 (6 on partition 0, none on 1, 7 uncommitted on 2)", lag)
	}
}
