package processors

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"sync"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
)

// heldProducer is the processor's producer with the writes to some topics
// held back: they are sent, and their promises resolved, only on release.
// A crash drops what it holds, as a killed process loses its buffers.
type heldProducer struct {
	goka.Producer
	hold func(topic string) bool

	mu   sync.Mutex
	held []func(crashed bool)
}

var errCrashed = errors.New("the process was killed")

func (p *heldProducer) Emit(topic, key string, value []byte) *goka.Promise {
	return p.EmitWithHeaders(topic, key, value, nil)
}

func (p *heldProducer) EmitWithHeaders(topic, key string, value []byte, headers goka.Headers) *goka.Promise {
	if !p.hold(topic) {
		return p.Producer.EmitWithHeaders(topic, key, value, headers)
	}
	promise, finish := goka.NewPromiseWithFinisher()
	p.mu.Lock()
	p.held = append(p.held, func(crashed bool) {
		if crashed {
			finish(nil, errCrashed)
			return
		}
		p.Producer.EmitWithHeaders(topic, key, value, headers).Then(func(err error) { finish(nil, err) })
	})
	p.mu.Unlock()
	return promise
}

// crash drops every held write.
func (p *heldProducer) crash() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.held {
		f(true)
	}
	p.held = nil
}

func (p *heldProducer) holding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// Commit order: an input's writes to another topic (here its dead letter)
// are still in flight when a later input's writes are acknowledged. The
// group must not commit past the first input until its writes are in, or a
// crash loses them: the restarted processor starts after it.
func TestCommitsNeverPassAnInputWhoseWritesAreInFlight(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := testenv.Context(t, 2*time.Minute)
	s := testenv.Shipped(t, "presence")
	s.Name = testenv.UniqueName("order")
	s.Limits.Partitions = 1
	names := topics.For(s.Name)
	cl := testenv.Topics(t, ctx, testenv.OnlyStream(t, s), brokers)
	defer cl.Close()

	// Input 0 cannot be read (its dead letter is held back); input 1 is a
	// valid event of another key, decided and written at once.
	for _, r := range []*kgo.Record{
		{Topic: names.In, Key: []byte("alice"), Value: []byte("not json")},
		{Topic: names.In, Key: []byte("bob"), Value: testenv.Presence{EventID: "e1", User: "bob", Version: 1}.Body()},
	} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	held := &heldProducer{hold: func(topic string) bool { return topic == names.DLQ }}
	opts := append(GokaOptions(1, "", testenv.Logger(t)),
		goka.WithProducerBuilder(func(brokers []string, clientID string, _ func() hash.Hash32) (goka.Producer, error) {
			p, err := newProducer(brokers, clientID)
			held.Producer = p
			return held, err
		}))
	first, err := New(brokers, s, Options{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(runCtx) }()

	// bob's outcome is in, alice's dead letter held; then a few commit
	// intervals pass, as they would before a crash.
	readOutcome(t, ctx, cl, names.Outcomes, "bob")
	testenv.WaitFor(t, ctx, "the dead letter held back", func() bool { return held.holding() == 1 })
	time.Sleep(3 * saramaConfig().Consumer.Offsets.AutoCommit.Interval)
	held.crash()
	stop()
	<-done

	adm := kadm.NewClient(cl)
	offsets, err := adm.FetchOffsetsForTopics(ctx, topics.Group(s.Name), names.In)
	if err != nil {
		t.Fatal(err)
	}
	committed, _ := offsets.Lookup(names.In, 0)
	if committed.At > 0 && countRecords(t, ctx, cl, names.DLQ) == 0 {
		t.Fatalf("the group committed offset %d, past input 0, whose dead letter was never written: a restart loses it", committed.At)
	}

	// Restarted, the processor writes the dead letter of input 0.
	second, err := New(brokers, s, Options{}, GokaOptions(1, "", testenv.Logger(t))...)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop = context.WithCancel(ctx)
	go func() { done <- second.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	testenv.WaitFor(t, ctx, "the dead letter of input 0 after the restart", func() bool {
		return countRecords(t, ctx, cl, names.DLQ) >= 1
	})
}

// readOutcome waits for an outcome of key on topic.
func readOutcome(t *testing.T, ctx context.Context, cl *kgo.Client, topic, key string) {
	t.Helper()
	testenv.WaitFor(t, ctx, "the outcome of "+key, func() bool {
		for _, r := range readAll(t, ctx, cl, topic) {
			if string(r.Key) == key {
				return true
			}
		}
		return false
	})
}

func countRecords(t *testing.T, ctx context.Context, cl *kgo.Client, topic string) int {
	return len(readAll(t, ctx, cl, topic))
}

// readAll reads every record of topic up to its end offsets as of now.
func readAll(t *testing.T, ctx context.Context, cl *kgo.Client, topic string) []*kgo.Record {
	t.Helper()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if len(want) == 0 {
		return nil
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: startOffsets(want)}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fetches := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal(fmt.Errorf("reading %s: %w", topic, err))
		}
		fetches.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

func startOffsets(ends map[int32]int64) map[int32]kgo.Offset {
	out := map[int32]kgo.Offset{}
	for p := range ends {
		out[p] = kgo.NewOffset().AtStart()
	}
	return out
}
