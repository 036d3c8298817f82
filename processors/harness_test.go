package processors

import (
	"context"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors/eos"
)

// shipped is a stream's processor as `driftguard process` runs it (the
// transactional runtime over the stream's goka graph) on an embedded
// broker of the test's own, driven step by step: each Consume writes an
// input record, and a tracker or a visit first waits until every input
// written so far is decided and committed, so a test reads the outputs of
// exactly the inputs it sent. Timers are visited only when the test asks
// (VisitAll), at the time it says.
type shipped struct {
	t     testing.TB
	ctx   context.Context
	r     *Runtime
	names naming.Topics
	cl    *kgo.Client
	adm   *kadm.Client
	// written is, per input partition, the offset after the last input
	// written.
	written map[int32]int64
}

// startRun runs the runtime of s on a broker of its own until the test
// ends.
func startRun(t testing.TB, s *config.Stream, opts Options) (*shipped, naming.Topics) {
	t.Helper()
	ctx := testenv.Context(t, 5*time.Minute)
	brokers := testenv.Fake(t)
	// One partition, as goka's tester has: the tests name decisions by
	// their input's position.
	sc := *s
	sc.Limits.Partitions = 1
	s = &sc
	cfg := testenv.OnlyStream(t, s)
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.TopicPrefix, cfg.Kafka.GroupPrefix = opts.Naming.TopicPrefix, opts.Naming.GroupPrefix
	cl := testenv.Topics(t, ctx, cfg, brokers, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	t.Cleanup(cl.Close)
	if opts.Logger == nil {
		opts.Logger = testenv.Logger(t)
	}
	r, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, opts, RuntimeOptions{TransactionalID: "shipped-0",
		CommitEvery: 5 * time.Millisecond, TimerTick: time.Hour, FetchMinBytes: 1, FetchMaxWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	})
	testenv.WaitFor(t, ctx, "the processor recovered", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the processor stopped: %v", err)
		default:
		}
		return r.Recovered()
	})
	return &shipped{t: t, ctx: ctx, r: r, names: r.h.names, cl: cl, adm: kadm.NewClient(cl), written: map[int32]int64{}}, r.h.names
}

// consumeOption sets what an input record carries besides its key and
// value.
type consumeOption func(*kgo.Record)

// withHeaders gives an input record headers.
func withHeaders(headers goka.Headers) consumeOption {
	return func(rec *kgo.Record) {
		for k, v := range headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: v})
		}
	}
}

// Consume writes an input record of key to topic.
func (s *shipped) Consume(topic, key string, value []byte, opts ...consumeOption) {
	s.t.Helper()
	rec := &kgo.Record{Topic: topic, Key: []byte(key), Value: value}
	for _, o := range opts {
		o(rec)
	}
	res, err := s.cl.ProduceSync(s.ctx, rec).First()
	if err != nil {
		s.t.Fatal(err)
	}
	s.written[res.Partition] = res.Offset + 1
}

// settle waits until every input written so far is decided and committed.
func (s *shipped) settle() {
	s.t.Helper()
	testenv.WaitFor(s.t, s.ctx, "the inputs decided", func() bool {
		offsets, err := s.adm.FetchOffsets(s.ctx, s.r.h.group)
		if err != nil {
			return false
		}
		for p, end := range s.written {
			if o, ok := offsets.Lookup(s.names.In, p); !ok || o.At < end {
				return false
			}
		}
		return true
	})
}

// VisitAll settles, then visits every key with meta, in one transaction.
func (s *shipped) VisitAll(ctx context.Context, name string, meta any) error {
	s.settle()
	return s.r.proc.VisitAll(ctx, name, meta)
}

// tracker reads a topic's committed records in order, as goka's tester's
// QueueTracker does, passing over transaction markers and view marks.
type tracker struct {
	s     *shipped
	topic string
	rd    *kgo.Client
	read  []*kgo.Record
	// next is, per partition, the offset after the last record read,
	// transaction markers included.
	next map[int32]int64
}

// NewQueueTracker reads topic from its start.
func (s *shipped) NewQueueTracker(topic string) *tracker {
	rd, err := kgo.NewClient(kgo.SeedBrokers(s.r.conn.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(10*time.Millisecond),
		kgo.KeepControlRecords())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(rd.Close)
	return &tracker{s: s, topic: topic, rd: rd, next: map[int32]int64{}}
}

// NextRaw is the next record of the topic once the inputs written so far
// are decided; ok is false when there is none.
func (q *tracker) NextRaw() (key string, value []byte, ok bool) {
	q.s.t.Helper()
	if len(q.read) == 0 {
		q.fill()
	}
	if len(q.read) == 0 {
		return "", nil, false
	}
	r := q.read[0]
	q.read = q.read[1:]
	return string(r.Key), r.Value, true
}

// fill settles, then reads the topic up to its last stable offsets.
func (q *tracker) fill() {
	q.s.settle()
	ends, err := q.s.adm.ListEndOffsets(q.s.ctx, q.topic)
	if err != nil {
		q.s.t.Fatal(err)
	}
	for {
		caught := true
		ends.Each(func(o kadm.ListedOffset) { caught = caught && q.next[o.Partition] >= o.Offset })
		if caught {
			return
		}
		pollCtx, cancel := context.WithTimeout(q.s.ctx, 100*time.Millisecond)
		q.rd.PollFetches(pollCtx).EachRecord(func(r *kgo.Record) {
			q.next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() && !eos.IsViewMark(r) {
				q.read = append(q.read, r)
			}
		})
		cancel()
		if q.s.ctx.Err() != nil {
			q.s.t.Fatal("reading ", q.topic, ": ", q.s.ctx.Err())
		}
	}
}

// TableValue settles, then reads key's committed value in the group table
// (nil without one).
func (s *shipped) TableValue(table goka.Table, key string) any {
	s.t.Helper()
	var last []byte
	found := false
	for _, raw := range rawRecordsOf(s.NewQueueTracker(string(table)), key) {
		last, found = raw, true
	}
	if !found || last == nil {
		return nil
	}
	v, err := entityCodec{}.Decode(last)
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

// rawRecordsOf are the values of key's records on qt, in order.
func rawRecordsOf(qt rawReader, key string) [][]byte {
	var out [][]byte
	for {
		k, raw, ok := qt.NextRaw()
		if !ok {
			return out
		}
		if k == key {
			out = append(out, raw)
		}
	}
}

// RunTimers visits the timers every tick at the clock's time (a watermark
// with no broker to read), until ctx ends.
func (s *shipped) RunTimers(ctx context.Context, tick time.Duration) error {
	s.r.visitTimers(ctx, &watermark{}, tick)
	return nil
}
