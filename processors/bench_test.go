package processors

import (
	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/partition"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/testenv"
)

// benchEvents is how many presence events each run decides.
const benchEvents = 50_000

// BenchmarkProcessorAgainstRawConsumer measures, on the broker named by
// DRIFTGUARD_TEST_KAFKA, the presence processor's events/s (the runtime
// `driftguard process` runs, exactly once) next to a raw
// franz-go consumer reading the same input topic, in one run:
//
//	go tool task services:start   # or any broker
//	DRIFTGUARD_TEST_KAFKA=127.0.0.1:19092 go test -run='^$' -bench=ProcessorAgainstRaw -benchtime=1x ./processors/
func BenchmarkProcessorAgainstRawConsumer(b *testing.B) {
	brokers := testenv.Kafka(b)
	ctx := testenv.Context(b, 10*time.Minute)
	for range b.N {
		s := testenv.Shipped(b, "presence")
		s.Name = testenv.UniqueName("bench")
		produceBenchEvents(b, ctx, brokers, s)
		in := naming.Prefixes{}.For(s.Name).In

		b.StopTimer()
		raw := rawConsume(b, ctx, brokers, in)
		selfBefore, brokerBefore := testenv.ProcessCPU(b), brokerCPU(b)
		decided := decideAllExactlyOnce(b, ctx, brokers, s)
		selfCPU, brokerUsed := testenv.ProcessCPU(b)-selfBefore, brokerCPU(b)-brokerBefore
		b.StartTimer()
		rawRate, procRate := benchEvents/raw.Seconds(), benchEvents/decided.Seconds()
		b.ReportMetric(rawRate, "raw-events/s")
		b.ReportMetric(procRate, "processor-events/s")
		b.ReportMetric(procRate/rawRate, "ratio")
		// The machine is shared, so rates swing with its load; CPU time per
		// event does much less. The broker's counts the records the
		// processor writes (table, outcome, state).
		b.ReportMetric(float64(selfCPU.Microseconds())/benchEvents, "processor-cpu-µs/event")
		if brokerUsed > 0 {
			b.ReportMetric(float64(brokerUsed.Microseconds())/benchEvents, "broker-cpu-µs/event")
		}
	}
}

// BenchmarkExactlyOnceAgainstGoka measures, on the broker named by
// DRIFTGUARD_TEST_KAFKA, the transactional runtime next to the goka
// processor deciding the same presence events, in one run (each on its own
// copy of the input):
//
//	DRIFTGUARD_TEST_KAFKA=127.0.0.1:19092 DRIFTGUARD_TEST_KAFKA_PID=<pid> \
//	  go test -run='^$' -bench=ExactlyOnceAgainstGoka -benchtime=3x ./processors/
func BenchmarkExactlyOnceAgainstGoka(b *testing.B) {
	brokers := testenv.Kafka(b)
	ctx := testenv.Context(b, 10*time.Minute)
	for range b.N {
		b.StopTimer()
		var streams []*config.Stream
		for range 2 {
			s := testenv.Shipped(b, "presence")
			s.Name = testenv.UniqueName("eos")
			produceBenchEvents(b, ctx, brokers, s)
			streams = append(streams, s)
		}
		measure := func(decide func(*testing.B, context.Context, []string, *config.Stream) time.Duration, s *config.Stream) (rate, cpu, broker float64) {
			selfBefore, brokerBefore := testenv.ProcessCPU(b), brokerCPU(b)
			took := decide(b, ctx, brokers, s)
			selfCPU, brokerUsed := testenv.ProcessCPU(b)-selfBefore, brokerCPU(b)-brokerBefore
			return benchEvents / took.Seconds(), float64(selfCPU.Microseconds()) / benchEvents, float64(brokerUsed.Microseconds()) / benchEvents
		}
		gokaRate, gokaCPU, gokaBroker := measure(decideAll, streams[0])
		eosRate, eosCPU, eosBroker := measure(decideAllExactlyOnce, streams[1])
		b.StartTimer()
		b.ReportMetric(gokaRate, "goka-events/s")
		b.ReportMetric(eosRate, "eos-events/s")
		b.ReportMetric(eosRate/gokaRate, "rate-ratio")
		b.ReportMetric(gokaCPU, "goka-cpu-µs/event")
		b.ReportMetric(eosCPU, "eos-cpu-µs/event")
		b.ReportMetric(eosCPU/gokaCPU, "cpu-ratio")
		if gokaBroker > 0 {
			b.ReportMetric(gokaBroker, "goka-broker-cpu-µs/event")
			b.ReportMetric(eosBroker, "eos-broker-cpu-µs/event")
		}
	}
}

// produceBenchEvents writes the benchmark's presence events to s's input.
func produceBenchEvents(b *testing.B, ctx context.Context, brokers []string, s *config.Stream) {
	cl := testenv.Topics(b, ctx, testenv.OnlyStream(b, s), brokers, kgo.ProducerLinger(5*time.Millisecond))
	defer cl.Close()
	in := naming.Prefixes{}.For(s.Name).In
	for i := range benchEvents {
		user := fmt.Sprintf("user-%d", i%5000)
		cl.Produce(ctx, &kgo.Record{Topic: in, Key: []byte(user), Value: testenv.Presence{EventID: fmt.Sprint(i), User: user, Version: int64(i)}.Body()}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// brokerCPU is the user+system CPU time of the broker process named by
// DRIFTGUARD_TEST_KAFKA_PID so far, from /proc; 0 where there is none
// (another OS, no broker pid).
func brokerCPU(b *testing.B) time.Duration {
	pid, err := strconv.Atoi(os.Getenv(testenv.EnvKafkaPID))
	if err != nil {
		return 0
	}
	cpu, err := procstat.CPU(pid)
	if err != nil {
		return 0
	}
	return cpu
}

// rawConsume reads the whole topic with a bare franz-go consumer.
func rawConsume(b *testing.B, ctx context.Context, brokers []string, topic string) time.Duration {
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	start := time.Now()
	for n := 0; n < benchEvents; {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			b.Fatal(err)
		}
		n += fetches.NumRecords()
	}
	return time.Since(start)
}

// decideAll runs the stream's graph on goka's own processor, at least
// once, until it has decided every event: the same callbacks, table codec
// and storage as the runtime, with goka's sarama consumer and producer
// (acks=all, idempotent) and Kafka's murmur2 placement.
func decideAll(b *testing.B, ctx context.Context, brokers []string, s *config.Stream) time.Duration {
	metrics := NewMetrics(prometheus.NewRegistry())
	h := newHandler(s, Options{Metrics: metrics, Logger: testenv.Logger(b)})
	graph := h.graph(func(ctx goka.Context, msg any) { h.process(ctx, msg) }, func(ctx goka.Context, meta any) { h.tick(ctx, meta) })
	config := func() *sarama.Config {
		c := goka.DefaultConfig()
		c.Version = sarama.V3_6_0_0 // Kafka 4 dropped the request versions of goka's 2.0.0
		c.Consumer.Offsets.Initial = sarama.OffsetOldest
		c.Producer.RequiredAcks, c.Producer.Idempotent, c.Net.MaxOpenRequests = sarama.WaitForAll, true, 1
		return c
	}
	tm := goka.NewTopicManagerConfig()
	tm.Table.Replication, tm.Stream.Replication = 1, 1
	proc, err := goka.NewProcessor(brokers, graph,
		goka.WithHasher(partition.GokaHasher()),
		goka.WithStorageBuilder(tableStorageBuilder(b.TempDir())),
		goka.WithTopicManagerBuilder(func(brokers []string) (goka.TopicManager, error) { return goka.NewTopicManager(brokers, config(), tm) }),
		goka.WithProducerBuilder(goka.ProducerBuilderWithConfig(config())),
		goka.WithConsumerGroupBuilder(goka.ConsumerGroupBuilderWithConfig(config())),
		goka.WithConsumerSaramaBuilder(goka.SaramaConsumerBuilderWithConfig(config())),
	)
	if err != nil {
		b.Fatal(err)
	}
	return untilDecided(b, ctx, s, metrics, benchEvents, proc.Run)
}

// decideAllExactlyOnce runs the transactional runtime until it has decided
// every event.
func decideAllExactlyOnce(b *testing.B, ctx context.Context, brokers []string, s *config.Stream) time.Duration {
	metrics := NewMetrics(prometheus.NewRegistry())
	rt, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, Options{Metrics: metrics, Logger: testenv.Logger(b)}, RuntimeOptions{
		TransactionalID: naming.Prefixes{}.TransactionalID("bench", s.Name), Storage: tableStorageBuilder(b.TempDir()),
	})
	if err != nil {
		b.Fatal(err)
	}
	return untilDecided(b, ctx, s, metrics, benchEvents, rt.Run)
}

// untilDecided runs a processor until its metrics count n events
// decided, timed from the first decision.
func untilDecided(b *testing.B, ctx context.Context, s *config.Stream, metrics *Metrics, n int, run func(context.Context) error) time.Duration {
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx) }()
	decided := func() float64 {
		total := 0.0
		for _, outcome := range []string{"applied", "stale", "duplicate"} {
			total += testutil.ToFloat64(metrics.decisions.WithLabelValues(s.Name, outcome))
		}
		return total
	}
	// Timed from the first decision: joining the group and recovering the
	// (empty) table are start-up, not throughput.
	var start time.Time
	for decided() < float64(n) {
		if start.IsZero() && decided() > 0 {
			start = time.Now()
		}
		select {
		case err := <-done:
			b.Fatalf("processor stopped: %v", err)
		case <-ctx.Done():
			b.Fatal("timed out")
		case <-time.After(20 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return elapsed
}
