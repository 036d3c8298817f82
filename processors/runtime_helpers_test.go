package processors

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
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

// onePartitionStream gives the test an embedded broker with the topics of
// a one-partition copy of a shipped stream, and a client of it.
func onePartitionStream(t *testing.T, stream string) ([]string, context.Context, *config.Stream, naming.Topics, *kgo.Client) {
	t.Helper()
	cluster, ctx, s, names, cl := faultyPartitionStream(t, stream, nil)
	return cluster.ListenAddrs(), ctx, s, names, cl
}

// faultyPartitionStream is onePartitionStream giving the embedded broker
// itself, for a test that injects faults into it, with the stream changed
// by tune (when not nil) before its topics are created.
func faultyPartitionStream(t *testing.T, stream string, tune func(*config.Stream)) (*kfake.Cluster, context.Context, *config.Stream, naming.Topics, *kgo.Client) {
	t.Helper()
	cluster := testenv.FakeCluster(t)
	ctx := testenv.Context(t, 2*time.Minute)
	s := testenv.Shipped(t, stream)
	s.Limits.Partitions = 1
	if tune != nil {
		tune(s)
	}
	cl := testenv.Topics(t, ctx, testenv.OnlyStream(t, s), cluster.ListenAddrs())
	t.Cleanup(cl.Close)
	return cluster, ctx, s, naming.Prefixes{}.For(s.Name), cl
}

// newRuntime builds the runtime of s, logging to the test, with metrics
// of its own.
func newRuntime(t *testing.T, brokers []string, s *config.Stream, ropts RuntimeOptions) (*Runtime, *Metrics) {
	t.Helper()
	metrics := NewMetrics(prometheus.NewRegistry())
	r, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, Options{Logger: testenv.Logger(t), Metrics: metrics}, ropts)
	if err != nil {
		t.Fatal(err)
	}
	return r, metrics
}

// startRuntime builds and runs the runtime of s; the test ends by stopping
// it, which must return no error.
func startRuntime(t *testing.T, ctx context.Context, brokers []string, s *config.Stream, ropts RuntimeOptions) *Metrics {
	t.Helper()
	r, metrics := newRuntime(t, brokers, s, ropts)
	stop := runRuntime(ctx, r)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return metrics
}

// bob is presence event b<v> of user bob, version v, on topic in.
func bob(in string, v int64) *kgo.Record {
	return &kgo.Record{Topic: in, Key: []byte("bob"), Value: testenv.Presence{EventID: fmt.Sprintf("b%d", v), User: "bob", Version: v}.Body()}
}

// startFaultyRuntime runs the runtime of s on a network the test can pause
// or cut, with the shortest session the broker allows; stop ends it and
// returns Run's error (after a cut, it is never called: the runtime is
// dead).
func startFaultyRuntime(t *testing.T, ctx context.Context, brokers []string, s *config.Stream, id string, commitEvery time.Duration) (network *severableNetwork, stop func() error) {
	t.Helper()
	network = &severableNetwork{}
	r, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, Options{Logger: testenv.Logger(t)}, RuntimeOptions{TransactionalID: id, CommitEvery: commitEvery,
		// Writes go as decided, not at the transaction's end: the zombie
		// holds written, uncommitted ones when it stalls.
		Client: []kgo.Opt{kgo.Dialer(network.DialContext), kgo.SessionTimeout(6 * time.Second), kgo.ProducerLinger(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	return network, runRuntime(ctx, r)
}

// committedOutcomes are the outcome records a read_committed reader sees.
func committedOutcomes(t *testing.T, ctx context.Context, cl *kgo.Client, topic string) []record.Outcome {
	t.Helper()
	var out []record.Outcome
	for _, r := range readTopic(t, ctx, cl, topic, true) {
		var o record.Outcome
		if _, err := record.DecodeOutcome(r.Value, &o); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// committedOutcomeIDs are the committed outcome records as
// "event_id:outcome".
func committedOutcomeIDs(t *testing.T, ctx context.Context, cl *kgo.Client, topic string) []string {
	t.Helper()
	var got []string
	for _, o := range committedOutcomes(t, ctx, cl, topic) {
		got = append(got, o.EventID+":"+string(o.Outcome))
	}
	return got
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

// waitInputsCommitted waits until the group of s has committed n inputs
// of its one partition.
func waitInputsCommitted(t *testing.T, ctx context.Context, cl *kgo.Client, s *config.Stream, n int64) {
	t.Helper()
	in := naming.Prefixes{}.For(s.Name).In
	testenv.WaitFor(t, ctx, fmt.Sprintf("%d inputs committed", n), func() bool {
		offsets, err := kadm.NewClient(cl).FetchOffsetsForTopics(ctx, naming.Prefixes{}.Group(s.Name), in)
		if err != nil {
			return false
		}
		o, _ := offsets.Lookup(in, 0)
		return o.At == n
	})
}

// readTopic reads every record of topic up to its end offsets as of now,
// as a read_committed reader sees them or, with committed false, every
// record written, aborted or pending included.
func readTopic(t testing.TB, ctx context.Context, cl *kgo.Client, topic string, committed bool) []*kgo.Record {
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
	// gate is open (nil) or, while paused, a channel closed on resume.
	gate chan struct{}
}

// gatedConn is a connection that hangs while its network is paused.
type gatedConn struct {
	net.Conn
	n *severableNetwork
}

func (c gatedConn) Read(p []byte) (int, error) {
	c.n.wait()
	return c.Conn.Read(p)
}

func (c gatedConn) Write(p []byte) (int, error) {
	c.n.wait()
	return c.Conn.Write(p)
}

func (n *severableNetwork) DialContext(ctx context.Context, network, host string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.severed {
		return nil, errors.New("the process is dead")
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	n.conns = append(n.conns, conn)
	return gatedConn{conn, n}, nil
}

// pause makes every connection hang, reads and writes, until resume: a
// stopped process, as far as the broker can tell.
func (n *severableNetwork) pause() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gate == nil {
		n.gate = make(chan struct{})
	}
}

func (n *severableNetwork) resume() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gate != nil {
		close(n.gate)
		n.gate = nil
	}
}

// wait blocks while the network is paused.
func (n *severableNetwork) wait() {
	n.mu.Lock()
	gate := n.gate
	n.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func (n *severableNetwork) sever() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.severed = true
	for _, c := range n.conns {
		c.Close()
	}
}
