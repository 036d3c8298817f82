package view_test

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/processors/decide"
	"github.com/driftguard/driftguard/view"
)

// Sizes of the view test: enough keys that every partition is written,
// few enough that it takes seconds.
const (
	viewUsers      = 60
	viewPartitions = 3
	// abortedVersion marks what the aborted transaction writes: no
	// committed record comes near it.
	abortedVersion = 1_000_000
)

// A stock goka view of `<stream>.state` and of `<stream>-table`, read
// committed with Kafka's placement of keys, against the real broker and
// the shipped runtime: views started while the processor decides webhooks
// recover, and keep up while the processor dies mid-transaction and
// another takes over; views started once it is idle recover too (where the last offset
// of every partition would otherwise be a commit marker); each key's value
// ends equal to the last record a read_committed reader sees of it, and no
// view ever shows what an aborted transaction wrote to those topics.
func TestGokaViewReadsCommittedTables(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := testenv.Context(t, 4*time.Minute)
	s := testenv.Shipped(t, "presence")
	s.Name = testenv.UniqueName("goka_view")
	s.Limits.Partitions = viewPartitions
	cl := testenv.Topics(t, ctx, testenv.OnlyStream(t, s), brokers)
	t.Cleanup(cl.Close)
	names := naming.Prefixes{}.For(s.Name)

	// The first processor reaches the broker through a proxy, which kills
	// it mid-transaction later; it logs nowhere, as it outlives the test.
	proxy := testenv.NewKafkaProxy(t, brokers)
	first, err := processors.NewRuntime(kafka.Conn{Brokers: proxy.Addrs()}, s, processors.Options{},
		processors.RuntimeOptions{TransactionalID: s.Name + "-0"})
	if err != nil {
		t.Fatal(err)
	}
	firstCtx, killFirst := context.WithCancel(ctx)
	go func() { _ = first.Run(firstCtx) }()

	webhooks := func(version int64) {
		t.Helper()
		var recs []*kgo.Record
		for u := range viewUsers {
			user := fmt.Sprintf("user-%d", u)
			body := testenv.Presence{EventID: fmt.Sprintf("%s-v%d", user, version), User: user, Version: version,
				Status: []string{"ONLINE", "AWAY", "BUSY"}[int(version)%3]}.Body()
			recs = append(recs, &kgo.Record{Topic: names.In, Key: []byte(user), Value: body})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	webhooks(1)
	waitDecided(t, ctx, cl, s)
	abortWrites(t, ctx, brokers, names)
	webhooks(2)

	// Views started while the processor decides.
	watch := &poisonWatch{}
	flowing := startViews(t, ctx, brokers, names, watch, storage.MemoryBuilder())
	webhooks(3)
	webhooks(4)
	flowing.waitRecovered(t, "while webhooks were decided")
	waitDecided(t, ctx, cl, s)

	// The processor dies with a transaction open (its writes' acks held),
	// and one with its transactional id takes over: it aborts that
	// transaction and decides its inputs again.
	proxy.HoldAcks(names.Table)
	webhooks(5)
	testenv.WaitFor(t, ctx, "the first processor's transaction written, not acknowledged", func() bool { return proxy.Holding() > 0 })
	proxy.Close()
	killFirst()
	second, err := processors.NewRuntime(kafka.Conn{Brokers: brokers}, s, processors.Options{Logger: testenv.Logger(t)},
		processors.RuntimeOptions{TransactionalID: s.Name + "-0"})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, ctx, "the processor that took over", second.Run)
	waitDecided(t, ctx, cl, s)

	// Views started on the idle pipeline, on goka's default storage
	// (LevelDB), where a mark's delete of the empty key must be harmless too.
	idle := startViews(t, ctx, brokers, names, watch, storage.DefaultBuilder(t.TempDir()))
	idle.waitRecovered(t, "on an idle pipeline")

	wantState, wantTable := committedLast[view.State](t, ctx, cl, names.State), committedLast[view.Entity](t, ctx, cl, names.Table)
	if len(wantState) != viewUsers || len(wantTable) != viewUsers {
		t.Fatalf("%d keys in %s and %d in %s, want %d each", len(wantState), names.State, len(wantTable), names.Table, viewUsers)
	}
	for _, vs := range []*views{flowing, idle} {
		testenv.WaitFor(t, ctx, vs.name+": every key's committed state and table value", func() bool {
			return vs.matches(t, wantState, wantTable) == ""
		})
		if diff := vs.onlyKeys(t, wantState, wantTable); diff != "" {
			t.Error(diff)
		}
	}
	if seen := watch.seen(); seen != "" {
		t.Fatal(seen)
	}
}

// runUntilCleanup runs run until the test ends, which then stops it and
// fails on its error.
func runUntilCleanup(t *testing.T, ctx context.Context, what string, run func(context.Context) error) {
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}

// waitDecided waits until the group of s has committed every input
// written so far: its offset of each partition of the input is the
// partition's end.
func waitDecided(t *testing.T, ctx context.Context, cl *kgo.Client, s *config.Stream) {
	t.Helper()
	adm, names := kadm.NewClient(cl), naming.Prefixes{}.For(s.Name)
	ends, err := adm.ListEndOffsets(ctx, names.In)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "every input decided", func() bool {
		committed, err := adm.FetchOffsetsForTopics(ctx, naming.Prefixes{}.Group(s.Name), names.In)
		caughtUp := err == nil
		ends.Each(func(end kadm.ListedOffset) {
			o, ok := committed.Lookup(names.In, end.Partition)
			caughtUp = caughtUp && ok && o.At == end.Offset
		})
		return caughtUp
	})
}

// abortWrites writes a state record and a table value of every user, at
// abortedVersion, in a transaction it aborts.
func abortWrites(t *testing.T, ctx context.Context, brokers []string, names naming.Topics) {
	t.Helper()
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.TransactionalID(names.State+"-aborter"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for u := range viewUsers {
		user := fmt.Sprintf("user-%d", u)
		st := record.State{Stream: "aborted", Key: user, Version: abortedVersion, State: []byte(`{"presence":"ABORTED"}`)}
		table, err := view.TableCodec{}.Encode(&view.Entity{Row: decide.Row{Version: abortedVersion}, State: []byte(`{"presence":"ABORTED"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx,
			&kgo.Record{Topic: names.State, Key: []byte(user), Value: record.AppendState(nil, &st)},
			&kgo.Record{Topic: names.Table, Key: []byte(user), Value: table}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}

// views are a goka view of the state topic and one of the table, run
// until the test ends, their values watched for aborted writes.
type views struct {
	name         string
	brokers      []string
	started      time.Time
	state, table *goka.View
}

func startViews(t *testing.T, ctx context.Context, brokers []string, names naming.Topics, watch *poisonWatch, store storage.Builder) *views {
	t.Helper()
	newView := func(topic string, codec goka.Codec) *goka.View {
		v, err := goka.NewView(brokers, goka.Table(topic), codec,
			append(view.Options(nil), goka.WithViewStorageBuilder(store), goka.WithViewLogger(testLogger{t}))...)
		if err != nil {
			t.Fatal(err)
		}
		runUntilCleanup(t, ctx, "the view of "+topic, v.Run)
		return v
	}
	vs := &views{name: fmt.Sprintf("views started at %s", time.Now().Format(time.StampMilli)), started: time.Now(), brokers: brokers,
		state: newView(names.State, view.StateCodec{}), table: newView(names.Table, view.TableCodec{})}
	watchCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); watch.watch(watchCtx, vs) }()
	t.Cleanup(func() { stop(); wg.Wait() })
	return vs
}

// waitRecovered waits, with a generous deadline, for both views to have
// recovered.
func (vs *views) waitRecovered(t *testing.T, when string) {
	t.Helper()
	const deadline = 90 * time.Second
	for _, v := range []*goka.View{vs.state, vs.table} {
		select {
		case <-v.WaitRunning():
		case <-time.After(deadline):
			logTails(t, vs.brokers, v.Topic())
			t.Fatalf("the goka view of %s started %s had not recovered after %s", v.Topic(), when, deadline)
		}
	}
	t.Logf("goka views started %s recovered within %s", when, time.Since(vs.started).Round(time.Millisecond))
}

// matches says how the views differ from the committed values, "" when
// they do not.
func (vs *views) matches(t *testing.T, wantState map[string]*view.State, wantTable map[string]*view.Entity) string {
	t.Helper()
	return cmp.Or(differs(t, vs.name, vs.state, wantState), differs(t, vs.name, vs.table, wantTable))
}

// differs says how the values of v differ from want, "" when they do not.
func differs[T any](t *testing.T, name string, v *goka.View, want map[string]*T) string {
	t.Helper()
	for key, w := range want {
		got, err := v.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		if g, _ := got.(*T); g == nil || !reflect.DeepEqual(g, w) {
			return fmt.Sprintf("%s: the value of %s in the view of %s is %+v, committed %+v", name, key, v.Topic(), got, w)
		}
	}
	return ""
}

// onlyKeys says which keys the views hold beyond the committed ones (a
// view mark's empty key among them), "" when none.
func (vs *views) onlyKeys(t *testing.T, wantState map[string]*view.State, wantTable map[string]*view.Entity) string {
	t.Helper()
	for _, c := range []struct {
		v    *goka.View
		want func(string) bool
	}{
		{vs.state, func(k string) bool { return wantState[k] != nil }},
		{vs.table, func(k string) bool { return wantTable[k] != nil }},
	} {
		it, err := c.v.Iterator()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for it.Next() {
			n++
			if !c.want(it.Key()) {
				it.Release()
				return fmt.Sprintf("%s: the view of %s holds key %q, which no committed record has", vs.name, c.v.Topic(), it.Key())
			}
		}
		it.Release()
		if n != viewUsers {
			return fmt.Sprintf("%s: the view of %s holds %d keys, want %d", vs.name, c.v.Topic(), n, viewUsers)
		}
	}
	return ""
}

// poisonWatch reads every key of views over and over while the test runs
// and keeps the first value an aborted transaction wrote.
type poisonWatch struct {
	mu    sync.Mutex
	first string
}

func (w *poisonWatch) watch(ctx context.Context, vs *views) {
	for ctx.Err() == nil {
		for u := range viewUsers {
			key := fmt.Sprintf("user-%d", u)
			if v, err := vs.state.Get(key); err == nil {
				if st, ok := v.(*view.State); ok && st.Version >= abortedVersion {
					w.saw(fmt.Sprintf("%s: the view of the state showed an aborted write: %s %+v", vs.name, key, st))
				}
			}
			if v, err := vs.table.Get(key); err == nil {
				if e, ok := v.(*view.Entity); ok && e.Version >= abortedVersion {
					w.saw(fmt.Sprintf("%s: the view of the table showed an aborted write: %s %+v", vs.name, key, e))
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (w *poisonWatch) saw(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first == "" {
		w.first = what
	}
}

func (w *poisonWatch) seen() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// committedLast reads topic to its last stable offsets as a read_committed
// reader does and decodes each key's last value with the view's codec;
// view marks are passed over.
func committedLast[T any](t *testing.T, ctx context.Context, cl *kgo.Client, topic string) map[string]*T {
	t.Helper()
	var codec goka.Codec = view.StateCodec{}
	if _, table := any(new(T)).(*view.Entity); table {
		codec = view.TableCodec{}
	}
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	// next is each partition's next offset to read; read to its end.
	next := map[int32]int64{}
	readToEnd := func() bool {
		done := true
		ends.Each(func(o kadm.ListedOffset) { done = done && next[o.Partition] >= o.Offset })
		return done
	}
	rd, err := kafka.NewClient(kafka.Conn{Brokers: cl.OptValue(kgo.SeedBrokers).([]string)},
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	last := map[string]*T{}
	for !readToEnd() {
		fetches := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v", topic, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() || view.IsMark(r.Key, r.Value) {
				return
			}
			v, err := codec.Decode(r.Value)
			if err != nil {
				t.Fatalf("%s/%d@%d: %v", topic, r.Partition, r.Offset, err)
			}
			last[string(r.Key)] = v.(*T)
		})
	}
	return last
}

// testLogger sends goka's log lines to the test log.
type testLogger struct{ t *testing.T }

func (l testLogger) Print(v ...any)                 { l.t.Log(v...) }
func (l testLogger) Println(v ...any)               { l.t.Log(v...) }
func (l testLogger) Printf(format string, v ...any) { l.t.Logf(format, v...) }

// logTails logs the last records of each partition of topic, markers
// included, and its end and last stable offsets: what a view that does
// not recover waits for.
func logTails(t *testing.T, brokers []string, topic string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		t.Log(err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	ends, _ := adm.ListEndOffsets(ctx, topic)
	stable, _ := adm.ListCommittedOffsets(ctx, topic)
	ends.Each(func(o kadm.ListedOffset) {
		lso, _ := stable.Lookup(topic, o.Partition)
		t.Logf("%s/%d: end %d, last stable offset %d", topic, o.Partition, o.Offset, lso.Offset)
	})
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if end, _ := ends.Lookup(topic, r.Partition); r.Offset >= end.Offset-4 {
				t.Logf("%s/%d@%d: marker %v, transactional %v, producer %d, key %q, tombstone %v",
					topic, r.Partition, r.Offset, r.Attrs.IsControl(), r.Attrs.IsTransactional(), r.ProducerID, r.Key, r.Value == nil)
			}
		})
	}
}
