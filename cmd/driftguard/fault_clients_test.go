package main

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/naming"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// clientUnderTest is one Kafka client of a component, by the options the
// component builds it with.
type clientUnderTest struct {
	name string
	opts []kgo.Opt
	// produces: acks=all, idempotent, no cancellation of idempotent
	// produces, in flight within what Kafka keeps in order.
	produces bool
	// transactional: a transactional id.
	transactional bool
	// consumes: read_committed.
	consumes bool
	// group: a consumer group that starts from the oldest offset.
	group bool
}

// The settings every component's Kafka clients must keep, read back from
// clients built with the very options each component uses (no list of
// options is repeated here): producers write with acks=all and
// idempotence, never cancel an idempotent produce, keep at most five
// requests in flight (what Kafka keeps in order for an idempotent
// producer); every consumer reads committed records only; consumer groups
// start from the oldest offset; the processors write in transactions; and
// ingest's producer neither lingers nor refuses a record the topic would
// take. A change that weakens any of them fails here, not in production.
func TestFaultClientSettingsOfEveryComponent(t *testing.T) {
	cfg := testenv.OnlyStream(t, testenv.Shipped(t, "presence"))
	// Nothing listens there: the clients are built, read and closed, never
	// used.
	brokers := []string{"127.0.0.1:1"}
	cfg.Kafka.Brokers = brokers
	cfg.Bridge.Secret = strings.Repeat("s", 32)
	stream := cfg.Streams["presence"]

	runtime, err := processors.NewRuntime(kafka.Conn{Brokers: brokers}, stream, processors.Options{}, processors.RuntimeOptions{TransactionalID: naming.Prefixes{}.TransactionalID("instance-0", stream.Name)})
	if err != nil {
		t.Fatal(err)
	}
	sink := sinkch.New(sinkch.Options{Config: cfg, Brokers: brokers})
	bridge, err := realtime.New(realtime.Options{Config: cfg, Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	clients := []clientUnderTest{
		{name: "ingest's producer", opts: kafka.Options(kafka.Conn{Brokers: brokers}, ingest.ProducerOptions(time.Millisecond)...), produces: true},
		{name: "the processor's transact session", opts: runtime.ClientOptions(), produces: true, transactional: true, consumes: true, group: true},
		{name: "the processor's table restore", opts: runtime.ChangelogReaderOptions(0, 0), consumes: true},
		{name: "the ClickHouse sink", opts: sink.ClientOptions(), consumes: true, group: true},
		{name: "the bridge's readers", opts: bridge.ReaderOptions("presence.state", map[int32]kgo.Offset{0: kgo.NewOffset().AtStart()}, time.Second), consumes: true},
	}
	// franz-go reports the isolation level as the protocol's number.
	reference, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	readCommitted := reference.OptValue(kgo.FetchIsolationLevel)
	reference.Close()
	for _, c := range clients {
		cl, err := kgo.NewClient(c.opts...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		check := func(what string, opt any, ok func(any) bool) {
			t.Helper()
			if v := cl.OptValue(opt); !ok(v) {
				t.Errorf("%s: %s is %v", c.name, what, v)
			}
		}
		if c.produces {
			check("acks (want all in-sync replicas)", kgo.RequiredAcks, func(v any) bool { return v == kgo.AllISRAcks() })
			check("idempotent writes disabled (want enabled)", kgo.DisableIdempotentWrite, func(v any) bool { return v == false })
			check("idempotent produce cancellation (want never)", kgo.AllowIdempotentProduceCancellation, func(v any) bool { return v == false })
			check("produce requests in flight per broker (want at most 5)", kgo.MaxProduceRequestsInflightPerBroker, func(v any) bool { n, ok := v.(int); return ok && n >= 1 && n <= 5 })
		}
		if c.transactional {
			if id, set := cl.OptValues(kgo.TransactionalID)[0], cl.OptValues(kgo.TransactionalID)[1]; set != true || id == "" {
				t.Errorf("%s: no transactional id", c.name)
			}
		}
		if c.consumes {
			check("isolation level (want read_committed)", kgo.FetchIsolationLevel, func(v any) bool { return v == readCommitted })
		}
		if c.group {
			check("a new group's start (want the oldest offset)", kgo.ConsumeResetOffset, func(v any) bool { return v == kgo.NewOffset().AtStart() })
		}
		cl.Close()
	}

	// The configured linger, which every ack waits for, and nothing more.
	defaults, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	linger := defaults.Kafka.Linger
	producer, err := kgo.NewClient(kafka.Options(kafka.Conn{Brokers: brokers}, ingest.ProducerOptions(linger)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if v := producer.OptValue(kgo.ProducerLinger); v != linger {
		t.Errorf("ingest's producer lingers %v, want kafka.linger (%s)", v, linger)
	}
	if v, want := producer.OptValue(kgo.ProducerBatchMaxBytes), record.ProducerBatchLimit(record.DefaultMaxMessageBytes); v != want {
		t.Errorf("ingest's producer batch limit is %v, want %d: what a topic of Kafka's default max.message.bytes takes", v, want)
	}
}
