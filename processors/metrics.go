package processors

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/processors/decide"
)

// Metrics count decisions across streams.
type Metrics struct {
	decisions *prometheus.CounterVec
	// evicted counts dedup memory ids pushed out before their window ended.
	evicted *prometheus.CounterVec
	// The lost+found seed's metrics, under the driftguard_ prefix.
	stored, reconciled, expired *prometheus.CounterVec
	quarantined                 *prometheus.GaugeVec
	// What one timer visit counts, and the input lag the timer loop reads.
	gaps, buffered, lag *prometheus.GaugeVec
	// oldestGap is how long the oldest open gap has waited, the one
	// signal that a gap will not fill by itself.
	oldestGap *prometheus.GaugeVec
	// sessionRestarts counts Kafka sessions of the runtime begun anew
	// after one failed.
	sessionRestarts *prometheus.CounterVec
	// decisionLatency is received_at → committed, per decision;
	// lastCommit the time of the last committed transaction.
	decisionLatency *prometheus.HistogramVec
	lastCommit      *prometheus.GaugeVec
	// registry receives the Kafka clients' metrics.
	registry prometheus.Registerer
}

// decisionLatencyBuckets span a decision's wait from its webhook's 202:
// tens of milliseconds when caught up (processing.commit_interval is
// 100ms), minutes behind a backlog or while a child waits for its parent.
var decisionLatencyBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// NewMetrics registers the processor metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	m := &Metrics{
		decisions: counter("driftguard_processor_decisions_total", "Decisions by stream and outcome.", "stream", "outcome"),
		evicted: counter("driftguard_processor_dedup_evicted_total",
			"Event ids pushed out of a dedup memory by limits.dedup_ids before limits.dedup_window ended, and remembered chat sends let go early to keep a conversation within its share of the table value.", "stream"),
		stored:     counter("driftguard_quarantine_events_stored_total", "Children quarantined to wait for their parent.", "stream"),
		reconciled: counter("driftguard_quarantine_events_reconciled_total", "Quarantined children applied when their parent arrived.", "stream"),
		expired:    counter("driftguard_quarantine_events_expired_total", "Quarantined children whose parent never came (sent to the DLQ).", "stream"),
		sessionRestarts: counter("driftguard_processor_session_restarts_total",
			"Kafka sessions (transactional producer and group member) begun anew after one failed; the inputs of the transaction open then are decided again.", "stream"),
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"stream"})
		reg.MustRegister(g)
		return g
	}
	m.quarantined = gauge("driftguard_quarantine_events_current",
		"Children waiting for their parent in the partitions this instance owns, as of the last timer tick.")
	m.gaps = gauge("driftguard_processor_gaps_current",
		"Keys of a gapless stream waiting for a missing sequence in the partitions this instance owns, as of the last timer tick.")
	m.buffered = gauge("driftguard_processor_buffered_events_current",
		"Events held ahead of a gap in the partitions this instance owns, as of the last timer tick.")
	m.oldestGap = gauge("driftguard_processor_oldest_gap_seconds",
		"Seconds the oldest gap of a gapless stream in the partitions this instance owns has been open (since the first event buffered behind it was received), as of the last timer tick; 0 with none.")
	m.lag = gauge("driftguard_processor_consumer_lag",
		"Records of <stream>.in the stream's group has not committed, summed over all partitions, read from the broker every processing.timer_tick whether or not the processor makes progress.")
	m.lastCommit = gauge("driftguard_processor_last_commit_timestamp_seconds",
		"Unix time of the stream's last committed transaction on this instance (idle, the loop commits an empty one every processing.commit_interval); 0 before the first.")
	m.decisionLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "driftguard_processor_decision_latency_seconds",
		Help:    "Time from an event's received_at (its webhook's 202) to the commit of the transaction that wrote its decision, when readers see it; once per outcome committed.",
		Buckets: decisionLatencyBuckets,
	}, []string{"stream"})
	reg.MustRegister(m.decisionLatency)
	m.registry = reg
	return m
}

// clientOpts are the options of a Kafka client the processors build for
// role: its id, and its metrics on the processors' registry when there is
// one (m nil: the id alone).
func (m *Metrics) clientOpts(role string) []kgo.Opt {
	if m == nil {
		return kafka.ClientMetrics(nil, role)
	}
	return kafka.ClientMetrics(m.registry, role)
}

// serve makes a stream's series exist at 0 from the start, every outcome
// included, so dashboards and alerts see the stream before its first
// decision of each kind.
func (m *Metrics) serve(stream string) {
	for _, outcome := range record.Results {
		m.decisions.WithLabelValues(stream, string(outcome))
	}
	for _, v := range []*prometheus.CounterVec{m.evicted, m.stored, m.reconciled, m.expired, m.sessionRestarts} {
		v.WithLabelValues(stream)
	}
	for _, v := range []*prometheus.GaugeVec{m.quarantined, m.gaps, m.buffered, m.oldestGap, m.lag, m.lastCommit} {
		v.WithLabelValues(stream)
	}
	m.decisionLatency.WithLabelValues(stream)
}

// tally is what decisions add to a stream's counters and latency
// histogram, gathered apart from the metrics so that a transaction's are
// added only once it commits.
type tally struct {
	mu sync.Mutex
	// outcomes counts decisions by their decisions_total label.
	outcomes         map[string]int
	evicted, expired int
	// receivedAtMs are the received_at (unix ms) of the decisions about an
	// event, whose latency runs to when they became readable.
	receivedAtMs []int64
}

// decided counts the decisions of effects.
func (t *tally) decided(effects decide.Effects) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range effects.Decisions {
		t.count(string(d.Outcome))
		if record.IsOrphanExpiry(d.Reason) {
			t.expired++
		}
		// A gap's report (gap_timeout, repeated while the gap stays open)
		// is about no event: it has no latency to count.
		if d.Event.EventID != "" {
			t.receivedAtMs = append(t.receivedAtMs, d.Event.ReceivedAtMs)
		}
	}
	t.evicted += effects.Evicted
}

// count counts one decision by its label; t.mu is held.
func (t *tally) count(label string) {
	if t.outcomes == nil {
		t.outcomes = make(map[string]int)
	}
	t.outcomes[label]++
}

// reset empties t, keeping its room.
func (t *tally) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resetLocked()
}

func (t *tally) resetLocked() {
	clear(t.outcomes)
	t.evicted, t.expired = 0, 0
	t.receivedAtMs = t.receivedAtMs[:0]
}

// add adds t to stream's series, its decisions readable from at, and
// empties t. m nil only empties it.
func (m *Metrics) add(stream string, t *tally, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.resetLocked()
	if m == nil {
		return
	}
	for label, n := range t.outcomes {
		if n == 0 {
			continue
		}
		m.decisions.WithLabelValues(stream, label).Add(float64(n))
		switch record.Result(label) {
		case record.Quarantined:
			m.stored.WithLabelValues(stream).Add(float64(n))
		case record.Reconciled:
			m.reconciled.WithLabelValues(stream).Add(float64(n))
		}
	}
	if t.evicted > 0 {
		m.evicted.WithLabelValues(stream).Add(float64(t.evicted))
	}
	if t.expired > 0 {
		m.expired.WithLabelValues(stream).Add(float64(t.expired))
	}
	if len(t.receivedAtMs) > 0 {
		latency, atMs := m.decisionLatency.WithLabelValues(stream), at.UnixMilli()
		for _, ms := range t.receivedAtMs {
			latency.Observe(float64(max(0, atMs-ms)) / 1000)
		}
	}
}
