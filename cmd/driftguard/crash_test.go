package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/processors"
)

// envCrashSeed replays a crash test history: set it to the seed a failure
// logged.
const envCrashSeed = "DRIFTGUARD_CRASH_SEED"

// crashKills is how often the processor is killed.
const crashKills = 6

// About 12,000 deliveries (20,000 in `go tool task faults`, with
// DRIFTGUARD_FAULTS=full) across presence (latest), workflow (gapless),
// chat (assign) and orders (the parent join), decided by one `driftguard
// process` that is killed with SIGKILL six times at random points while it
// works, some right after an orphan expired, while timers fire every
// 100ms, and restarted on the same table storage; once it is stopped with
// SIGSTOP past its session timeout while a second instance takes over, and
// woken. Meanwhile `driftguard sink` writes ClickHouse and is killed at
// least three times. Afterwards every delivery has one decision, however
// often a restart redelivered it; no decision id is written twice; no
// event is applied twice; the state topic and the group table equal the
// model of each policy; and ClickHouse holds each decision once.
func TestEveryDecisionOnceThroughCrashesAndAZombie(t *testing.T) {
	ctx := testenv.Context(t, 12*time.Minute)
	dir := t.TempDir()
	brokers := testenv.Kafka(t)
	seed := seedOf(t, envCrashSeed)
	rng := rand.New(rand.NewPCG(seed, 4))
	sizes := crashSizes{presence: 3300, workflow: 3000, chat: 3000, orders: 2700}
	if testenv.FullFaults() {
		// `go tool task faults`: the full size.
		sizes = crashSizes{presence: 5500, workflow: 5000, chat: 5000, orders: 4500}
	}
	history := newCrashHistory(rng, sizes)
	t.Logf("%d deliveries", len(history.inputs))

	// Uniquely named copies of the four shipped streams, with timers that
	// fire within the run: orphans expire after 3 s, gaps are reported
	// after 5 s, and timers are visited every 100 ms, so that kills land
	// while a visit decides.
	names := map[string]string{}
	for _, base := range []string{"presence", "workflow", "chat", "orders"} {
		names[base] = testenv.UniqueName(base)
	}
	configFile, cfg := writeCatalogueCopies(t, dir, names, func(base string, s *config.Stream) {
		switch base {
		case "orders":
			s.Parent.TTL = crashOrphanTTL
		case "workflow":
			s.Limits.GapTimeout = 5 * time.Second
		}
	}, map[string]any{
		"processing": map[string]any{"timer_tick": "100ms"},
		// A killed sink's partitions move to its successor after 6 s.
		"clickhouse": map[string]any{"consumer_group": names["presence"] + "-sink", "session_timeout": "6s", "batch_period": "200ms"},
	})
	cfg, conn, cl := loadOnServices(t, ctx, configFile, "crash", cfg.StreamNames()...)
	// The processors reach the broker through a proxy that can hold back
	// the acks of their writes to the dead letter and replay topics; the
	// test's own clients and the sink do not.
	proxy := testenv.NewKafkaProxy(t, brokers)
	var heldTopics []string
	for _, name := range names {
		heldTopics = append(heldTopics, naming.Prefixes{}.For(name).DLQ, naming.Prefixes{}.For(name).Replay)
	}
	runner := newProcessRunner(t, dir, configFile, proxy.Addrs(), cfg.StreamNames()...)
	out := newOutputReader(t, brokers, names)
	sink := newCrashSink(t, ctx, runner.bin, configFile, cfg, conn, rand.New(rand.NewPCG(seed, 6)))

	produce := func(ins []*crashInput) error {
		recs := make([]*kgo.Record, len(ins))
		now := time.Now()
		for i, in := range ins {
			at := now
			if in.ahead {
				at = now.Add(time.Hour)
			}
			recs[i] = inputRecordAt(names[in.stream], in.key, in.body, at.UnixMilli())
		}
		res := cl.ProduceSync(ctx, recs...)
		for i, in := range ins {
			in.partition, in.offset = recs[i].Partition, recs[i].Offset
		}
		return res.FirstErr()
	}

	// Each round produces a slice of the history, half before the start and
	// half while the processor works, and kills it at a random point of its
	// work: after a random number of new outcome records, up to a round's
	// worth, so that some of its input is always left to decide; every
	// other round then waits (up to 20 s) for the next orphan to expire,
	// and kills it right after that timer visit committed, while the next
	// ones fire. Every third round then holds back the acks of its next
	// dead letter or replay request (the proxy holds every produce ack of
	// the processor behind it, one connection answering in order) and
	// kills it with those writes in flight.
	//
	// One more round, the third, stalls the processor instead: a second
	// instance joins, the first is stopped with SIGSTOP past its session
	// timeout while the second takes its partitions over and decides
	// everything produced, then the first is woken with SIGCONT, a zombie
	// whose open transaction must not commit.
	chunk := len(history.inputs)/(crashKills+2) + 1
	rest := history.inputs
	heldKills := 0
	for kill, round := 0, 0; kill < crashKills; round++ {
		c := rest[:chunk]
		rest = rest[chunk:]
		if err := produce(c[:len(c)/2]); err != nil {
			t.Fatal(err)
		}
		proc := runner.start("state")
		if round == zombieRound {
			zombie(t, ctx, runner, proc, out, sink, rng.IntN(len(c)/2)+1, func() error { return produce(c[len(c)/2:]) }, history.inputs[:len(history.inputs)-len(rest)])
			continue
		}
		kill++
		produced := make(chan error, 1)
		go func() { produced <- produce(c[len(c)/2:]) }()
		target := out.outcomes() + 1 + rng.IntN(len(c))
		testenv.WaitFor(t, ctx, "the processor at its kill point", func() bool { sink.maybeKill(); out.poll(ctx); return out.outcomes() >= target })
		if kill%2 == 0 {
			expired := out.expired
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			testenv.Poll(waitCtx, func() bool { sink.maybeKill(); out.poll(waitCtx); return out.expired > expired })
			cancel()
		}
		held := 0
		if kill%3 == 1 {
			proxy.HoldAcks(heldTopics...)
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			testenv.Poll(waitCtx, func() bool { sink.maybeKill(); return proxy.Holding() > 0 })
			cancel()
			if held = proxy.Holding(); held > 0 {
				heldKills++
			}
		}
		sigkill(t, proc)
		if kill%3 == 1 {
			testenv.WaitFor(t, ctx, "the killed processor's held acks dropped", func() bool { return proxy.Holding() == 0 })
			proxy.ReleaseAcks()
		}
		if err := <-produced; err != nil {
			t.Fatal(err)
		}
		t.Logf("kill %d at %d outcome records (%d orphans expired, %d acks held), %d deliveries produced", kill, out.outcomes(), out.expired, held, len(history.inputs)-len(rest))
	}
	if heldKills == 0 {
		t.Error("no kill happened with a dead letter's or replay request's ack held back")
	}
	if err := produce(rest); err != nil {
		t.Fatal(err)
	}
	proc := runner.start("state")
	// Waited for with a deadline of its own, so that a delivery never
	// decided is named below rather than timing the test out.
	waitCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	testenv.Poll(waitCtx, func() bool { sink.maybeKill(); out.poll(waitCtx); return out.decidedAll(history.inputs) })
	cancel()
	// A clean stop flushes everything; then nothing more can appear.
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, _ = proc.Process.Wait()
	out.readToEnd(ctx)
	sink.finish(out)

	decisions := out.checkDecisions(history.inputs)
	checkPresence(t, history, decisions, out.last("presence"))
	checkWorkflow(t, history, decisions, out.last("workflow"))
	checkChat(t, history, decisions, out.last("chat"))
	checkOrders(t, history, names["orders"], decisions, out.last("orders"))
	sink.check(history, out, names)
}

// crashOrphanTTL is how long a child waits for its order in the crash test.
const crashOrphanTTL = 3 * time.Second

// seedOf is the seed of a test's random choices: from the variable env
// when set, else new; logged so that a failure can be replayed.
func seedOf(t *testing.T, env string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(env); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, env, seed)
	return seed
}

// writeCatalogueCopies writes a config file in dir defining each catalogue
// stream again under its new name with three partitions, changed by tune,
// with the other top-level sections of top, and returns its path and it
// loaded.
func writeCatalogueCopies(t *testing.T, dir string, names map[string]string, tune func(base string, s *config.Stream), top map[string]any) (string, *config.Config) {
	t.Helper()
	catalogue, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	streams := map[string]*config.Stream{}
	for base, name := range names {
		s := *catalogue.Streams[base]
		s.Limits.Partitions = 3
		tune(base, &s)
		streams[name] = &s
	}
	doc := map[string]any{"streams": streams}
	for k, v := range top {
		doc[k] = v
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	path := testenv.WriteConfig(t, dir, string(data))
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Only the copies: the shipped streams are not under test.
	for name := range cfg.Streams {
		if streams[name] == nil {
			delete(cfg.Streams, name)
		}
	}
	return path, cfg
}

// inputPos is a delivery's place in its stream's input.
type inputPos struct {
	stream    string
	partition int32
	offset    int64
}

func (in *crashInput) pos() inputPos { return inputPos{in.stream, in.partition, in.offset} }

// outputReader reads the processor's outcomes, state and table topics from
// their start.
type outputReader struct {
	t     *testing.T
	cl    *kgo.Client
	base  map[string]string // topic → catalogue stream
	kinds map[string]string // topic → outcomes, state or table
	count int
	final map[inputPos][]record.Outcome
	// ids counts the outcome records of each decision id; expired counts
	// orphan expiries.
	ids     map[string]int
	expired int
	// seen are the inputs with an outcome record, final or not.
	seen   map[inputPos]bool
	states map[string]map[string]json.RawMessage // stream → key → last state record
	tables map[string]map[string]json.RawMessage // stream → key → last table value
	next   map[string]map[int32]int64            // topic → partition → next offset
}

func newOutputReader(t *testing.T, brokers []string, names map[string]string) *outputReader {
	t.Helper()
	r := &outputReader{t: t, base: map[string]string{}, kinds: map[string]string{}, final: map[inputPos][]record.Outcome{}, ids: map[string]int{}, seen: map[inputPos]bool{},
		states: map[string]map[string]json.RawMessage{}, tables: map[string]map[string]json.RawMessage{}, next: map[string]map[int32]int64{}}
	var ts []string
	for base, name := range names {
		n := naming.Prefixes{}.For(name)
		for kind, topic := range map[string]string{"outcomes": n.Outcomes, "state": n.State, "table": n.Table} {
			r.base[topic], r.kinds[topic] = base, kind
			ts = append(ts, topic)
		}
		r.states[base], r.tables[base] = map[string]json.RawMessage{}, map[string]json.RawMessage{}
	}
	// As the sink reads them: committed records only. Transaction markers
	// are kept to know when a topic is read to its end.
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.ConsumeTopics(ts...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r.cl = cl
	return r
}

// poll reads what has arrived within a moment.
func (r *outputReader) poll(ctx context.Context) {
	pollCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	fetches := r.cl.PollFetches(pollCtx)
	fetches.EachRecord(func(rec *kgo.Record) {
		if r.next[rec.Topic] == nil {
			r.next[rec.Topic] = map[int32]int64{}
		}
		r.next[rec.Topic][rec.Partition] = rec.Offset + 1
		if rec.Attrs.IsControl() || record.IsViewMark(rec.Key, rec.Value) {
			return
		}
		base := r.base[rec.Topic]
		switch r.kinds[rec.Topic] {
		case "state":
			r.states[base][string(rec.Key)] = rec.Value
		case "table":
			r.tables[base][string(rec.Key)] = rec.Value
		default:
			var o record.Outcome
			if err := json.Unmarshal(rec.Value, &o); err != nil {
				r.t.Errorf("outcome at %s/%d/%d: %v", rec.Topic, rec.Partition, rec.Offset, err)
				return
			}
			r.count++
			r.ids[o.DecisionID]++
			if o.EventID != "" {
				r.seen[inputPos{base, o.InputPartition, o.InputOffset}] = true
			}
			switch {
			case o.Outcome == record.Buffered || o.Outcome == record.Quarantined:
				// A decision to wait: the final one comes later.
			case o.Outcome == record.Expired && o.EventID == "":
				// A gap report names no input.
			default:
				if o.Outcome == record.Expired {
					r.expired++
				}
				pos := inputPos{base, o.InputPartition, o.InputOffset}
				r.final[pos] = append(r.final[pos], o)
			}
		}
	})
}

func (r *outputReader) outcomes() int {
	return r.count
}

// sawAll reports whether every input has an outcome record, perhaps one
// that waits (buffered, quarantined).
func (r *outputReader) sawAll(ins []*crashInput) bool {
	for _, in := range ins {
		if !r.seen[in.pos()] {
			return false
		}
	}
	return true
}

func (r *outputReader) decidedAll(ins []*crashInput) bool {
	for _, in := range ins {
		if len(r.final[in.pos()]) == 0 {
			return false
		}
	}
	return true
}

// decideAllAndStop waits up to wait for every input to have a final
// decision, stops decider cleanly (it flushes what it decided), reads the
// outputs to their end and returns each input's decision, as
// checkDecisions checks them.
func (r *outputReader) decideAllAndStop(ctx context.Context, ins []*crashInput, decider *exec.Cmd, wait time.Duration) map[inputPos]record.Outcome {
	r.t.Helper()
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	testenv.Poll(waitCtx, func() bool { r.poll(waitCtx); return r.decidedAll(ins) })
	cancel()
	if err := decider.Process.Signal(syscall.SIGTERM); err != nil {
		r.t.Fatal(err)
	}
	_, _ = decider.Process.Wait()
	r.readToEnd(ctx)
	return r.checkDecisions(ins)
}

// readToEnd reads every topic up to its current end.
func (r *outputReader) readToEnd(ctx context.Context) {
	r.t.Helper()
	var ts []string
	for topic := range r.base {
		ts = append(ts, topic)
	}
	ends, err := kadm.NewClient(r.cl).ListCommittedOffsets(ctx, ts...)
	if err != nil {
		r.t.Fatal(err)
	}
	testenv.WaitFor(r.t, ctx, "the outputs read to their end", func() bool {
		r.poll(ctx)
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			done = done && r.next[o.Topic][o.Partition] >= o.Offset
		})
		return done
	})
}

// last is a stream's last state record and table value per key.
type lastRecords struct{ states, tables map[string]json.RawMessage }

func (r *outputReader) last(base string) lastRecords {
	return lastRecords{r.states[base], r.tables[base]}
}

// checkDecisions asserts that every delivery has one final decision,
// repeated identically if a restart decided its input again, that no event
// id was applied from two deliveries, and that no decision id is on two
// outcome records (timer decisions included, which have no input of their
// own). It returns each delivery's final decision.
func (r *outputReader) checkDecisions(ins []*crashInput) map[inputPos]record.Outcome {
	decisions := map[inputPos]record.Outcome{}
	repeated := 0
	appliedAt := map[string]inputPos{}
	for _, in := range ins {
		pos := in.pos()
		all := r.final[pos]
		if len(all) == 0 {
			r.t.Errorf("%s %s at %d/%d has no decision", in.stream, in.eventID, pos.partition, pos.offset)
			continue
		}
		d := all[0]
		if d.EventID != in.eventID {
			r.t.Errorf("%s at %d/%d decided as event %s, produced as %s", in.stream, pos.partition, pos.offset, d.EventID, in.eventID)
		}
		for _, o := range all[1:] {
			repeated++
			if o.Outcome != d.Outcome || o.Reason != d.Reason || o.Version != d.Version || o.MessageID != d.MessageID {
				r.t.Errorf("%s %s at %d/%d decided twice differently: %s %s v%d %s, then %s %s v%d %s", in.stream, in.eventID, pos.partition, pos.offset,
					d.Outcome, d.Reason, d.Version, d.MessageID, o.Outcome, o.Reason, o.Version, o.MessageID)
			}
		}
		decisions[pos] = d
		if d.Outcome == record.Applied || d.Outcome == record.Reconciled {
			id := in.stream + "/" + in.eventID
			if prev, ok := appliedAt[id]; ok && prev != pos {
				r.t.Errorf("%s applied twice: at offsets %d/%d and %d/%d", id, prev.partition, prev.offset, pos.partition, pos.offset)
			}
			appliedAt[id] = pos
		}
	}
	// Exactly once: a killed processor's uncommitted decisions are
	// aborted, never repeated.
	if repeated > 0 {
		r.t.Errorf("%d decisions repeated by restarts, want none", repeated)
	}
	twice := 0
	for id, n := range r.ids {
		switch {
		case id == "":
			r.t.Errorf("%d outcome records without a decision id", n)
		case n > 1:
			if twice++; twice <= 10 {
				r.t.Errorf("decision %s on %d outcome records", id, n)
			}
		}
	}
	if twice > 0 {
		r.t.Errorf("%d decision ids on more than one outcome record, want none", twice)
	}
	return decisions
}

// byKey groups a stream's deliveries per key in log order.
func byKey(ins []*crashInput, stream string) map[string][]*crashInput {
	out := map[string][]*crashInput{}
	for _, in := range ins {
		if in.stream == stream {
			out[in.key] = append(out[in.key], in)
		}
	}
	for _, ds := range out {
		slices.SortFunc(ds, func(a, b *crashInput) int { return int(a.offset - b.offset) })
	}
	return out
}

// decodeLast decodes a key's last state record and table value, and checks
// that they agree: the record's version is the table's last revision, its
// state the table's, and nothing is left buffered.
func decodeLast(t *testing.T, last lastRecords, key string, state any) (record.State, bool) {
	t.Helper()
	var st record.State
	if last.states[key] == nil || last.tables[key] == nil {
		t.Errorf("%s: no state record or table value", key)
		return st, false
	}
	if err := json.Unmarshal(last.states[key], &st); err != nil {
		t.Errorf("%s: state record: %v", key, err)
		return st, false
	}
	table, err := processors.DecodeTableValue(last.tables[key])
	if err != nil {
		t.Errorf("%s: table value: %v", key, err)
		return st, false
	}
	if table.Revision() != st.Version || !testenv.SameJSON(table.State, st.State) || len(table.Buffer) != 0 {
		t.Errorf("%s: the table (revision %d, %d buffered, %s) is not the last state record (version %d, %s)",
			key, table.Revision(), len(table.Buffer), table.State, st.Version, st.State)
	}
	if err := json.Unmarshal(st.State, state); err != nil {
		t.Errorf("%s: state: %v", key, err)
		return st, false
	}
	return st, true
}

// checkPresence: each delivery decided as the latest policy decides its
// user's log, and each user ends at the highest version.
func checkPresence(t *testing.T, h *crashHistory, decisions map[inputPos]record.Outcome, last lastRecords) {
	for user, ins := range byKey(h.inputs, "presence") {
		ds := make([]delivery, len(ins))
		for i, in := range ins {
			ds[i] = delivery{ID: in.eventID, Version: in.version}
		}
		for i, want := range expectedOutcomes(ds) {
			if got := decisions[ins[i].pos()].Outcome; got != want {
				t.Errorf("presence %s %s: %s, the model says %s", user, ins[i].eventID, got, want)
			}
		}
		var state struct {
			Presence string `json:"presence"`
			Version  int64  `json:"sequence_number"`
		}
		st, ok := decodeLast(t, last, user, &state)
		if want := h.presence[user]; ok && (st.Version != want.Version || state.Version != want.Version || state.Presence != want.Status) {
			t.Errorf("presence %s ends at %d %s (state record version %d); the model at %d %s", user, state.Version, state.Presence, st.Version, want.Version, want.Status)
		}
	}
}

// checkWorkflow: each operation applied its sequences 1..end exactly once
// each and nothing after a terminal status, and ends as the ordered replay.
func checkWorkflow(t *testing.T, h *crashHistory, decisions map[inputPos]record.Outcome, last lastRecords) {
	for op, ins := range byKey(h.inputs, "workflow") {
		end := h.workflow[op]
		applied := map[int64]int{}
		var highest int64
		for _, in := range ins {
			highest = max(highest, in.version)
			d := decisions[in.pos()]
			if d.Outcome == record.Applied {
				applied[in.version]++
			}
			if in.version > end.seq && d.Outcome != record.Rejected && d.Outcome != record.Duplicate {
				t.Errorf("workflow %s: sequence %d after the terminal %d was %s", op, in.version, end.seq, d.Outcome)
			}
		}
		for seq := int64(1); seq <= highest; seq++ {
			if want := seq <= end.seq; applied[seq] != 1 && want || applied[seq] != 0 && !want {
				t.Errorf("workflow %s: sequence %d applied %d times (ends at %d)", op, seq, applied[seq], end.seq)
			}
		}
		var state struct {
			Sequence int64  `json:"sequence"`
			Status   string `json:"status"`
		}
		st, ok := decodeLast(t, last, op, &state)
		if ok && (st.Version != end.seq || state.Sequence != end.seq || state.Status != end.status) {
			t.Errorf("workflow %s ends at %d %s; the ordered replay at %d %s", op, state.Sequence, state.Status, end.seq, end.status)
		}
	}
}

// checkChat: each logical message got one sequence, in the order of its
// first delivery, with a stable message id; the conversation ends with its
// members, contiguous sequences and the highest receipts.
func checkChat(t *testing.T, h *crashHistory, decisions map[inputPos]record.Outcome, last lastRecords) {
	for conv, ins := range byKey(h.inputs, "chat") {
		end := h.chat[conv]
		for _, in := range ins {
			if in.chatType != "message.send" {
				continue
			}
			d := decisions[in.pos()]
			seq := int64(slices.Index(end.messages, in.message) + 1)
			if seq == 0 { // the outsider's, or its redelivery
				if d.Outcome != record.Rejected && d.Outcome != record.Duplicate || d.Reason != "not_member" && d.Reason != "" {
					t.Errorf("chat %s: the outsider's send was %s %s", conv, d.Outcome, d.Reason)
				}
				continue
			}
			if wantID := fmt.Sprintf("%s:%d", conv, seq); d.Version != seq || d.MessageID != wantID {
				t.Errorf("chat %s: message %s got seq %d id %q (%s), the model %d %q", conv, in.message, d.Version, d.MessageID, d.Outcome, seq, wantID)
			}
		}
		var state struct {
			LastSeq int64    `json:"last_seq"`
			Members []string `json:"members"`
			Cursors map[string]struct {
				Read      int64 `json:"read"`
				Delivered int64 `json:"delivered"`
			} `json:"cursors"`
		}
		if _, ok := decodeLast(t, last, conv, &state); !ok {
			continue
		}
		if state.LastSeq != int64(len(end.messages)) || !slices.Equal(state.Members, end.members) {
			t.Errorf("chat %s ends at seq %d with %v; the model at %d with %v", conv, state.LastSeq, state.Members, len(end.messages), end.members)
		}
		for _, user := range end.members {
			if c := state.Cursors[user]; c.Read != end.read[user] || c.Delivered != end.delivered[user] {
				t.Errorf("chat %s: %s read %d delivered %d; the model %d and %d", conv, user, c.Read, c.Delivered, end.read[user], end.delivered[user])
			}
		}
	}
}

// checkOrders: each delivery decided as the parent join decides its
// order's log, under the decision id of what decided it: its own input, its
// order.created's for a reconciled child (numbered after the parent's own
// decision), an orphan_ttl timer of its order for an expired one. Each
// order that came ends at the revision and body of its last applied event
// with nothing left waiting; an order that never came holds nothing either.
func checkOrders(t *testing.T, h *crashHistory, stream string, decisions map[inputPos]record.Outcome, last lastRecords) {
	for order, ins := range byKey(h.inputs, "orders") {
		var created *crashInput
		for _, in := range ins {
			if in.orderType == "order.created" && in.want == record.Applied {
				created = in
			}
		}
		reconciled := 0
		for _, in := range ins {
			d := decisions[in.pos()]
			if d.Outcome != in.want {
				t.Errorf("orders %s: %s %s was %s %s, the model says %s", order, in.orderType, in.eventID, d.Outcome, d.Reason, in.want)
				continue
			}
			wantID := record.InputDecisionID(stream, in.partition, in.offset, 0)
			switch in.want {
			case record.Reconciled:
				reconciled++
				wantID = record.InputDecisionID(stream, created.partition, created.offset, reconciled)
			case record.Expired:
				if d.Reason != record.ReasonOrphanTTL || !strings.HasPrefix(d.DecisionID, stream+"/t/") || !strings.Contains(d.DecisionID, "/"+string(record.ReasonOrphanTTL)+"/") || !strings.HasSuffix(d.DecisionID, "/"+order) {
					t.Errorf("orders %s: %s expired as %s under decision %s, want an orphan_ttl timer of its order", order, in.eventID, d.Reason, d.DecisionID)
				}
				continue
			}
			if d.DecisionID != wantID {
				t.Errorf("orders %s: %s %s under decision %s, want %s", order, in.eventID, d.Outcome, d.DecisionID, wantID)
			}
		}
		end, came := h.orders[order]
		if !came {
			table, err := processors.DecodeTableValue(last.tables[order])
			if err != nil || len(table.Quarantine) != 0 || last.states[order] != nil {
				t.Errorf("orders %s never came, yet its table value holds %v (%v) and its state %s", order, table, err, last.states[order])
			}
			continue
		}
		var state json.RawMessage
		st, ok := decodeLast(t, last, order, &state)
		if table, err := processors.DecodeTableValue(last.tables[order]); err == nil && len(table.Quarantine) != 0 {
			t.Errorf("orders %s: %d children still waiting after their order came", order, len(table.Quarantine))
		}
		if ok && (st.Version != end.version || !testenv.SameJSON(state, end.body)) {
			t.Errorf("orders %s ends at revision %d %s; the model at %d %s", order, st.Version, state, end.version, end.body)
		}
	}
}

// crashSinkKills is how often the sink is killed, at least.
const crashSinkKills = 3

// crashSink is `driftguard sink` writing the crash test's streams to a
// database of its own, killed with SIGKILL at random moments and restarted
// at once.
type crashSink struct {
	t      *testing.T
	ctx    context.Context
	cfg    *config.Config
	conn   driver.Conn
	start  func() *exec.Cmd
	cmd    *exec.Cmd
	rng    *rand.Rand
	kills  int
	killAt time.Time
	// in is the streams' names, quoted for an IN clause.
	in string
}

func newCrashSink(t *testing.T, ctx context.Context, bin, configFile string, cfg *config.Config, conn driver.Conn, rng *rand.Rand) *crashSink {
	t.Helper()
	quoted := make([]string, 0, len(cfg.Streams))
	for _, name := range cfg.StreamNames() {
		quoted = append(quoted, "'"+name+"'")
	}
	s := &crashSink{t: t, ctx: ctx, cfg: cfg, conn: conn, rng: rng, in: "(" + strings.Join(quoted, ",") + ")"}
	s.start = func() *exec.Cmd {
		return startSink(t, bin, configFile, cfg)
	}
	s.cmd = s.start()
	s.schedule()
	return s
}

// schedule picks the moment of the next kill, 10 to 40 s from now, or
// none once the sink has been killed crashSinkKills+2 times.
func (s *crashSink) schedule() {
	s.killAt = time.Now().Add(10*time.Second + time.Duration(s.rng.Int64N(int64(30*time.Second))))
	if s.kills >= crashSinkKills+2 {
		s.killAt = time.Now().Add(time.Hour)
	}
}

// maybeKill kills the sink and starts it again once the moment has come.
func (s *crashSink) maybeKill() {
	if time.Now().Before(s.killAt) {
		return
	}
	rows := s.count("SELECT count() FROM %s.events WHERE stream IN %s")
	sigkill(s.t, s.cmd)
	s.kills++
	s.t.Logf("sink kill %d at %d rows in events", s.kills, rows)
	s.cmd = s.start()
	s.schedule()
}

// count runs a count query whose two %s are the database and the streams'
// IN list; 0 while ClickHouse cannot say.
func (s *crashSink) count(query string) uint64 {
	var n uint64
	_ = s.conn.QueryRow(s.ctx, fmt.Sprintf(query, s.cfg.ClickHouse.Database, s.in)).Scan(&n)
	return n
}

// finish kills the sink until it has been killed often enough, then waits
// until its last incarnation has written every committed outcome record
// and every expired orphan's rows.
func (s *crashSink) finish(out *outputReader) {
	s.t.Helper()
	for s.kills < crashSinkKills {
		s.killAt = time.Now()
		before := s.count("SELECT count() FROM %s.events WHERE stream IN %s")
		testenv.WaitFor(s.t, s.ctx, "the sink to insert before its kill", func() bool {
			return s.count("SELECT count() FROM %s.events WHERE stream IN %s") > before || before >= uint64(out.outcomes())
		})
		time.Sleep(time.Duration(s.rng.IntN(1500)) * time.Millisecond)
		s.maybeKill()
	}
	waitCtx, cancel := context.WithTimeout(s.ctx, 2*time.Minute)
	defer cancel()
	testenv.Poll(waitCtx, func() bool {
		return s.count("SELECT count() FROM %s.events WHERE stream IN %s") >= uint64(out.outcomes()) &&
			s.count("SELECT count() FROM %s.orphans WHERE stream IN %s") >= uint64(out.expired) &&
			s.count("SELECT count() FROM %s.dlq WHERE stream IN %s") >= uint64(out.expired)
	})
	// A few more flush periods: a doubled row would show up now.
	time.Sleep(2 * time.Second)
}

// check asserts that ClickHouse holds each decision of the committed
// outcome records once: events one row per decision id, the same ids;
// ordering_minute counting each once; and each expired orphan once in
// orphans and in dlq, on time, with nothing else dead-lettered.
func (s *crashSink) check(h *crashHistory, out *outputReader, names map[string]string) {
	t := s.t
	if n := s.count("SELECT toUInt64(count() = uniqExact(decision_id)) FROM %s.events WHERE stream IN %s"); n != 1 {
		t.Errorf("events: count() = uniqExact(decision_id) is %d, want 1", n)
	}
	rows := s.groupCount("SELECT decision_id, count() FROM %s.events WHERE stream IN %s GROUP BY decision_id")
	var total int
	for id, n := range rows {
		total += n
		if out.ids[id] == 0 {
			t.Errorf("events: decision %s (%d rows) is on no committed outcome record", id, n)
		}
	}
	if total != out.outcomes() {
		t.Errorf("events has %d rows for %d distinct decision ids; %d committed outcome records", total, len(rows), out.outcomes())
	}
	missing := 0
	for id := range out.ids {
		if rows[id] != 1 {
			if missing++; missing <= 10 {
				t.Errorf("decision %s is in events %d times, want once", id, rows[id])
			}
		}
	}
	if counted := s.count("SELECT toUInt64(sum(events)) FROM %s.ordering_minute WHERE stream IN %s"); counted != uint64(len(out.ids)) {
		t.Errorf("ordering_minute counts %d decisions, want %d", counted, len(out.ids))
	}

	orders := names["orders"]
	expired := map[string]bool{}
	for _, in := range h.inputs {
		if in.stream == "orders" && in.want == record.Expired {
			expired[in.eventID] = true
		}
	}
	for table, query := range map[string]string{
		"orphans": "SELECT event_id, count() FROM %s.orphans WHERE stream IN %s GROUP BY event_id",
		"dlq":     "SELECT concat(reason, ' ', stream, ' ', event_id), count() FROM %s.dlq WHERE stream IN %s GROUP BY reason, stream, event_id",
	} {
		got := s.groupCount(query)
		for id := range expired {
			if table == "dlq" {
				id = string(record.ReasonOrphanTTL) + " " + orders + " " + id
			}
			if got[id] != 1 {
				t.Errorf("%s has the expired orphan %s %d times, want once", table, id, got[id])
			}
			delete(got, id)
		}
		for id, n := range got {
			t.Errorf("%s has %s %d times, which the model never expired", table, id, n)
		}
	}
	if n := s.count("SELECT count() FROM %s.orphans WHERE stream IN %s AND expired_at_ms - received_at_ms < " + strconv.FormatInt(crashOrphanTTL.Milliseconds(), 10)); n != 0 {
		t.Errorf("%d orphans expired before their TTL", n)
	}
}

// groupCount runs a query of (string, count) rows whose two %s are the
// database and the streams' IN list.
func (s *crashSink) groupCount(query string) map[string]int {
	s.t.Helper()
	rows, err := s.conn.Query(s.ctx, fmt.Sprintf(query, s.cfg.ClickHouse.Database, s.in))
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var key string
		var n uint64
		if err := rows.Scan(&key, &n); err != nil {
			s.t.Fatal(err)
		}
		got[key] = int(n)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return got
}

// zombieRound is the round of the crash test that stalls the processor.
const zombieRound = 2

// processorSessionTimeout is the group session timeout of the processors:
// franz-go's default, which the runtime keeps (no setting changes it).
const processorSessionTimeout = 45 * time.Second

// zombie runs the stall round: first (running, with half the round
// produced) is joined by a second instance; once both decide, first is
// stopped with SIGSTOP, after they decided decideFirst more, and the rest of the round produced; after the
// session timeout the second holds every partition and decides everything
// produced (some decisions being to wait for a gap or a parent), then first is woken with SIGCONT and both run a while. Then
// the second stops cleanly and first is killed (it may have stopped on its
// own, fenced).
func zombie(t *testing.T, ctx context.Context, runner *processRunner, first *exec.Cmd, out *outputReader, sink *crashSink, decideFirst int, produceRest func() error, produced []*crashInput) {
	t.Helper()
	second := runner.start("second")
	target := out.outcomes() + decideFirst
	testenv.WaitFor(t, ctx, "both instances deciding", func() bool { sink.maybeKill(); out.poll(ctx); return out.outcomes() >= target })
	if err := first.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("zombie: first instance stopped at %d outcome records", out.outcomes())
	if err := produceRest(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "the second instance to take over and decide everything produced", func() bool {
		sink.maybeKill()
		out.poll(ctx)
		return time.Since(stopped) > processorSessionTimeout && out.sawAll(produced)
	})
	t.Logf("zombie: everything produced decided %s after the stop, at %d outcome records; waking the first", time.Since(stopped).Round(time.Second), out.outcomes())
	if err := first.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Both run: the woken one finds itself out of the group and its
	// transaction refused, rejoins, and partitions move again.
	awake := time.Now()
	testenv.WaitFor(t, ctx, "both instances awake a while", func() bool { sink.maybeKill(); out.poll(ctx); return time.Since(awake) > 8*time.Second })
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, _ = second.Process.Wait()
	if err := first.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	_, _ = first.Process.Wait()
	t.Logf("zombie: both stopped at %d outcome records", out.outcomes())
}
