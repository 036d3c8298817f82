package processors

import (
	"context"
	"errors"
	"net"
	"sync"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
)

// holdProduceTo makes the fake broker leave topic out of every produce
// request while hold is set: the records of other topics are written, the
// client gets no answer for topic's and retries, so their
// acknowledgements are held back.
func holdProduceTo(t *testing.T, ctx context.Context, c *kfake.Cluster, cl *kgo.Client, topic string, hold *atomic.Bool) {
	// Recent produce requests name topics by id.
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil || details[topic].Err != nil {
		t.Fatalf("the id of %s: %v %v", topic, err, details[topic].Err)
	}
	id := details[topic].ID
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if hold.Load() {
			req := kreq.(*kmsg.ProduceRequest)
			req.Topics = slices.DeleteFunc(req.Topics, func(t kmsg.ProduceRequestTopic) bool { return t.Topic == topic || t.TopicID == id })
		}
		return nil, nil, false
	})
}

// runRuntime runs r until the returned stop is called; stop returns Run's
// error.
func runRuntime(ctx context.Context, r *Runtime) (stop func() error) {
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// The transactional runtime dies while the dead letter of its first input
// cannot be acknowledged, after deciding the inputs after it: nothing of
// that transaction is visible, and the instance that takes over (with the
// same transactional id) decides every input once, the dead letter
// included.
func TestRuntimeDiesWithWritesInFlightAndLosesNothing(t *testing.T) {
	cluster := testenv.FakeCluster(t)
	brokers := cluster.ListenAddrs()
	ctx := testenv.Context(t, 2*time.Minute)
	s := testenv.Shipped(t, "presence")
	s.Limits.Partitions = 1
	names := topics.For(s.Name)
	cl := testenv.Topics(t, ctx, testenv.OnlyStream(t, s), brokers)
	defer cl.Close()
	for _, r := range []*kgo.Record{
		{Topic: names.In, Key: []byte("alice"), Value: []byte("not json")},
		{Topic: names.In, Key: []byte("bob"), Value: testenv.Presence{EventID: "b1", User: "bob", Version: 1}.Body()},
		{Topic: names.In, Key: []byte("bob"), Value: testenv.Presence{EventID: "b2", User: "bob", Version: 2}.Body()},
	} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var hold atomic.Bool
	hold.Store(true)
	holdProduceTo(t, ctx, cluster, cl, names.DLQ, &hold)

	network := &severableNetwork{}
	first, err := NewRuntime(brokers, s, Options{Logger: testenv.Logger(t)}, RuntimeOptions{TransactionalID: "presence-0",
		Client: []kgo.Opt{kgo.Dialer(network.DialContext), kgo.SessionTimeout(6 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	stopFirst := runRuntime(ctx, first)
	// Its transaction cannot commit while the dead letter is refused;
	// bob's outcomes are written, uncommitted.
	testenv.WaitFor(t, ctx, "bob's outcomes written, uncommitted", func() bool {
		return len(readTopic(t, ctx, cl, names.Outcomes, false)) >= 2
	})
	if n := len(readTopic(t, ctx, cl, names.Outcomes, true)); n != 0 {
		t.Fatalf("%d outcomes committed while the dead letter of an earlier input is unacknowledged", n)
	}
	// It dies: its connections are cut under the pending commit and it
	// never reaches the broker again, as a killed process would not. (Its
	// goroutines wait out their timeouts in the background.)
	network.sever()
	_ = stopFirst

	hold.Store(false)
	second, err := NewRuntime(brokers, s, Options{Logger: testenv.Logger(t)}, RuntimeOptions{TransactionalID: "presence-0"})
	if err != nil {
		t.Fatal(err)
	}
	stopSecond := runRuntime(ctx, second)
	defer func() {
		if err := stopSecond(); err != nil {
			t.Error(err)
		}
	}()
	testenv.WaitFor(t, ctx, "every input committed", func() bool {
		offsets, err := kadm.NewClient(cl).FetchOffsetsForTopics(ctx, topics.Group(s.Name), names.In)
		if err != nil {
			return false
		}
		o, _ := offsets.Lookup(names.In, 0)
		return o.At == 3
	})
	var got []string
	for _, r := range readTopic(t, ctx, cl, names.Outcomes, true) {
		var o record.Outcome
		if _, err := record.DecodeOutcome(r.Value, &o); err != nil {
			t.Fatal(err)
		}
		got = append(got, o.EventID+":"+string(o.Outcome))
	}
	if want := []string{"b1:applied", "b2:applied"}; !slices.Equal(got, want) {
		t.Errorf("committed outcomes %v, want %v", got, want)
	}
	if n := len(readTopic(t, ctx, cl, names.DLQ, true)); n != 1 {
		t.Errorf("%d committed dead letters, want the one of input 0", n)
	}
}

// readTopic reads every record of topic up to its end offsets as of now,
// as a read_committed reader sees them or, with committed false, every
// record written, aborted or pending included.
func readTopic(t *testing.T, ctx context.Context, cl *kgo.Client, topic string, committed bool) []*kgo.Record {
	t.Helper()
	adm := kadm.NewClient(cl)
	list := adm.ListEndOffsets
	isolation := kgo.ReadUncommitted()
	if committed {
		list, isolation = adm.ListCommittedOffsets, kgo.ReadCommitted()
	}
	ends, err := list(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	start := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			start[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(isolation), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fetches := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// severableNetwork dials the broker until sever cuts every connection and
// refuses new ones: a process that died, as far as the broker can tell.
type severableNetwork struct {
	mu      sync.Mutex
	conns   []net.Conn
	severed bool
}

func (n *severableNetwork) DialContext(ctx context.Context, network, host string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.severed {
		return nil, errors.New("the process is dead")
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		n.conns = append(n.conns, conn)
	}
	return conn, err
}

func (n *severableNetwork) sever() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.severed = true
	for _, c := range n.conns {
		c.Close()
	}
}
