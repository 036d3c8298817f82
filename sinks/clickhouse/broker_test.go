package clickhouse_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// brokerSink is a sink of one fresh presence stream on the real broker,
// writing a fresh database of the real ClickHouse server.
type brokerSink struct {
	t      *testing.T
	ctx    context.Context
	cfg    *config.Config
	conn   driver.Conn
	names  naming.Topics
	stream string
	// cl produces to the stream's topics.
	cl  *kgo.Client
	ops *telemetry.Ops
}

func newBrokerSink(t *testing.T, ctx context.Context, prefix string) *brokerSink {
	t.Helper()
	conn, cfg := migratedDatabase(t, ctx)
	presence := testenv.Shipped(t, "presence")
	presence.Name = testenv.UniqueName(prefix)
	stream := testenv.OnlyStream(t, presence)
	stream.ClickHouse = cfg.ClickHouse
	stream.Kafka.Brokers = testenv.Kafka(t)
	stream.ClickHouse.BatchPeriod = 100 * time.Millisecond
	stream.ClickHouse.ConsumerGroup = presence.Name + "-sink"
	cl := testenv.Topics(t, ctx, stream, stream.Kafka.Brokers)
	t.Cleanup(cl.Close)
	return &brokerSink{t: t, ctx: ctx, cfg: stream, conn: conn, names: naming.Prefixes{}.For(presence.Name), stream: presence.Name, cl: cl}
}

// run starts the sink, with fresh metrics, until the test ends or the
// returned stop is called.
func (b *brokerSink) run() (stop func()) {
	b.ops = telemetry.NewOps()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() {
		done <- service.RunAll(ctx, sinkch.New(sinkch.Options{Config: b.cfg, Conn: b.conn, Logger: testenv.Logger(b.t), Ops: b.ops}))
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				b.t.Errorf("sink: %v", err)
			}
		}
	}
	b.t.Cleanup(stop)
	return stop
}

// outcome is an applied outcome record of the stream for event id.
// metricSum is a sink metric of the running sink summed over its series,
// and whether it has any.
func (b *brokerSink) metricSum(name string) (float64, bool) {
	v, ok := sinkMetricSums(b.t, b.ops)[name]
	return v, ok
}

// sinkMetricSums sums each driftguard_sink_ metric over its series: a
// counter's or gauge's value, a histogram's count.
func sinkMetricSums(t *testing.T, ops *telemetry.Ops) map[string]float64 {
	t.Helper()
	families, err := ops.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "driftguard_sink_") {
			continue
		}
		for _, m := range f.GetMetric() {
			sums[f.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sums
}

func (b *brokerSink) outcome(id string) *kgo.Record {
	value, err := json.Marshal(record.Outcome{Stream: b.stream, Key: "alice", EventID: id, Outcome: record.Applied,
		DecisionID: b.stream + "/0/" + id + "/0", ProcessedAtMs: time.Now().UnixMilli()})
	if err != nil {
		b.t.Fatal(err)
	}
	return &kgo.Record{Topic: b.names.Outcomes, Key: []byte("alice"), Value: value}
}

// produce writes records and waits for their acks.
func (b *brokerSink) produce(records ...*kgo.Record) {
	b.t.Helper()
	if err := b.cl.ProduceSync(b.ctx, records...).FirstErr(); err != nil {
		b.t.Fatal(err)
	}
}

// eventIDs are the event ids in events, in the order of their source
// offsets.
func (b *brokerSink) eventIDs() []string {
	b.t.Helper()
	return b.strings("SELECT event_id FROM " + b.cfg.ClickHouse.Database + ".events ORDER BY `offset`")
}

func (b *brokerSink) strings(query string) []string {
	b.t.Helper()
	return queryStrings(b.t, b.ctx, b.conn, query)
}

// queryStrings runs a query of one String column and returns its rows.
func queryStrings(t testing.TB, ctx context.Context, conn driver.Conn, query string) []string {
	t.Helper()
	rows, err := conn.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitForEvents waits until events holds n rows.
func (b *brokerSink) waitForEvents(n int) {
	b.t.Helper()
	testenv.WaitFor(b.t, b.ctx, fmt.Sprintf("%d rows in events", n), func() bool { return len(b.eventIDs()) >= n })
}
