package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/oncall"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/processors/decide"
	"github.com/driftguard/driftguard/processors/decide/decidetest"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// oncallRig is the shipped catalogue under a topic and group prefix of
// its own, its processors running in this process on the real broker,
// and a config file the commands load.
type oncallRig struct {
	ctx        context.Context
	cfg        *config.Config
	configFile string
	conn       kafka.Conn
	cl         *kgo.Client
}

// newOncallRig writes streamsYAML (the `streams:` overrides) under a
// unique prefix, creates the topics and runs the processors; withSink
// also runs the ClickHouse sink into a database of its own.
func newOncallRig(t *testing.T, ctx context.Context, streamsYAML string, withSink bool) *oncallRig {
	t.Helper()
	prefix := testenv.UniqueName("oncall") + "."
	yaml := fmt.Sprintf("kafka:\n  brokers: [%s]\n  topic_prefix: %s\n  group_prefix: %s\nprocessing:\n  timer_tick: 100ms\nstreams:\n%s",
		strings.Join(testenv.Kafka(t), ", "), prefix, prefix, streamsYAML)
	r := &oncallRig{ctx: ctx, configFile: testenv.WriteConfig(t, t.TempDir(), yaml)}
	cfg, err := config.Load(r.configFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.cfg = cfg
	if withSink {
		cfg.ClickHouse.Addr = testenv.ClickHouse(t)
		cfg.ClickHouse.Database = testenv.UniqueName("dg_oncall")
		cfg.ClickHouse.BatchPeriod = 100 * time.Millisecond
		var ch driver.Conn
		ch, r.cl = prepare(t, ctx, cfg, cfg.Kafka.Brokers)
		runServices(t, ctx, "sink", sinkch.New(sinkch.Options{Config: cfg, Conn: ch, Logger: testenv.Logger(t)}))
	} else {
		r.cl = testenv.Topics(t, ctx, cfg, cfg.Kafka.Brokers)
	}
	t.Cleanup(r.cl.Close)
	if r.conn, err = kafka.Connect(cfg, nil); err != nil {
		t.Fatal(err)
	}
	runServices(t, ctx, "processors", processors.NewService(processors.ServiceOptions{Config: cfg, Logger: testenv.Logger(t), InMemoryTables: true}))
	return r
}

// produce writes bodies of stream to `<stream>.in` as ingest does,
// received at the given times, in order, and returns the events as the
// processor reads them, at the positions they were written to.
func (r *oncallRig) produce(t *testing.T, stream string, bodies [][]byte, receivedAtMs []int64) []decide.Event {
	t.Helper()
	s := r.cfg.Streams[stream]
	rules := decide.For(s)
	names := r.cfg.Kafka.Naming().For(stream)
	var recs []*kgo.Record
	var evs []decide.Event
	for i, body := range bodies {
		ev := readEvent(t, rules, body)
		ev.ReceivedAtMs = receivedAtMs[i]
		in := kafka.NewInput(names.In, []byte(stream), []byte("test"), body,
			kafka.InputFields{Key: ev.Key, EventID: ev.EventID, Type: ev.Type}, time.UnixMilli(ev.ReceivedAtMs))
		recs = append(recs, &in.Record)
		evs = append(evs, ev)
	}
	res := r.cl.ProduceSync(r.ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	for i, pr := range res {
		evs[i].InputPartition, evs[i].InputOffset = pr.Record.Partition, pr.Record.Offset
	}
	return evs
}

func readEvent(t *testing.T, rules *decide.Rules, body []byte) decide.Event {
	t.Helper()
	doc, err := envelope.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	defer doc.Release()
	ev, err := rules.Read(doc, "")
	if err != nil {
		t.Fatal(err)
	}
	ev.Body = body
	return ev
}

// command runs a driftguard command on the rig's config file and returns
// its output, failing the test unless it exits 0.
func (r *oncallRig) command(t *testing.T, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{args[0], "--config", r.configFile}, args[1:]...)
	if code := run(r.ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("driftguard %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	}
	return out.Bytes()
}

func (r *oncallRig) explain(t *testing.T, stream, id string) oncall.Explanation {
	t.Helper()
	x, err := oncall.Explain(r.ctx, r.conn, r.cfg.Kafka.Naming(), stream, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// toolDecision is what a test compares of one decision.
type toolDecision struct {
	EventID, Key   string
	Outcome        record.Result
	Reason         record.Reason
	Version, Gap   int64
	BufferDepth    int
	MessageID      string
	Partition      int32
	Offset         int64
	PayloadMatches bool
}

// inputAt names an input by its position in `<stream>.in`.
type inputAt struct {
	partition int32
	offset    int64
}

// decisionOf is what is compared of o; PayloadMatches tells whether its
// payload is the body written at its input position.
func decisionOf(o record.Outcome, bodies map[inputAt][]byte) toolDecision {
	body := bodies[inputAt{o.InputPartition, o.InputOffset}]
	return toolDecision{EventID: o.EventID, Key: o.Key, Outcome: o.Outcome, Reason: o.Reason, Version: o.Version, Gap: o.Gap,
		BufferDepth: o.BufferDepth, MessageID: o.MessageID, Partition: o.InputPartition, Offset: o.InputOffset,
		PayloadMatches: o.EventID == "" && o.Payload == nil || body != nil && testenv.SameJSON(o.Payload, body)}
}

func decisionsOf(outs []record.Outcome, bodies map[inputAt][]byte) []toolDecision {
	ds := make([]toolDecision, len(outs))
	for i, o := range outs {
		ds[i] = decisionOf(o, bodies)
	}
	return ds
}

// Expired orphans and buffer overflows go to the DLQ; redriven, they come
// back into `<stream>.in` and are decided again by the rules (the orphan
// applies now that its parent exists, the overflow once its gap is
// filled); a dry run writes nothing; a second redrive adds nothing, and a
// copy of a redriven record (two runs at once) is decided a duplicate.
// Then the filters, on the same rig (redriveFilters).
func TestRedriveOrphansAndOverflows(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	// A TTL long enough for an operator's release or reset to come first;
	// an orphan expires at once when it was received longer ago.
	r := newOncallRig(t, ctx, `  orders: {limits: {partitions: 2}, parent: {ttl: 1h}}
  workflow: {limits: {partitions: 2, buffer: 1}}
`, false)
	now := time.Now().UnixMilli()
	at := func(n int) []int64 { return slices.Repeat([]int64{now}, n) }
	step := func(seq int) []byte {
		return fmt.Appendf(nil, `{"event_id":"wf-%d","operation_id":"op1","sequence":%d,"status":"running","occurred_at":"2026-01-01T00:00:00Z"}`, seq, seq)
	}
	pay := []byte(`{"event_id":"pay-1","event_type":"order.payment_received","parent_id":"o1","payload":{"amount":12}}`)
	r.produce(t, "orders", [][]byte{pay}, []int64{now - 2*time.Hour.Milliseconds()})
	// Step 3 waits for 2 in the buffer (of one), step 4 overflows.
	r.produce(t, "workflow", [][]byte{step(1), step(3), step(4)}, at(3))

	testenv.WaitFor(t, ctx, "the orphan and the overflow in the DLQ", func() bool {
		return r.explain(t, "orders", "pay-1").Where == oncall.WhereDeadLetter && r.explain(t, "workflow", "wf-4").Where == oncall.WhereDeadLetter
	})
	// The parent comes, the gap is filled: now both would apply.
	r.produce(t, "orders", [][]byte{[]byte(`{"event_id":"order-1","event_type":"order.created","order_id":"o1","payload":{}}`)}, at(1))
	r.produce(t, "workflow", [][]byte{step(2)}, at(1))

	dry := string(r.command(t, "redrive", "--stream", "orders", "--dry-run"))
	orphan := r.explain(t, "orders", "pay-1").DeadLetters[0]
	if !strings.Contains(dry, "would redrive "+orphan.Position) || !strings.Contains(dry, "1 would be redriven") {
		t.Fatalf("dry run:\n%s", dry)
	}
	for _, stream := range []string{"orders", "workflow"} {
		// Not a terminal: no progress bar, the summary alone.
		if out := string(r.command(t, "redrive", "--stream", stream)); out != stream+": 1 dead letters read, 1 matched, 1 redriven\n" {
			t.Fatalf("redrive of %s (after a dry run that must have written nothing):\n%s", stream, out)
		}
	}
	testenv.WaitFor(t, ctx, "the redriven orphan and overflow decided", func() bool {
		return r.explain(t, "orders", "pay-1").Where == oncall.WhereApplied && r.explain(t, "workflow", "wf-4").Where == oncall.WhereApplied
	})
	for _, stream := range []string{"orders", "workflow"} {
		if out := string(r.command(t, "redrive", "--stream", stream)); !strings.Contains(out, "0 redriven, 1 skipped (already_redriven)") {
			t.Fatalf("second redrive of %s:\n%s", stream, out)
		}
	}

	// A copy of each redriven record, as a second run racing the first
	// would write: the processor knows it.
	var copies []*kgo.Record
	for _, stream := range []string{"orders", "workflow"} {
		for _, rec := range testenv.ReadTopic(t, r.cfg.Kafka.Brokers, r.cfg.Kafka.Naming().For(stream).In) {
			if of := kafka.Header(rec, record.HeaderRedriveOf); of != nil {
				copies = append(copies, &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers})
			}
		}
	}
	if len(copies) != 2 {
		t.Fatalf("%d redriven records in the input topics, want 2", len(copies))
	}
	if err := r.cl.ProduceSync(ctx, copies...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for stream, id := range map[string]string{"orders": "pay-1", "workflow": "wf-4"} {
		var x oncall.Explanation
		testenv.WaitFor(t, ctx, "the copy of "+id+" decided", func() bool {
			x = r.explain(t, stream, id)
			return x.Decisions[len(x.Decisions)-1].Outcome == record.Duplicate
		})
		var outcomes []record.Result
		for _, o := range x.Decisions {
			outcomes = append(outcomes, o.Outcome)
		}
		want := map[string][]record.Result{
			"pay-1": {record.Quarantined, record.Expired, record.Applied, record.Duplicate},
			"wf-4":  {record.Rejected, record.Applied, record.Duplicate},
		}[id]
		if !slices.Equal(outcomes, want) || x.Where != oncall.WhereApplied || len(x.DeadLetters) != 1 {
			t.Errorf("%s: decisions %v (want %v), where %s, %d dead letters", id, outcomes, want, x.Where, len(x.DeadLetters))
		}
	}

	t.Run("filters", func(t *testing.T) { redriveFilters(t, r) })
}

// redriveFilters: with --since T, --key K or --reason R a redrive puts
// back only the dead letters of the orders stream written at or after T,
// of K, or of R, and a second run of each adds nothing. A child an
// operator released and one a reset dropped go back when their reason is
// named, never by default. It follows TestRedriveOrphansAndOverflows on
// its rig, whose orders DLQ holds pay-1, redriven (and copied).
func redriveFilters(t *testing.T, r *oncallRig) {
	longAgo := time.Now().Add(-2 * time.Hour).UnixMilli()
	pay := func(n int) []byte {
		return fmt.Appendf(nil, `{"event_id":"pay-%d","event_type":"order.payment_received","parent_id":"o%d","payload":{}}`, n, n)
	}
	quarantined := func(id string) {
		t.Helper()
		testenv.WaitFor(t, r.ctx, id+" quarantined", func() bool { return r.explain(t, "orders", id).Where == oncall.WhereQuarantined })
	}
	names := r.cfg.Kafka.Naming().For("orders")
	// dlq waits for n dead letters in orders' DLQ and returns them by
	// event id ("" for the undecodable record).
	dlq := func(n int) map[string]record.DeadLetter {
		t.Helper()
		dls := map[string]record.DeadLetter{}
		testenv.WaitFor(t, r.ctx, fmt.Sprintf("%d dead letters", n), func() bool {
			clear(dls)
			read := 0
			err := kafka.ReadCommitted(r.ctx, r.conn, names.DLQ, nil, func(rec *kgo.Record) error {
				var dl record.DeadLetter
				read++
				err := json.Unmarshal(rec.Value, &dl)
				dls[dl.EventID] = dl
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return read == n
		})
		return dls
	}

	// Before T: orphans of o2 and o6, o3's child released, and a record
	// that is no event.
	r.produce(t, "orders", [][]byte{pay(2), pay(6), pay(3)}, []int64{longAgo, longAgo, time.Now().UnixMilli()})
	if err := r.cl.ProduceSync(r.ctx, &kgo.Record{Topic: names.In, Key: []byte("o8"), Value: []byte("not an event")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	quarantined("pay-3")
	r.command(t, "admin", "release", "--stream", "orders", "--key", "o3")
	// T is just after every dead letter so far; the clock passes it before
	// the later ones are caused.
	var sinceMs int64
	for _, dl := range dlq(5) {
		sinceMs = max(sinceMs, dl.AtMs+1)
	}
	for time.Now().UnixMilli() < sinceMs {
		time.Sleep(time.Millisecond)
	}
	// From T: an orphan of o5, and o7's child dropped by a reset. o3's
	// parent comes, for its released child to apply once redriven.
	r.produce(t, "orders", [][]byte{pay(5), pay(7)}, []int64{longAgo, time.Now().UnixMilli()})
	quarantined("pay-7")
	r.command(t, "admin", "reset", "--stream", "orders", "--key", "o7", "--yes")
	r.produce(t, "orders", [][]byte{[]byte(`{"event_id":"order-3","event_type":"order.created","order_id":"o3","payload":{}}`)}, []int64{time.Now().UnixMilli()})
	reasons := map[string]record.Reason{}
	for id, dl := range dlq(7) {
		reasons[id] = dl.Reason
	}
	if want := map[string]record.Reason{"pay-1": record.ReasonOrphanTTL, "pay-2": record.ReasonOrphanTTL, "pay-6": record.ReasonOrphanTTL,
		"pay-3": record.ReasonReleased, "": record.ReasonUndecodable, "pay-5": record.ReasonOrphanTTL, "pay-7": record.ReasonReset}; !maps.Equal(reasons, want) {
		t.Fatalf("dead letters by reason %v, want %v", reasons, want)
	}

	// The event ids of the redriven records in orders.in, sorted.
	redriven := func() []string {
		var ids []string
		for _, rec := range testenv.ReadTopic(t, r.cfg.Kafka.Brokers, names.In) {
			if kafka.Header(rec, record.HeaderRedriveOf) != nil {
				ids = append(ids, string(kafka.Header(rec, record.HeaderEventID)))
			}
		}
		slices.Sort(ids)
		return ids
	}
	// pay-1 redriven, and its copy.
	want := []string{"pay-1", "pay-1"}
	// Named, the undecodable record is matched, and still not put back.
	if out := string(r.command(t, "redrive", "--stream", "orders", "--reason", "undecodable")); out != "orders: 7 dead letters read, 1 matched, 0 redriven, 1 skipped (not_redrivable)\n" {
		t.Fatalf("--reason undecodable: %q", out)
	}
	if got := redriven(); !slices.Equal(got, want) {
		t.Fatalf("after --reason undecodable the redriven records are of %v, want %v", got, want)
	}
	for _, run := range []struct {
		args    []string
		matched int
		put     string
	}{
		{[]string{"--since", time.UnixMilli(sinceMs).UTC().Format(time.RFC3339Nano)}, 1, "pay-5"},
		{[]string{"--key", "o2"}, 1, "pay-2"},
		{[]string{"--reason", "released"}, 1, "pay-3"},
		{[]string{"--reason", "reset"}, 1, "pay-7"},
		// By default the orphans alone: the released and reset children
		// are not matched.
		{nil, 4, "pay-6"},
	} {
		args := append([]string{"redrive", "--stream", "orders"}, run.args...)
		first := fmt.Sprintf("orders: 7 dead letters read, %d matched, 1 redriven", run.matched)
		if skipped := run.matched - 1; skipped > 0 {
			first += fmt.Sprintf(", %d skipped (already_redriven)", skipped)
		}
		if out := string(r.command(t, args...)); out != first+"\n" {
			t.Fatalf("%v: %q, want %q", run.args, out, first)
		}
		want = append(want, run.put)
		slices.Sort(want)
		if got := redriven(); !slices.Equal(got, want) {
			t.Fatalf("after %v the redriven records are of %v, want %v", run.args, got, want)
		}
		again := fmt.Sprintf("orders: 7 dead letters read, %d matched, 0 redriven, %d skipped (already_redriven)\n", run.matched, run.matched)
		if out := string(r.command(t, args...)); out != again {
			t.Fatalf("%v again: %q, want %q", run.args, out, again)
		}
		if got := redriven(); !slices.Equal(got, want) {
			t.Fatalf("after %v again the redriven records are of %v, want %v", run.args, got, want)
		}
	}
	// Decided again: the released child applies under its parent, the
	// reset one waits for its parent anew.
	testenv.WaitFor(t, r.ctx, "the redriven released and reset children decided", func() bool {
		return r.explain(t, "orders", "pay-3").Where == oncall.WhereApplied && r.explain(t, "orders", "pay-7").Where == oncall.WhereQuarantined
	})
}

// inspect and explain, on every policy, say what the rules hold: a
// history drawn by each policy's model is written to the real broker and
// decided by the processor, and the same history run through the rules
// gives the table value inspect must show, and the decisions inspect and
// explain must list; the admin endpoints answer the same JSON, and
// explain reads the same decisions from ClickHouse as from Kafka.
func TestInspectAndExplainShowWhatTheRulesHold(t *testing.T) {
	ctx := testenv.Context(t, 120*time.Second)
	r := newOncallRig(t, ctx, `  presence: {limits: {partitions: 2}}
  workflow: {limits: {partitions: 2}}
  chat: {limits: {partitions: 2}}
  orders: {limits: {partitions: 2}, parent: {ttl: 20s, buffer: 4}}
`, true)
	tools := newOncallTools(r.cfg, r.conn)
	mux := http.NewServeMux()
	mux.Handle(oncall.KeyPattern, tools.KeyHandler())
	mux.Handle(oncall.EventPattern, tools.EventHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// Received from an hour ahead: no timer of a history comes due
	// while the test runs, as none does in the rules' run below.
	base := time.Now().Add(time.Hour).UnixMilli()
	for i, m := range decidetest.Models {
		s := r.cfg.Streams[m.Stream]
		key := fmt.Sprintf("k%d", i)
		var bodies [][]byte
		var atMs []int64
		// The first example with a few events.
		for seed := 0; len(bodies) < 3; seed++ {
			h := rapid.Custom(func(rt *rapid.T) decidetest.History { return m.Draw(rt, m.StreamOf(rt), key) }).Example(seed)
			bodies, atMs = nil, nil
			first := int64(-1)
			for _, st := range h.Steps {
				if st.Body == nil {
					continue
				}
				if first < 0 {
					first = st.AtMs
				}
				bodies = append(bodies, st.Body)
				atMs = append(atMs, base+st.AtMs-first)
			}
		}
		evs := r.produce(t, m.Stream, bodies, atMs)

		// The rules' run of the same events.
		rules := decide.For(s)
		var entity decide.Entity
		var want []toolDecision
		byID := map[inputAt][]byte{}
		for _, ev := range evs {
			byID[inputAt{ev.InputPartition, ev.InputOffset}] = ev.Body
			for _, d := range rules.Decide(&entity, ev).Decisions {
				o := record.Outcome{EventID: d.Event.EventID, Key: ev.Key, Outcome: d.Outcome, Reason: d.Reason, Version: d.Version, Gap: d.Gap,
					BufferDepth: d.BufferDepth, MessageID: d.MessageID, InputPartition: d.Event.InputPartition, InputOffset: d.Event.InputOffset, Payload: d.Event.Body}
				want = append(want, decisionOf(o, byID))
			}
		}
		key = evs[0].Key

		t.Run(m.Stream, func(t *testing.T) {
			var rep struct {
				Holds     processors.Inspection `json:"holds"`
				Decisions []record.Outcome      `json:"decisions"`
			}
			testenv.WaitFor(t, ctx, "every decision of the history", func() bool {
				rep.Decisions = nil
				out := r.command(t, "inspect", m.Stream, key, "--json", "--last", "1000")
				if err := json.Unmarshal(out, &rep); err != nil {
					t.Fatal(err)
				}
				return len(rep.Decisions) >= len(want)
			})
			if got := decisionsOf(rep.Decisions, byID); !slices.Equal(got, want) {
				t.Errorf("inspect's decisions:\n got %+v\nwant %+v", got, want)
			}
			wantHolds, _ := json.Marshal(processors.Inspect(s, key, &entity))
			gotHolds, _ := json.Marshal(rep.Holds)
			if !bytes.Equal(gotHolds, wantHolds) {
				t.Errorf("inspect holds\n%s\nthe rules hold\n%s", gotHolds, wantHolds)
			}
			// --last N is the last N.
			var last struct{ Decisions []record.Outcome }
			_ = json.Unmarshal(r.command(t, "inspect", m.Stream, key, "--json", "--last", "2"), &last)
			if got := decisionsOf(last.Decisions, byID); !slices.Equal(got, want[max(0, len(want)-2):]) {
				t.Errorf("--last 2: %+v", got)
			}
			if human := string(r.command(t, "inspect", m.Stream, key)); !regexp.MustCompile(fmt.Sprintf(`(?m)^version +%d `, entity.Version)).MatchString(human) {
				t.Errorf("human inspect lacks the version %d:\n%s", entity.Version, human)
			}
			checkEndpoint(t, srv.URL+"/admin/v1/streams/"+m.Stream+"/keys/"+key+"?last=1000", r.command(t, "inspect", m.Stream, key, "--json", "--last", "1000"))

			for _, ev := range evs[:min(3, len(evs))] {
				var x oncall.Explanation
				if err := json.Unmarshal(r.command(t, "explain", m.Stream, ev.EventID, "--json", "--from", "kafka"), &x); err != nil {
					t.Fatal(err)
				}
				var wantOf []toolDecision
				for _, d := range want {
					if d.EventID == ev.EventID {
						wantOf = append(wantOf, d)
					}
				}
				if got := decisionsOf(x.Decisions, byID); !slices.Equal(got, wantOf) {
					t.Errorf("explain %s:\n got %+v\nwant %+v", ev.EventID, got, wantOf)
				}
				if w := whereInRules(&entity, ev.EventID, wantOf); x.Where != w {
					t.Errorf("explain %s: where %s, the rules say %s (%s)", ev.EventID, x.Where, w, x.Detail)
				}
				checkEndpoint(t, srv.URL+"/admin/v1/streams/"+m.Stream+"/events/"+ev.EventID, mustJSON(t, x))

				// ClickHouse, once the sink has every decision, says the same.
				ch := newOncallTools(r.cfg, r.conn)
				closeCH, err := withClickHouse(ctx, ch, r.cfg.ClickHouse)
				if err != nil {
					t.Fatal(err)
				}
				var fromCH oncall.Explanation
				testenv.WaitFor(t, ctx, "ClickHouse to hold the decisions of "+ev.EventID, func() bool {
					if fromCH, err = ch.Explain(ctx, m.Stream, ev.EventID); err != nil {
						t.Fatal(err)
					}
					return fromCH.Source == oncall.SourceClickHouse && len(fromCH.Decisions) >= len(wantOf)
				})
				closeCH()
				// driftguard.events has no message_id column.
				var wantCH []toolDecision
				for _, d := range wantOf {
					d.MessageID = ""
					wantCH = append(wantCH, d)
				}
				if got := decisionsOf(fromCH.Decisions, byID); !slices.Equal(got, wantCH) || fromCH.Where != x.Where {
					t.Errorf("explain %s from ClickHouse:\n got %+v (%s)\nwant %+v (%s)", ev.EventID, got, fromCH.Where, wantOf, x.Where)
				}
			}
		})
	}
	// Nothing known: 404 for a key, not_decided for an event; an unknown
	// stream is 404.
	for url, want := range map[string]int{"/admin/v1/streams/orders/keys/nobody": 404, "/admin/v1/streams/nope/keys/k": 404,
		"/admin/v1/streams/nope/events/e": 404, "/admin/v1/streams/orders/keys/k0?last=x": 400} {
		if res, err := http.Get(srv.URL + url); err != nil || res.StatusCode != want {
			t.Errorf("GET %s: %v %v, want %d", url, res.Status, err, want)
		}
	}
	if x := r.explain(t, "orders", "never-sent"); x.Where != oncall.WhereNotDecided || len(x.Decisions) != 0 {
		t.Errorf("an event never sent: %+v", x)
	}
}

// whereInRules is where the rules' entity says an event is: held in the
// buffer or the quarantine, else by its last decision that was not a
// duplicate.
func whereInRules(e *decide.Entity, id string, ds []toolDecision) string {
	held := func(events []decide.Event) bool {
		return slices.ContainsFunc(events, func(ev decide.Event) bool { return ev.EventID == id })
	}
	switch {
	case held(e.Buffer):
		return oncall.WhereBuffered
	case held(e.Quarantine):
		return oncall.WhereQuarantined
	}
	last := record.Duplicate
	for _, d := range ds {
		if d.Outcome != record.Duplicate {
			last = d.Outcome
		}
	}
	switch last {
	case record.Applied, record.Reconciled:
		return oncall.WhereApplied
	case record.Expired, record.Rejected:
		if last == record.Expired || slices.ContainsFunc(ds, func(d toolDecision) bool { return d.Reason == record.ReasonBufferFull }) {
			return oncall.WhereDeadLetter
		}
	}
	return oncall.WhereRejected
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkEndpoint gets url and compares its JSON with want's.
func checkEndpoint(t *testing.T, url string, want []byte) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s\n%s", url, res.Status, body)
	}
	var got, exp any
	if json.Unmarshal(body, &got) != nil || json.Unmarshal(want, &exp) != nil || !jsonEqual(got, exp) {
		t.Errorf("GET %s:\n%s\nwant\n%s", url, body, want)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
