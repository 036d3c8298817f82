package clickhouse

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
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
	// lastInsert is the time of each table's last successful insert.
	lastInsert *prometheus.GaugeVec
	// read is, for each partition this instance reads, the offset after
	// its last fetched record (and that record's transaction marker) and
	// the partition's last stable offset as last known; the gauge sums
	// their difference per topic. Fetches move both, the lag watcher the
	// last stable offsets alone.
	lagMu sync.Mutex
	read  map[string]map[int32]readPosition
}

// readPosition is how far a partition is read, and how far it could be.
type readPosition struct{ next, stable int64 }

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
			Help: "Records behind the last stable offset, summed over the topic's partitions this instance has fetched from; the last stable offsets are read from the broker every second, so the lag rises while the sink is stalled.",
		}, []string{"topic"}),
		recreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_sink_topic_recreated_total",
			Help: "Topics the sink found deleted and created again under a new topic id, whose positions no longer applied: the new topic was read from its start.",
		}, []string{"topic"}),
		lastInsert: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "driftguard_sink_last_insert_timestamp_seconds",
			Help: "Unix time of the table's last successful INSERT by this instance; 0 before the first.",
		}, []string{"table"}),
		read: map[string]map[int32]readPosition{},
	}
	if ops != nil {
		ops.Registry.MustRegister(m.rows, m.batches, m.latency, m.retries, m.lag, m.recreated, m.lastInsert)
	}
	// Every table's series exist from the start, at 0: a dashboard or an
	// alert on the dlq table's rows sees it before its first row.
	for _, tables := range tablesOf {
		for _, table := range tables {
			m.rows.WithLabelValues(table)
			m.batches.WithLabelValues(table)
			m.latency.WithLabelValues(table)
			m.lastInsert.WithLabelValues(table)
		}
	}
	return m
}

func (m *metrics) inserted(table string, rows int, took time.Duration) {
	m.rows.WithLabelValues(table).Add(float64(rows))
	m.batches.WithLabelValues(table).Inc()
	m.latency.WithLabelValues(table).Observe(took.Seconds())
	m.lastInsert.WithLabelValues(table).Set(float64(time.Now().UnixMilli()) / 1000)
}

// observeLag takes each fetched partition's last stable offset (what a
// read_committed reader can reach) and the offset after its last fetched
// record and, when that record was written in a transaction, the
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
		if m.read[p.Topic] == nil {
			m.read[p.Topic] = map[int32]readPosition{}
		}
		m.read[p.Topic][p.Partition] = readPosition{next: next, stable: p.LastStableOffset}
		touched[p.Topic] = true
	})
	for topic := range touched {
		m.setLag(topic)
	}
}

// readTopics are the topics this instance has fetched from.
func (m *metrics) readTopics() []string {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	return slices.Collect(maps.Keys(m.read))
}

// observeStable takes last stable offsets read from the broker, for the
// partitions this instance has fetched from: between fetches, and while
// it fetches nothing (ClickHouse down, an insert that hangs), its lag
// follows what the processors write.
func (m *metrics) observeStable(stable kadm.ListedOffsets) {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	touched := map[string]bool{}
	stable.Each(func(o kadm.ListedOffset) {
		pos, ok := m.read[o.Topic][o.Partition]
		if !ok || o.Err != nil || o.Offset <= pos.stable {
			return
		}
		pos.stable = o.Offset
		m.read[o.Topic][o.Partition] = pos
		touched[o.Topic] = true
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
			delete(m.read[topic], p)
		}
		m.setLag(topic)
	}
}

func (m *metrics) setLag(topic string) {
	var sum int64
	for _, pos := range m.read[topic] {
		sum += max(pos.stable-pos.next, 0)
	}
	m.lag.WithLabelValues(topic).Set(float64(sum))
}

// lagPeriod is how often the lag watcher reads the last stable offsets.
const lagPeriod = time.Second

// watchLag reads the last stable offsets of the topics the sink has
// fetched from every lagPeriod until ctx ends, beside the loop that
// fetches and inserts (which stops fetching while ClickHouse fails).
func (m *metrics) watchLag(ctx context.Context, adm *kadm.Client) {
	t := time.NewTicker(lagPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if read := m.readTopics(); len(read) > 0 {
			if stable, err := adm.ListCommittedOffsets(ctx, read...); err == nil {
				m.observeStable(stable)
			}
		}
	}
}
