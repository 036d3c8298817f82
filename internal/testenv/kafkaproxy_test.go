package testenv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// connectLog records the addresses a client connected to.
type connectLog struct {
	mu    sync.Mutex
	addrs []string
}

func (l *connectLog) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, conn net.Conn, err error) {
	if err == nil {
		l.mu.Lock()
		l.addrs = append(l.addrs, conn.RemoteAddr().String())
		l.mu.Unlock()
	}
}

func (l *connectLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.addrs)
}

// proxiedClient returns a client seeded with the proxy's addresses, closed
// at the test's end.
func proxiedClient(t *testing.T, p *KafkaProxy, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(p.Addrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// directAdmin returns an admin client of the real brokers, behind no proxy.
func directAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func createTopics(t *testing.T, ctx context.Context, adm *kadm.Client, partitions int32, names ...string) {
	t.Helper()
	resps, err := adm.CreateTopics(ctx, partitions, 1, nil, names...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// warmUp writes a record to each of topics through cl and waits for its
// ack: a topic the real broker has just created can refuse the first
// writes, and an ack that is an error would be retried out of the order a
// test asserts.
func warmUp(t *testing.T, ctx context.Context, cl *kgo.Client, topics ...string) {
	t.Helper()
	for _, topic := range topics {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("warm-up")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// readCommitted reads the values of topic's first n committed records, as
// a read_committed consumer of the real brokers sees them, or fewer when
// ctx ends first.
func readCommitted(t *testing.T, ctx context.Context, brokers []string, topic string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var values []string
	for len(values) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { values = append(values, string(r.Value)) })
	}
	return values
}

func endOffset(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset
}

func TestKafkaProxyKeepsClientsBehindIt(t *testing.T) {
	OnBothBrokers(t, func(t *testing.T, brokers []string) {
		ctx := Context(t, time.Minute)
		p := NewKafkaProxy(t, brokers)
		front := func(host string, port int32) bool {
			return slices.Contains(p.Addrs(), net.JoinHostPort(host, strconv.Itoa(int(port))))
		}
		var connects connectLog
		cl := proxiedClient(t, p, kgo.WithHooks(&connects))
		adm := kadm.NewClient(cl)
		topic := UniqueName("proxy_meta")
		createTopics(t, ctx, adm, 1, topic)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}

		meta, err := adm.BrokerMetadata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range meta.Brokers {
			if !front(b.Host, b.Port) {
				t.Errorf("metadata names broker %d at %s:%d, not at the proxy %v", b.NodeID, b.Host, b.Port, p.Addrs())
			}
		}
		// A new broker makes its group and transaction topics on the
		// first look-up, and answers COORDINATOR_NOT_AVAILABLE until then.
		find := func(lookup func(context.Context, ...string) kadm.FindCoordinatorResponses, name string) kadm.FindCoordinatorResponses {
			var resps kadm.FindCoordinatorResponses
			Poll(ctx, func() bool {
				resps = lookup(ctx, name)
				for _, c := range resps {
					if errors.Is(c.Err, kerr.CoordinatorNotAvailable) {
						return false
					}
				}
				return true
			})
			return resps
		}
		for what, resps := range map[string]kadm.FindCoordinatorResponses{
			"group": find(adm.FindGroupCoordinators, UniqueName("proxy_group")),
			"txn":   find(adm.FindTxnCoordinators, UniqueName("proxy_txn")),
		} {
			for _, c := range resps {
				if c.Err != nil || !front(c.Host, c.Port) {
					t.Errorf("the %s coordinator of %s is %s:%d (%v), not at the proxy %v", what, c.Name, c.Host, c.Port, c.Err, p.Addrs())
				}
			}
		}
		cluster, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if len(cluster.Brokers) == 0 {
			t.Error("DescribeCluster names no broker")
		}
		for _, b := range cluster.Brokers {
			if !front(b.Host, b.Port) {
				t.Errorf("DescribeCluster names broker %d at %s:%d, not at the proxy %v", b.NodeID, b.Host, b.Port, p.Addrs())
			}
		}

		addrs := connects.all()
		for _, a := range addrs {
			if !slices.Contains(p.Addrs(), a) {
				t.Errorf("the client connected to %s, not to the proxy %v", a, p.Addrs())
			}
		}
		// The proxy counts a connection after the client's dial returns.
		WaitFor(t, ctx, fmt.Sprintf("the proxy to count the client's %d connections", len(addrs)), func() bool {
			return p.Connections() == len(addrs)
		})
	})
}

// events records what happened, in order.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(t *testing.T, what string, err error) {
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
	e.mu.Lock()
	e.got = append(e.got, what)
	e.mu.Unlock()
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

func TestKafkaProxyHoldsAcksOfHeldTopics(t *testing.T) {
	OnBothBrokers(t, func(t *testing.T, brokers []string) {
		ctx := Context(t, time.Minute)
		held, free := UniqueName("proxy_held"), UniqueName("proxy_free")
		direct := directAdmin(t, brokers)
		createTopics(t, ctx, direct, 1, held, free)
		p := NewKafkaProxy(t, brokers)
		heldClient, freeClient := proxiedClient(t, p), proxiedClient(t, p)
		record := func(topic, value string) *kgo.Record { return &kgo.Record{Topic: topic, Value: []byte(value)} }
		warmUp(t, ctx, heldClient, held, free)

		p.HoldAcks(held)
		var happened events
		heldClient.Produce(ctx, record(held, "h"), func(_ *kgo.Record, err error) { happened.add(t, "held acked", err) })
		WaitFor(t, ctx, "the held ack to reach the proxy", func() bool { return p.Holding() == 1 })
		if n := endOffset(t, ctx, direct, held); n != 2 {
			t.Errorf("the held topic ends at %d while its ack is held, want 2: the broker writes, only the ack waits", n)
		}

		// Another client's connection goes on.
		happened.add(t, "free acked", freeClient.ProduceSync(ctx, record(free, "f")).FirstErr())
		// The held client's connection answers in order: its next ack
		// waits behind the held one, whatever topic it is for.
		heldClient.Produce(ctx, record(free, "f2"), func(_ *kgo.Record, err error) { happened.add(t, "free acked behind the held ack", err) })
		if got := happened.all(); !slices.Equal(got, []string{"free acked"}) {
			t.Fatalf("while held: %v, want only the other client's ack", got)
		}

		p.ReleaseAcks()
		if err := heldClient.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := happened.all(), []string{"free acked", "held acked", "free acked behind the held ack"}; !slices.Equal(got, want) {
			t.Errorf("acks %v, want %v", got, want)
		}
		if n := p.Holding(); n != 0 {
			t.Errorf("%d frames held after the release", n)
		}
	})
}

// A client that goes away while its ack is held, as a killed process
// would, leaves nothing held behind, and its successor under the same
// transactional id commits while the dead one's records stay uncommitted:
// what the fault test does with driftguard binaries.
func TestKafkaProxyLetsGoOfADeadClientsHeldAck(t *testing.T) {
	OnBothBrokers(t, func(t *testing.T, brokers []string) {
		ctx := Context(t, time.Minute)
		topic, txnID := UniqueName("proxy_dead"), UniqueName("proxy_dead_txn")
		direct := directAdmin(t, brokers)
		createTopics(t, ctx, direct, 1, topic)
		p := NewKafkaProxy(t, brokers)

		// Kafka 4.0's produce names topics by name, 4.1's by id; the
		// other tests take the newest.
		dead, err := kgo.NewClient(kgo.SeedBrokers(p.Addrs()...), kgo.TransactionalID(txnID), kgo.MaxVersions(kversion.V4_0_0()))
		if err != nil {
			t.Fatal(err)
		}
		warmUp(t, ctx, proxiedClient(t, p), topic)
		p.HoldAcks(topic)
		if err := dead.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		dead.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("dead")}, nil)
		WaitFor(t, ctx, "the dead client's ack to be held", func() bool { return p.Holding() == 1 })
		dead.Close()
		WaitFor(t, ctx, "the proxy to let go of the dead client's ack", func() bool { return p.Holding() == 0 })
		p.ReleaseAcks()

		successor := proxiedClient(t, p, kgo.TransactionalID(txnID))
		Transact(t, ctx, successor, true, &kgo.Record{Topic: topic, Value: []byte("successor")})
		if got := readCommitted(t, ctx, brokers, topic, 2); !slices.Equal(got, []string{"warm-up", "successor"}) {
			t.Errorf("committed %v, want the warm-up and the successor's record", got)
		}
		if n := endOffset(t, ctx, direct, topic); n != 5 {
			t.Errorf("the topic ends at %d, want 5: the warm-up, the dead record, its abort marker, the successor's and its commit marker", n)
		}
	})
}

func TestKafkaProxyPauseStopsTrafficUntilResume(t *testing.T) {
	OnBothBrokers(t, func(t *testing.T, brokers []string) {
		ctx := Context(t, time.Minute)
		topic := UniqueName("proxy_pause")
		direct := directAdmin(t, brokers)
		createTopics(t, ctx, direct, 1, topic)
		p := NewKafkaProxy(t, brokers)
		cl := proxiedClient(t, p)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("before")}).FirstErr(); err != nil {
			t.Fatal(err)
		}

		p.Pause()
		var resumed, ackedBeforeResume atomic.Bool
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("paused")}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
			ackedBeforeResume.Store(!resumed.Load())
		})
		WaitFor(t, ctx, "the produce request to stop at the proxy", func() bool { return p.Holding() > 0 })
		if n := endOffset(t, ctx, direct, topic); n != 1 {
			t.Errorf("the topic ends at %d while paused, want 1: the paused request must not reach the broker", n)
		}
		resumed.Store(true)
		p.Resume()
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if ackedBeforeResume.Load() {
			t.Error("acknowledged before Resume")
		}
		if n := endOffset(t, ctx, direct, topic); n != 2 {
			t.Errorf("the topic ends at %d after Resume, want 2", n)
		}
	})
}

func TestKafkaProxyCarriesTransactionsAndGroups(t *testing.T) {
	OnBothBrokers(t, func(t *testing.T, brokers []string) {
		ctx := Context(t, 2*time.Minute)
		in, out, group := UniqueName("proxy_in"), UniqueName("proxy_out"), UniqueName("proxy_group")
		direct := directAdmin(t, brokers)
		createTopics(t, ctx, direct, 2, in, out)
		p := NewKafkaProxy(t, brokers)

		producer := proxiedClient(t, p, kgo.TransactionalID(UniqueName("proxy_producer")))
		var committed, aborted []*kgo.Record
		for i := range 20 {
			committed = append(committed, &kgo.Record{Topic: in, Key: []byte(strconv.Itoa(i)), Value: []byte("c" + strconv.Itoa(i))})
		}
		for i := range 5 {
			aborted = append(aborted, &kgo.Record{Topic: in, Key: []byte(strconv.Itoa(i)), Value: []byte("a" + strconv.Itoa(i))})
		}
		Transact(t, ctx, producer, true, committed...)
		Transact(t, ctx, producer, false, aborted...)

		// Consume, produce and commit the offsets in one transaction, as
		// the processors do.
		sess, err := kgo.NewGroupTransactSession(
			kgo.SeedBrokers(p.Addrs()...),
			kgo.TransactionalID(UniqueName("proxy_session")),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(in),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sess.Close)
		var consumed []string
		next := map[int32]int64{} // per partition, past the last consumed
		for len(consumed) < len(committed) {
			fetches := sess.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("consumed %d of %d: %v", len(consumed), len(committed), err)
			}
			fetches.EachError(func(topic string, partition int32, err error) { t.Errorf("fetch %s/%d: %v", topic, partition, err) })
			if fetches.NumRecords() == 0 {
				continue
			}
			if err := sess.Begin(); err != nil {
				t.Fatal(err)
			}
			fetches.EachRecord(func(r *kgo.Record) {
				consumed = append(consumed, string(r.Value))
				next[r.Partition] = r.Offset + 1
				sess.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value}, nil)
			})
			ok, err := sess.End(ctx, kgo.TryCommit)
			if err != nil || !ok {
				t.Fatalf("commit: %v %v", ok, err)
			}
		}
		var want []string
		for _, r := range committed {
			want = append(want, string(r.Value))
		}
		slices.Sort(consumed)
		slices.Sort(want)
		if !slices.Equal(consumed, want) {
			t.Errorf("consumed %v, want the committed records %v", consumed, want)
		}

		// Offsets committed in a transaction show once the broker has
		// written its commit markers, a moment after End returns.
		var offsets kadm.OffsetResponses
		if !Poll(ctx, func() bool {
			offsets, err = direct.FetchOffsets(ctx, group)
			for partition, at := range next {
				if o, _ := offsets.Lookup(in, partition); err != nil || o.At != at {
					return false
				}
			}
			return true
		}) {
			t.Errorf("the group committed %v (%v), want %v", offsets, err, next)
		}

		// What the session wrote is there, committed.
		written := readCommitted(t, ctx, brokers, out, len(want))
		slices.Sort(written)
		if !slices.Equal(written, want) {
			t.Errorf("committed output %v, want %v", written, want)
		}
	})
}

// produceFrame is a produce request frame as franz-go writes it.
func produceFrame(version int16, acks int16, topic string, id [16]byte) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks = version, acks
	t := kmsg.NewProduceRequestTopic()
	t.Topic, t.TopicID = topic, id
	p := kmsg.NewProduceRequestTopicPartition()
	p.Records = []byte("batch")
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return kmsg.NewRequestFormatter(kmsg.FormatterClientID("driftguard")).AppendRequest(nil, req, 42)
}

func TestParseRequestFindsProducedTopics(t *testing.T) {
	id := [16]byte{1, 2, 3}
	for _, tc := range []struct {
		name     string
		frame    []byte
		topics   []string
		ids      [][16]byte
		answered bool
	}{
		{"v7 by name", produceFrame(7, -1, "t", [16]byte{}), []string{"t"}, nil, true},
		{"v12 flexible, by name", produceFrame(12, -1, "t", [16]byte{}), []string{"t"}, nil, true},
		{"v13 by id", produceFrame(13, -1, "", id), nil, [][16]byte{id}, true},
		{"acks=0 is never answered", produceFrame(9, 0, "t", [16]byte{}), []string{"t"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			corr, req, answered, err := parseRequest(tc.frame)
			if err != nil {
				t.Fatal(err)
			}
			if corr != 42 || req.key != int16(kmsg.Produce) || answered != tc.answered ||
				!slices.Equal(req.topics, tc.topics) || !slices.Equal(req.topicIDs, tc.ids) {
				t.Errorf("got corr %d key %d answered %v topics %v ids %v", corr, req.key, answered, req.topics, req.topicIDs)
			}
		})
	}
	// A topic named by id is held by name once a Metadata answer told the
	// proxy the id.
	p := &KafkaProxy{held: map[string]bool{"t": true}, topicNames: map[[16]byte]string{}}
	byID := &request{topicIDs: [][16]byte{id}}
	if p.holdsLocked(byID) {
		t.Error("held before the id is known")
	}
	p.topicNames[id] = "t"
	if !p.holdsLocked(byID) {
		t.Error("not held once the id is known")
	}
}

// responseFrame is resp as a broker sends it, answering correlation id 7.
func responseFrame(resp kmsg.Response) []byte {
	frame := []byte{0, 0, 0, 0, 0, 0, 0, 7}
	if resp.IsFlexible() {
		frame = append(frame, 0) // no tagged fields in the header
	}
	frame = resp.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	return frame
}

// The leader hints of produce and fetch answers (KIP-951) come only when a
// partition moves, which the broker tests do not make happen: here they
// are built by hand.
func TestKafkaProxyRewritesLeaderHints(t *testing.T) {
	p := newKafkaProxy(t)
	isFront := func(host string, port int32) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, ln := range p.fronts {
			if a := ln.Addr().(*net.TCPAddr); a.IP.String() == host && int32(a.Port) == port {
				return true
			}
		}
		return false
	}

	produce := kmsg.NewPtrProduceResponse()
	produce.Version = 11
	produce.Brokers = []kmsg.ProduceResponseBroker{{NodeID: 2, Host: "kafka-2.example", Port: 9092}}
	out, err := p.rewrite(request{key: int16(kmsg.Produce), version: 11}, responseFrame(produce))
	if err != nil {
		t.Fatal(err)
	}
	got := kmsg.NewPtrProduceResponse()
	got.Version = 11
	if err := got.ReadFrom(out[9:]); err != nil {
		t.Fatal(err)
	}
	if b := got.Brokers[0]; b.NodeID != 2 || !isFront(b.Host, b.Port) {
		t.Errorf("the leader hint names %d at %s:%d, not the proxy", b.NodeID, b.Host, b.Port)
	}
	if _, ok := p.fronts["kafka-2.example:9092"]; !ok {
		t.Errorf("no listener stands in for kafka-2.example:9092: %v", p.fronts)
	}

	// An answer without hints, and a coordinator that was not found, pass
	// byte for byte.
	fetch := kmsg.NewPtrFetchResponse()
	fetch.Version = 16
	find := kmsg.NewPtrFindCoordinatorResponse()
	find.Version = 4
	find.Coordinators = []kmsg.FindCoordinatorResponseCoordinator{{Key: "g", NodeID: -1, Host: "", Port: -1, ErrorCode: 15}}
	for _, tc := range []struct {
		req  request
		resp kmsg.Response
	}{
		{request{key: int16(kmsg.Fetch), version: 16}, fetch},
		{request{key: int16(kmsg.FindCoordinator), version: 4}, find},
	} {
		in := responseFrame(tc.resp)
		out, err := p.rewrite(tc.req, in)
		if err != nil || !bytes.Equal(in, out) {
			t.Errorf("%s: %v, changed from %x to %x", kmsg.NameForKey(tc.req.key), err, in, out)
		}
	}
}

// FuzzParseRequest feeds the proxy's frame reader and request parser
// arbitrary bytes: a broken frame is an error, never a panic.
func FuzzParseRequest(f *testing.F) {
	f.Add(produceFrame(3, -1, "t", [16]byte{}))
	f.Add(produceFrame(12, -1, "t", [16]byte{}))
	f.Add(produceFrame(13, 1, "", [16]byte{9}))
	f.Add(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrMetadataRequest(), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		frame, err := readFrame(bytes.NewReader(data))
		if err != nil {
			return
		}
		_, req, _, err := parseRequest(frame)
		if err == nil && req.key == int16(kmsg.Produce) && len(req.topics)+len(req.topicIDs) > len(frame) {
			t.Errorf("%d topics from a %d-byte frame", len(req.topics)+len(req.topicIDs), len(frame))
		}
	})
}
