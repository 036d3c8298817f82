package clickhouse

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/telemetry"
)

// metrics are the sink's Prometheus series.
type metrics struct {
	rows    *prometheus.CounterVec
	batches *prometheus.CounterVec
	latency *prometheus.HistogramVec
	retries prometheus.Counter
	lag     *prometheus.GaugeVec
	// recreated counts topics found deleted and created again.
	recreated *prometheus.CounterVec
	// lagOf is the last known lag of each partition this instance reads;
	// the gauge is their sum per topic.
	lagMu sync.Mutex
	lagOf map[string]map[int32]int64
}

func newMetrics(ops *telemetry.Ops) *metrics {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_sink_rows_total",
			Help: "Rows inserted into ClickHouse by table.",
		}, []string{"table"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_sink_batches_total",
			Help: "INSERTs into ClickHouse by table (one per table per flush).",
		}, []string{"table"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "driftguard_sink_insert_seconds",
			Help:    "Time of one successful INSERT by table, from the end of its data to the server's answer (the rows are mostly streamed ahead, while the batch before is written).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"table"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "driftguard_sink_retries_total",
			Help: "Failed ClickHouse operations (inserts, position reads) that the sink retried.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "driftguard_sink_consumer_lag",
			Help: "Records behind the last stable offset, summed over the topic's partitions this instance reads, as of its last fetch.",
		}, []string{"topic"}),
		recreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_sink_topic_recreated_total",
			Help: "Topics the sink found deleted and created again under a new topic id, whose positions no longer applied: the new topic was read from its start.",
		}, []string{"topic"}),
		lagOf: map[string]map[int32]int64{},
	}
	if ops != nil {
		ops.Registry.MustRegister(m.rows, m.batches, m.latency, m.retries, m.lag, m.recreated)
	}
	// Every table's series exist from the start, at 0: a dashboard or an
	// alert on the dlq table's rows sees it before its first row.
	for _, tables := range tablesOf {
		for _, table := range tables {
			m.rows.WithLabelValues(table)
			m.batches.WithLabelValues(table)
			m.latency.WithLabelValues(table)
		}
	}
	return m
}

func (m *metrics) inserted(table string, rows int, took time.Duration) {
	m.rows.WithLabelValues(table).Add(float64(rows))
	m.batches.WithLabelValues(table).Inc()
	m.latency.WithLabelValues(table).Observe(took.Seconds())
}

// observeLag takes each fetched partition's last stable offset (what a
// read_committed reader can reach) against the offset after its last
// fetched record and, when that record was written in a transaction, the
// transaction's marker after it, which takes an offset but is never
// delivered.
func (m *metrics) observeLag(fetches kgo.Fetches) {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	touched := map[string]bool{}
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		last := p.Records[len(p.Records)-1]
		next := last.Offset + 1
		if last.Attrs.IsTransactional() {
			next++
		}
		if m.lagOf[p.Topic] == nil {
			m.lagOf[p.Topic] = map[int32]int64{}
		}
		m.lagOf[p.Topic][p.Partition] = max(p.LastStableOffset-next, 0)
		touched[p.Topic] = true
	})
	for topic := range touched {
		m.setLag(topic)
	}
}

// forgetLag drops partitions this instance no longer reads.
func (m *metrics) forgetLag(partitions map[string][]int32) {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	for topic, ps := range partitions {
		for _, p := range ps {
			delete(m.lagOf[topic], p)
		}
		m.setLag(topic)
	}
}

func (m *metrics) setLag(topic string) {
	var sum int64
	for _, l := range m.lagOf[topic] {
		sum += l
	}
	m.lag.WithLabelValues(topic).Set(float64(sum))
}
