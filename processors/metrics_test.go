package processors

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// What an operator reads of a processor holds while it works and while it
// stalls: each committed decision's latency from received_at, the time of
// the last commit, the input lag (which keeps rising while the loop is
// blocked, and the last commit time stays put), and the Kafka client's
// own metrics, labelled with its client id.
func TestRuntimeMetricsWhileWorkingAndStalled(t *testing.T) {
	brokers, ctx, s, names, cl := onePartitionStream(t, "presence")
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	r, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, Options{Logger: testenv.Logger(t), Metrics: metrics},
		RuntimeOptions{TransactionalID: "metrics-a", CommitEvery: 50 * time.Millisecond, TimerTick: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	latency := metrics.decisionLatency.WithLabelValues(s.Name).(prometheus.Histogram)
	lastCommit := metrics.lastCommit.WithLabelValues(s.Name)
	lag := metrics.lag.WithLabelValues(s.Name)
	if n := histogramCount(t, latency); n != 0 || testutil.ToFloat64(lastCommit) != 0 {
		t.Fatalf("before running: %d latencies, last commit %v", n, testutil.ToFloat64(lastCommit))
	}
	started := time.Now()
	stop := runRuntime(ctx, r)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})

	// Received two seconds ago: each latency is at least that.
	const waited = 2 * time.Second
	receivedAt := strconv.FormatInt(time.Now().Add(-waited).UnixMilli(), 10)
	produce := func(from, to int64) {
		for v := from; v <= to; v++ {
			rec := bob(names.In, v)
			rec.Headers = []kgo.RecordHeader{{Key: record.HeaderReceivedAt, Value: []byte(receivedAt)}}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(1, 3)
	testenv.WaitFor(t, ctx, "three decisions committed", func() bool { return histogramCount(t, latency) == 3 })
	if sum := histogramSum(t, latency); sum < 3*waited.Seconds() || sum > 3*(waited.Seconds()+30) {
		t.Errorf("latencies sum to %.3fs, want three of at least %s", sum, waited)
	}
	if at := testutil.ToFloat64(lastCommit); at < float64(started.Unix()) {
		t.Errorf("last commit at %v, before the runtime started (%d)", at, started.Unix())
	}
	testenv.WaitFor(t, ctx, "no lag", func() bool { return testutil.ToFloat64(lag) == 0 })
	// Idle, the loop still commits (empty transactions): the gauge keeps
	// up with the clock while the processor runs.
	idleFrom := testutil.ToFloat64(lastCommit)
	testenv.WaitFor(t, testenv.Context(t, 10*time.Second), "an idle commit", func() bool { return testutil.ToFloat64(lastCommit) > idleFrom })
	// And with no pause between them: franz-go holds a session 500 ms
	// after committing a transaction that sent no offsets, which allowed
	// at most 4 idle commits in 2 s and delayed the next input as much
	// (emptyTransaction). Every commit interval (50 ms) is about 40.
	idleCommits := map[float64]bool{}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		idleCommits[testutil.ToFloat64(lastCommit)] = true
	}
	if len(idleCommits) < 8 {
		t.Errorf("%d idle commits in 2 s, want one every commit interval (50 ms), at least 8", len(idleCommits))
	}

	// Stalled: the loop blocks at its next decision or commit. Unstalled
	// before the runtime is stopped, however the test ends.
	r.mu.Lock()
	unstall := sync.OnceFunc(r.mu.Unlock)
	t.Cleanup(unstall)
	stalledAt := testutil.ToFloat64(lastCommit)
	produce(4, 8)
	testenv.WaitFor(t, testenv.Context(t, 20*time.Second), "the lag of a stalled processor rising to 5", func() bool { return testutil.ToFloat64(lag) == 5 })
	time.Sleep(200 * time.Millisecond) // four commit intervals
	if at := testutil.ToFloat64(lastCommit); at != stalledAt {
		t.Errorf("last commit moved from %v to %v while the processor was stalled", stalledAt, at)
	}
	unstall()
	testenv.WaitFor(t, ctx, "the backlog decided and the lag back to 0", func() bool {
		return histogramCount(t, latency) == 8 && testutil.ToFloat64(lag) == 0
	})
	if at := testutil.ToFloat64(lastCommit); at <= stalledAt {
		t.Errorf("last commit still at %v after the stall", at)
	}

	// The session's client reports as driftguard_kafka_*, by client id.
	clientID := "driftguard-process-" + s.Name
	found := false
	for _, series := range testenv.Gathered(t, reg, "driftguard_kafka_fetch_records_total") {
		labels := series.Labels
		if labels["client_id"] == clientID && labels["topic"] == names.In && series.GetCounter().GetValue() >= 8 {
			found = true
		}
		if _, ok := labels["partition"]; ok {
			t.Errorf("a client metric by partition: %v", labels)
		}
	}
	if !found {
		t.Errorf("no driftguard_kafka_fetch_records_total of %s counting the 8 inputs of %s", clientID, names.In)
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	return histogramOf(t, h).GetSampleCount()
}
func histogramSum(t *testing.T, h prometheus.Histogram) float64 {
	return histogramOf(t, h).GetSampleSum()
}

func histogramOf(t *testing.T, h prometheus.Histogram) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

// A gap's expired report, made again each gap_timeout while the gap stays
// open, is about no event: the decision latency counts the two steps that
// arrived, not the reports, which would otherwise grow older with each
// repeat and fill the histogram's top bucket.
func TestDecisionLatencyCountsEventsNotGapReports(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "workflow", func(s *config.Stream) {
		s.Limits.GapTimeout = 100 * time.Millisecond
	})
	received := []kgo.RecordHeader{{Key: record.HeaderReceivedAt, Value: fmt.Appendf(nil, "%d", time.Now().UnixMilli())}}
	for _, seq := range []int{1, 3} {
		body := fmt.Appendf(nil, `{"event_id":"e%d","operation_id":"op-9","sequence":%d,"status":"running","occurred_at":"2026-11-30T10:00:00Z"}`, seq, seq)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: names.In, Key: []byte("op-9"), Value: body, Headers: received}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	metrics := startRuntime(t, ctx, cluster.ListenAddrs(), s, RuntimeOptions{TransactionalID: "latency-gap", CommitEvery: 20 * time.Millisecond, TimerTick: 20 * time.Millisecond})
	testenv.WaitFor(t, ctx, "three gap reports committed", func() bool {
		n := 0
		for _, o := range committedOutcomes(t, ctx, cl, names.Outcomes) {
			if o.Reason == record.ReasonGapTimeout {
				n++
			}
		}
		return n >= 3
	})
	if n := histogramCount(t, metrics.decisionLatency.WithLabelValues(s.Name).(prometheus.Histogram)); n != 2 {
		t.Errorf("%d decision latencies observed, want 2: steps 1 and 3, not the gap's reports", n)
	}
}

// Outside the transactional runtime (goka's own processor) partitions are
// decided in parallel and each input is counted once decided: every
// decision is counted, once. Under -race this also shows the counts are
// safe to share.
func TestHandlerCountsPartitionsDecidedInParallel(t *testing.T) {
	const partitions, inputs = 4, 50
	s := testenv.Shipped(t, "presence")
	metrics := NewMetrics(prometheus.NewRegistry())
	h := newHandler(s, Options{Metrics: metrics, Logger: testenv.Logger(t)})
	var wg sync.WaitGroup
	for p := range partitions {
		wg.Go(func() {
			user := fmt.Sprint("user-", p)
			c := &oneKeyTransaction{key: user}
			for v := range int64(inputs) {
				// Each input twice: applied, then a duplicate.
				body := testenv.Presence{EventID: fmt.Sprint(user, "-", v), User: user, Version: v + 1}.Body()
				h.process(c, body)
				h.process(c, body)
			}
			if c.failed != nil {
				t.Error(c.failed)
			}
		})
	}
	wg.Wait()
	for _, outcome := range []record.Result{record.Applied, record.Duplicate} {
		if n := testutil.ToFloat64(metrics.decisions.WithLabelValues(s.Name, string(outcome))); n != partitions*inputs {
			t.Errorf("%v %s decisions counted, want %d", n, outcome, partitions*inputs)
		}
	}
	if n := histogramCount(t, metrics.decisionLatency.WithLabelValues(s.Name).(prometheus.Histogram)); n != 2*partitions*inputs {
		t.Errorf("%d latencies observed, want one per decision, %d", n, 2*partitions*inputs)
	}
}
