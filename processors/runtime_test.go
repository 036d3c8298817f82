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
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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
		Client: []kgo.Opt{kgo.Dialer(network.DialContext), kgo.SessionTimeout(6 * time.Second)}})
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

// The transactional runtime dies while the dead letter of its first input
// cannot be acknowledged, after deciding the inputs after it: nothing of
// that transaction is visible, and the instance that takes over (with the
// same transactional id) decides every input once, the dead letter
// included.
func TestRuntimeDiesWithWritesInFlightAndLosesNothing(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "presence", nil)
	brokers := cluster.ListenAddrs()
	for _, r := range []*kgo.Record{
		{Topic: names.In, Key: []byte("alice"), Value: []byte("not json")},
		bob(names.In, 1),
		bob(names.In, 2),
	} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var hold atomic.Bool
	hold.Store(true)
	holdProduceTo(t, ctx, cluster, cl, names.DLQ, &hold)

	network, _ := startFaultyRuntime(t, ctx, brokers, s, "presence-0", 0)
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

	hold.Store(false)
	startRuntime(t, ctx, brokers, s, RuntimeOptions{TransactionalID: "presence-0"})
	waitInputsCommitted(t, ctx, cl, s, 3)
	if want, got := []string{"b1:applied", "b2:applied"}, committedOutcomeIDs(t, ctx, cl, names.Outcomes); !slices.Equal(got, want) {
		t.Errorf("committed outcomes %v, want %v", got, want)
	}
	if n := len(readTopic(t, ctx, cl, names.DLQ, true)); n != 1 {
		t.Errorf("%d committed dead letters, want the one of input 0", n)
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

// A catch-up: a thousand inputs of one key decided in one transaction,
// then the process dies before it commits. None is lost and none is
// decided twice: the instance that takes over decides them all again.
func TestRuntimeCatchUpOfOneKeyDiesAndLosesNothing(t *testing.T) {
	const inputs = 1000
	brokers, ctx, s, names, cl := onePartitionStream(t, "presence")
	for i := range inputs {
		cl.Produce(ctx, &kgo.Record{Topic: names.In, Key: []byte("alice"),
			Value: testenv.Presence{EventID: fmt.Sprint("e", i), User: "alice", Version: int64(i + 1)}.Body()}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A transaction long enough to hold the whole catch-up.
	network, _ := startFaultyRuntime(t, ctx, brokers, s, "catch-up", time.Minute)
	testenv.WaitFor(t, ctx, "the catch-up decided, uncommitted", func() bool {
		return len(readTopic(t, ctx, cl, names.Outcomes, false)) >= inputs
	})
	network.sever()

	startRuntime(t, ctx, brokers, s, RuntimeOptions{TransactionalID: "catch-up"})
	var applied map[string]int
	testenv.WaitFor(t, ctx, "every input committed", func() bool {
		applied = map[string]int{}
		for _, o := range committedOutcomes(t, ctx, cl, names.Outcomes) {
			if o.Outcome == record.Applied {
				applied[o.EventID]++
			}
		}
		return len(applied) == inputs
	})
	for id, n := range applied {
		if n != 1 {
			t.Errorf("%s applied %d times", id, n)
		}
	}
}

// A zombie: an instance stalls (its connections hang, as under SIGSTOP)
// past its session timeout with decisions of a transaction in hand, a
// second instance takes its partitions and decides them, then the first
// wakes and tries to commit. The coordinator refuses it: no message of the
// conversation gets its conversation_seq twice, and every send is decided
// once.
func TestRuntimeZombieIsFenced(t *testing.T) {
	brokers, ctx, s, names, cl := onePartitionStream(t, "chat")
	send := func(i int) *kgo.Record {
		return &kgo.Record{Topic: names.In, Key: []byte("c1"), Value: fmt.Appendf(nil,
			`{"event_id":"s%d","type":"message.send","conversation_id":"c1","sender_id":"u1","sender_device_id":"d","client_message_id":"m%d","body":"hi"}`, i, i)}
	}
	join := &kgo.Record{Topic: names.In, Key: []byte("c1"), Value: []byte(`{"event_id":"j","type":"member.added","conversation_id":"c1","user_id":"u1"}`)}
	if err := cl.ProduceSync(ctx, join, send(0), send(1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	network, stopZombie := startFaultyRuntime(t, ctx, brokers, s, "chat-a", 30*time.Second)
	testenv.WaitFor(t, ctx, "the first instance's decisions written, uncommitted", func() bool {
		return len(readTopic(t, ctx, cl, names.Outcomes, false)) >= 3
	})
	network.pause()

	// The second instance gets the partition once the first's session
	// has expired, decides the backlog and more, and commits.
	startRuntime(t, ctx, brokers, s, RuntimeOptions{TransactionalID: "chat-b"})
	if err := cl.ProduceSync(ctx, send(2)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "the second instance's decisions committed", func() bool {
		return len(readTopic(t, ctx, cl, names.Outcomes, true)) >= 4
	})
	// The first wakes and ends its transaction, which must not commit.
	network.resume()
	_ = stopZombie() // it may report the refused commit; what counts is below

	seqs := map[int64]string{}
	decided := map[string]int{}
	for _, o := range committedOutcomes(t, ctx, cl, names.Outcomes) {
		decided[o.EventID]++
		if o.EventType != "message.send" || o.Outcome != record.Applied {
			continue
		}
		if prev, ok := seqs[o.Version]; ok {
			t.Errorf("conversation_seq %d assigned to %s and %s", o.Version, prev, o.EventID)
		}
		seqs[o.Version] = o.EventID
	}
	for _, id := range []string{"j", "s0", "s1", "s2"} {
		if decided[id] != 1 {
			t.Errorf("%s decided %d times in the committed outcomes, want once", id, decided[id])
		}
	}
}

// An instance the group gives no partition is ready once it has joined, so
// a StatefulSet scaled past the partition count still rolls out.
func TestRuntimeWithoutPartitionsIsReady(t *testing.T) {
	brokers, ctx, s, _, _ := onePartitionStream(t, "presence")
	first, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, Options{}, RuntimeOptions{TransactionalID: "ready-a"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, Options{}, RuntimeOptions{TransactionalID: "ready-b"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Recovered() {
		t.Fatal("ready before running")
	}
	for _, r := range []*Runtime{first, second} {
		stop := runRuntime(ctx, r)
		t.Cleanup(func() {
			if err := stop(); err != nil {
				t.Error(err)
			}
		})
	}
	testenv.WaitFor(t, ctx, "both instances ready, one of them without a partition", func() bool {
		return first.Recovered() && second.Recovered()
	})
	held := len(first.proc.Held()) + len(second.proc.Held())
	if held != 1 {
		t.Errorf("the two instances hold %d partitions of one", held)
	}
}

// answerHeartbeatsOf makes the fake broker answer the heartbeats of the
// group member *member names itself, without the coordinator seeing them:
// the coordinator drops the member once its session expires, and the
// member is never told, a zombie however long the test runs.
func answerHeartbeatsOf(c *kfake.Cluster, member *atomic.Pointer[string]) {
	c.ControlKey(int16(kmsg.Heartbeat), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.HeartbeatRequest)
		if m := member.Load(); m == nil || req.MemberID != *m {
			return nil, nil, false
		}
		return req.ResponseKind(), nil, true
	})
}

// zombieRuntime runs the runtime of s with the shortest session the fake
// broker allows, and returns it; the test ends by stopping it, whatever
// Run returns (a zombie's may report its refused commits).
func zombieRuntime(t *testing.T, ctx context.Context, brokers []string, s *config.Stream, id string) *Runtime {
	t.Helper()
	r, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, Options{Logger: testenv.Logger(t)}, RuntimeOptions{TransactionalID: id, TimerTick: 100 * time.Millisecond,
		Client: []kgo.Opt{kgo.SessionTimeout(6 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRuntime(ctx, r)
	t.Cleanup(func() { _ = stop() })
	return r
}

// memberID is the group member id of r once it has joined.
func memberID(t *testing.T, ctx context.Context, r *Runtime) *string {
	t.Helper()
	var id string
	testenv.WaitFor(t, ctx, "the instance in its group", func() bool {
		if !r.Recovered() {
			return false
		}
		id = r.proc.MemberID()
		return id != ""
	})
	return &id
}

// A gap's timeout decided by a zombie: the group dropped the first
// instance without telling it, and the second restored the key and fired
// the timeout. The zombie fires it too, on the state it had, in a
// transaction with no input offset (no input arrived); that transaction
// must still be refused by the group, or the timeout is decided twice.
func TestRuntimeZombieTimerIsFenced(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "workflow", func(s *config.Stream) {
		// Long enough for the group to drop the first instance (its 6 s
		// session) and give the second the partition before the timeout.
		s.Limits.GapTimeout = 20 * time.Second
	})
	brokers := cluster.ListenAddrs()
	received := []kgo.RecordHeader{{Key: record.HeaderReceivedAt, Value: fmt.Appendf(nil, "%d", time.Now().UnixMilli())}}
	for _, seq := range []int{1, 3} {
		body := fmt.Appendf(nil, `{"event_id":"e%d","operation_id":"op-9","sequence":%d,"status":"running","occurred_at":"2026-11-30T10:00:00Z"}`, seq, seq)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: names.In, Key: []byte("op-9"), Value: body, Headers: received}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var zombie atomic.Pointer[string]
	answerHeartbeatsOf(cluster, &zombie)
	first := zombieRuntime(t, ctx, brokers, s, "workflow-a")
	testenv.WaitFor(t, ctx, "sequence 1 applied and 3 buffered, committed", func() bool {
		return len(committedOutcomes(t, ctx, cl, names.Outcomes)) >= 2
	})
	zombie.Store(memberID(t, ctx, first))
	zombieRuntime(t, ctx, brokers, s, "workflow-b")

	expired := func(committed bool) int {
		n := 0
		for _, r := range readTopic(t, ctx, cl, names.Outcomes, committed) {
			var o record.Outcome
			if _, err := record.DecodeOutcome(r.Value, &o); err != nil {
				t.Fatal(err)
			}
			if o.Outcome == record.Expired && o.Reason == record.ReasonGapTimeout {
				n++
			}
		}
		return n
	}
	// Both fire the timeout: the second's decision is committed, the
	// zombie's is written (uncommitted at least).
	testenv.WaitFor(t, ctx, "the gap timed out, in both instances", func() bool {
		return expired(true) >= 1 && expired(false) >= 2
	})
	time.Sleep(time.Second) // the zombie's transaction has ended, one way or the other
	if n := expired(true); n != 1 {
		t.Fatalf("the gap's timeout committed %d times, want once", n)
	}
}

// The previous owner of a partition stalls between its offset commit and
// the end of its transaction, which then commits after the group gave the
// partition to another instance. The new owner must restore the table
// with that transaction's writes (it waits for it), or a conversation gets
// one sequence twice.
func TestRuntimeRestoresOnlyOncePreviousTransactionsEnded(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "chat", nil)
	brokers := cluster.ListenAddrs()
	send := func(i int) *kgo.Record {
		return &kgo.Record{Topic: names.In, Key: []byte("c1"), Value: fmt.Appendf(nil,
			`{"event_id":"s%d","type":"message.send","conversation_id":"c1","sender_id":"u1","sender_device_id":"d","client_message_id":"m%d","body":"hi"}`, i, i)}
	}
	join := &kgo.Record{Topic: names.In, Key: []byte("c1"), Value: []byte(`{"event_id":"j","type":"member.added","conversation_id":"c1","user_id":"u1"}`)}
	if err := cl.ProduceSync(ctx, join, send(0)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var zombie atomic.Pointer[string]
	answerHeartbeatsOf(cluster, &zombie)
	// The first instance's ends of transactions wait, once held, until
	// released.
	var hold atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	var heldOnce sync.Once
	cluster.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if req := kreq.(*kmsg.EndTxnRequest); hold.Load() && req.TransactionalID == "chat-a" && req.Commit {
			heldOnce.Do(func() { close(held) })
			cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	first := zombieRuntime(t, ctx, brokers, s, "chat-a")
	testenv.WaitFor(t, ctx, "the first two decisions committed", func() bool {
		return len(committedOutcomes(t, ctx, cl, names.Outcomes)) >= 2
	})
	zombie.Store(memberID(t, ctx, first))
	hold.Store(true)
	if err := cl.ProduceSync(ctx, send(1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the first instance never ended its transaction")
	}
	// The group drops the first instance and gives the second the
	// partition, which it must not restore before the held commit.
	second := zombieRuntime(t, ctx, brokers, s, "chat-b")
	testenv.WaitFor(t, ctx, "the second instance assigned the partition", func() bool {
		described, err := kadm.NewClient(cl).DescribeGroups(ctx, naming.Prefixes{}.Group(s.Name))
		if err != nil {
			return false
		}
		g := described[naming.Prefixes{}.Group(s.Name)]
		return len(g.Members) == 1 && g.Members[0].MemberID != *zombie.Load() && g.State == "Stable"
	})
	time.Sleep(time.Second) // a restore that did not wait would be done
	if second.Recovered() {
		t.Error("the second instance restored its table while the previous owner's transaction was open")
	}
	close(release)
	testenv.WaitFor(t, ctx, "the held transaction committed", func() bool {
		return len(committedOutcomes(t, ctx, cl, names.Outcomes)) >= 3
	})
	if err := cl.ProduceSync(ctx, send(2)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "the second instance's decision committed", func() bool {
		return len(committedOutcomes(t, ctx, cl, names.Outcomes)) >= 4
	})
	seqs := map[int64]string{}
	for _, o := range committedOutcomes(t, ctx, cl, names.Outcomes) {
		if o.EventType != "message.send" || o.Outcome != record.Applied {
			continue
		}
		if prev, ok := seqs[o.Version]; ok {
			t.Errorf("conversation_seq %d assigned to %s and %s", o.Version, prev, o.EventID)
		}
		seqs[o.Version] = o.EventID
	}
	if len(seqs) != 3 {
		t.Errorf("sequences %v, want three messages", seqs)
	}
}

// The broker refuses to end a transaction (as a transaction coordinator
// that moved while a broker stalled can, with INVALID_TXN_STATE, failing
// the producer id for good): the runtime begins a new Kafka session, which
// aborts what the refused transaction wrote, and carries on; every input
// is decided once.
func TestRuntimeBeginsANewSessionWhenATransactionCannotEnd(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "presence", nil)
	refuse, refused := refuseACommit(cluster, kerr.InvalidTxnState)
	// Stopping it at the end must return no error: it rode out the
	// refused transaction.
	metrics := startRuntime(t, ctx, cluster.ListenAddrs(), s, RuntimeOptions{TransactionalID: "presence-0"})
	outcomes := func() []string { return committedOutcomeIDs(t, ctx, cl, names.Outcomes) }
	if err := cl.ProduceSync(ctx, bob(names.In, 1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "the first decision committed", func() bool { return len(outcomes()) == 1 })
	refuse()
	if err := cl.ProduceSync(ctx, bob(names.In, 2), bob(names.In, 3)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitInputsCommitted(t, ctx, cl, s, 3)
	if !refused.Load() {
		t.Fatal("no end of a transaction was refused: the test proves nothing")
	}
	if want, got := []string{"b1:applied", "b2:applied", "b3:applied"}, outcomes(); !slices.Equal(got, want) {
		t.Errorf("committed outcomes %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(metrics.sessionRestarts.WithLabelValues(s.Name)); n != 1 {
		t.Errorf("driftguard_processor_session_restarts_total = %v, want 1", n)
	}
	// The transaction that did not end was decided again: its decisions
	// are counted as made twice, their latency observed once, at the
	// commit readers see.
	if made := testutil.ToFloat64(metrics.decisions.WithLabelValues(s.Name, string(record.Applied))); made <= 3 {
		t.Errorf("%v decisions made: the refused transaction's were not decided again", made)
	}
	if n := histogramCount(t, metrics.decisionLatency.WithLabelValues(s.Name).(prometheus.Histogram)); n != 3 {
		t.Errorf("%d decision latencies observed, want one per committed decision, 3", n)
	}
}

// refuseACommit makes the fake broker answer the first commit of a
// transaction after refuse is called with code, leaving the transaction
// open; refused reports whether it did.
func refuseACommit(cluster *kfake.Cluster, code *kerr.Error) (refuse func(), refused *atomic.Bool) {
	var armed atomic.Bool
	refused = new(atomic.Bool)
	cluster.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := kreq.(*kmsg.EndTxnRequest)
		if !req.Commit || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		refused.Store(true)
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = code.Code
		return resp, nil, true
	})
	return func() { armed.Store(true) }, refused
}

// What no new Kafka session mends stops the runtime with its error: here
// the cluster refuses the instance's transactional id.
func TestRuntimeStopsWhenTheClusterRefusesItsTransactionalID(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "presence", nil)
	refuse, refused := refuseACommit(cluster, kerr.TransactionalIDAuthorizationFailed)
	r, metrics := newRuntime(t, cluster.ListenAddrs(), s, RuntimeOptions{TransactionalID: "presence-0"})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	refuse()
	if err := cl.ProduceSync(ctx, bob(names.In, 1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			t.Errorf("Run returned %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
		}
	case <-ctx.Done():
		t.Fatal("the runtime still runs after the cluster refused its transactional id")
	}
	if !refused.Load() {
		t.Error("no commit was refused")
	}
	if n := testutil.ToFloat64(metrics.sessionRestarts.WithLabelValues(s.Name)); n != 0 {
		t.Errorf("driftguard_processor_session_restarts_total = %v, want 0", n)
	}
}
