package processors

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A transaction's writes (outcomes, states, table values) go to the broker
// at its end, in one produce request, however its input trickles in: on
// the real broker, with an event every 10 ms through transactions of
// 200 ms, the session sends about one produce request per transaction,
// where lingering 10 ms sent one for every event or two.
func TestTransactionWritesGoInOneProduceRequest(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := testenv.Context(t, 2*time.Minute)
	s := testenv.Shipped(t, "presence")
	s.Name = testenv.UniqueName("batching")
	s.Limits.Partitions = 1
	cl := testenv.Topics(t, ctx, testenv.OnlyStream(t, s), brokers)
	t.Cleanup(cl.Close)
	in := naming.Prefixes{}.For(s.Name).In

	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	r, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, Options{Logger: testenv.Logger(t), Metrics: metrics},
		RuntimeOptions{TransactionalID: "batching-0", CommitEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRuntime(ctx, r)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	testenv.WaitFor(t, ctx, "the runtime recovered", r.Recovered)

	// In rounds, each decided before the next: a loaded machine that
	// delays the runtime still sees at least a transaction a round.
	const rounds, events = 10, 300
	applied := metrics.decisions.WithLabelValues(s.Name, "applied")
	for i := range events {
		user := fmt.Sprintf("user-%d", i)
		rec := &kgo.Record{Topic: in, Key: []byte(user), Value: testenv.Presence{EventID: fmt.Sprint(i), User: user, Version: 1}.Body()}
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
		time.Sleep(10 * time.Millisecond)
		if decided := i + 1; decided%(events/rounds) == 0 {
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, ctx, fmt.Sprintf("%d events decided", decided), func() bool { return testutil.ToFloat64(applied) == float64(decided) })
		}
	}

	sent := testenv.KafkaRequests(t, reg, "driftguard-process-"+s.Name)
	produced, ended := sent["Produce"], sent["EndTxn"]
	t.Logf("%d events: %.0f produce requests, %.0f transactions ended", events, produced, ended)
	// 3 s of input is up to 15 transactions; a produce request may still
	// go early when a commit and the input's arrival race.
	if ended < 5 || produced > ended*1.5+2 {
		t.Errorf("%.0f produce requests for %.0f transactions, want about one each", produced, ended)
	}
}
