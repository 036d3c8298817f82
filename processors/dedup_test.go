package processors

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Through goka, on the version-less orders stream: an id the count bound
// pushes out inside its window is counted as an early eviction, and its
// retry applies again; ids forgotten because their window passed are not
// counted.
func TestProcessorCountsEarlyDedupEvictions(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	s.Limits.DedupIDs, s.Limits.DedupWindow = 2, time.Hour
	metrics := NewMetrics(prometheus.NewRegistry())
	tt, names := startRun(t, s, Options{Metrics: metrics})
	outQ := tt.NewQueueTracker(names.Outcomes)
	const t0 = 1_700_000_000_000
	order := func(id string, atMs int64) {
		tt.Consume(names.In, "o1", fmt.Appendf(nil, `{"event_id":%q,"event_type":"order.created","order_id":"o1","payload":{}}`, id),
			withHeaders(goka.Headers{record.HeaderReceivedAt: []byte(strconv.FormatInt(atMs, 10))}))
	}
	order("a", t0)
	order("b", t0+1)
	order("a", t0+2) // remembered: a duplicate
	order("c", t0+3) // pushes a out, 3 ms into its hour: an early eviction
	order("a", t0+4) // applies again, and pushes b out early
	hour := time.Hour.Milliseconds()
	order("c", t0+3+hour)   // the last moment of c's window: a duplicate
	order("d", t0+4+hour+1) // a and c are past their window: forgotten, not evicted
	order("c", t0+4+hour+2)

	var got []string
	for _, o := range outcomes(t, outQ) {
		got = append(got, o.EventID+":"+string(o.Outcome))
	}
	want := []string{"a:applied", "b:applied", "a:duplicate", "c:applied", "a:applied", "c:duplicate", "d:applied", "c:applied"}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(metrics.evicted.WithLabelValues(s.Name)); n != 2 {
		t.Fatalf("%v early evictions counted, want 2", n)
	}
}
