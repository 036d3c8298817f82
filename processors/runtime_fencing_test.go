package processors

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
		id, ok := soleMember(ctx, cl, s)
		return ok && id != *zombie.Load()
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

// soleMember is the member id of the group of s when the group is stable
// with one member.
func soleMember(ctx context.Context, cl *kgo.Client, s *config.Stream) (string, bool) {
	group := naming.Prefixes{}.Group(s.Name)
	described, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		return "", false
	}
	g := described[group]
	if len(g.Members) != 1 || g.State != "Stable" {
		return "", false
	}
	return g.Members[0].MemberID, true
}

// A restore reads the changelog past every transaction that wrote there
// before the group's offsets became stable, not only to the last stable
// offset of that moment: the markers of a previous owner's committed
// transaction can reach the group's offsets before the changelog. Here
// another producer's transaction, open on the changelog when the second
// instance is given the partition, deletes bob's value: the second
// instance restores only once it commits, and decides bob's next event
// without the value.
func TestRuntimeRestoresPastTransactionsOpenOnTheChangelog(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "presence", nil)
	brokers := cluster.ListenAddrs()
	first, _ := newRuntime(t, brokers, s, RuntimeOptions{TransactionalID: "changelog-a"})
	stopFirst := runRuntime(ctx, first)
	if err := cl.ProduceSync(ctx, bob(names.In, 5)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "bob's v5 decided", func() bool { return len(committedOutcomes(t, ctx, cl, names.Outcomes)) == 1 })
	if err := stopFirst(); err != nil {
		t.Fatal(err)
	}

	other, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("changelog-other"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, &kgo.Record{Topic: names.Table, Key: []byte("bob"), Partition: 0}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	second, _ := newRuntime(t, brokers, s, RuntimeOptions{TransactionalID: "changelog-b"})
	stopSecond := runRuntime(ctx, second)
	t.Cleanup(func() {
		if err := stopSecond(); err != nil {
			t.Error(err)
		}
	})
	testenv.WaitFor(t, ctx, "the second instance given the partition", func() bool { _, ok := soleMember(ctx, cl, s); return ok })
	time.Sleep(time.Second) // a restore to the last stable offset would be done
	if second.Recovered() {
		t.Error("the second instance restored its table while a transaction on the changelog was open")
	}
	if err := other.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "the second instance restored", second.Recovered)
	if err := cl.ProduceSync(ctx, bob(names.In, 3)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "bob's v3 decided", func() bool { return len(committedOutcomes(t, ctx, cl, names.Outcomes)) == 2 })
	if o := committedOutcomes(t, ctx, cl, names.Outcomes)[1]; o.Outcome != record.Applied {
		t.Errorf("bob's v3 was %s (%s), want applied: the deleted v5 was restored", o.Outcome, o.Reason)
	}
}
