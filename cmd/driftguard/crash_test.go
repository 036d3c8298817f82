package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"gopkg.in/yaml.v3"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
	"github.com/driftguard/driftguard/processors"
)

// envCrashSeed replays a crash test history: set it to the seed a failure
// logged.
const envCrashSeed = "DRIFTGUARD_CRASH_SEED"

// crashKills is how often the processor is killed.
const crashKills = 6

// About 20,000 deliveries across presence (latest), workflow (gapless) and
// chat (assign), decided by one `driftguard process` that is killed with
// SIGKILL six times at random points while it works, and restarted on the
// same table storage. Afterwards every delivery has one decision, however
// often a restart redelivered it; no event is applied twice; and the state
// topic and the group table equal the model of each policy.
func TestProcessorSurvivesSIGKILLAcrossPolicies(t *testing.T) {
	ctx := testenv.Context(t, 8*time.Minute)
	dir := t.TempDir()
	brokers := testenv.Kafka(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envCrashSeed); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s: %v", envCrashSeed, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, envCrashSeed, seed)
	rng := rand.New(rand.NewPCG(seed, 4))
	history := newCrashHistory(rng, crashSizes{presence: 7000, workflow: 6500, chat: 6500})
	t.Logf("%d deliveries", len(history.inputs))

	// Uniquely named copies of the three shipped streams.
	names := map[string]string{}
	for _, base := range []string{"presence", "workflow", "chat"} {
		names[base] = testenv.UniqueName(base)
	}
	configFile, cfg := writeCatalogueCopies(t, dir, names)
	cfg.Kafka.Brokers = brokers
	cl := testenv.Topics(t, ctx, cfg, brokers)
	defer cl.Close()
	runner := newProcessRunner(t, dir, configFile, brokers, cfg.StreamNames()...)
	out := newOutputReader(t, brokers, names)

	produce := func(ins []*crashInput) error {
		recs := make([]*kgo.Record, len(ins))
		for i, in := range ins {
			recs[i] = inputRecord(names[in.stream], in.key, in.body)
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
	// worth, so that some of its input is always left to decide.
	chunk := len(history.inputs)/(crashKills+1) + 1
	rest := history.inputs
	for kill := range crashKills {
		c := rest[:chunk]
		rest = rest[chunk:]
		if err := produce(c[:len(c)/2]); err != nil {
			t.Fatal(err)
		}
		proc := runner.start("state")
		produced := make(chan error, 1)
		go func() { produced <- produce(c[len(c)/2:]) }()
		target := out.outcomes() + 1 + rng.IntN(len(c))
		testenv.WaitFor(t, ctx, "the processor at its kill point", func() bool { out.poll(ctx); return out.outcomes() >= target })
		sigkill(t, proc)
		if err := <-produced; err != nil {
			t.Fatal(err)
		}
		t.Logf("kill %d at %d outcome records, %d deliveries produced", kill+1, out.outcomes(), len(history.inputs)-len(rest))
	}
	if err := produce(rest); err != nil {
		t.Fatal(err)
	}
	proc := runner.start("state")
	// Waited for with a deadline of its own, so that a delivery never
	// decided is named below rather than timing the test out.
	waitCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	testenv.Poll(waitCtx, func() bool { out.poll(waitCtx); return out.decidedAll(history.inputs) })
	cancel()
	// A clean stop flushes everything; then nothing more can appear.
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, _ = proc.Process.Wait()
	out.readToEnd(ctx)

	decisions := out.checkDecisions(history.inputs)
	checkPresence(t, history, decisions, out.last("presence"))
	checkWorkflow(t, history, decisions, out.last("workflow"))
	checkChat(t, history, decisions, out.last("chat"))
}

// writeCatalogueCopies writes a config file in dir defining each catalogue
// stream again under its new name with three partitions, and returns its
// path and it loaded.
func writeCatalogueCopies(t *testing.T, dir string, names map[string]string) (string, *config.Config) {
	t.Helper()
	catalogue, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	streams := map[string]*config.Stream{}
	for base, name := range names {
		s := *catalogue.Streams[base]
		s.Limits.Partitions = 3
		streams[name] = &s
	}
	data, err := yaml.Marshal(map[string]any{"streams": streams})
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
	t      *testing.T
	cl     *kgo.Client
	base   map[string]string // topic → catalogue stream
	kinds  map[string]string // topic → outcomes, state or table
	count  int
	final  map[inputPos][]record.Outcome
	states map[string]map[string]json.RawMessage // stream → key → last state record
	tables map[string]map[string]json.RawMessage // stream → key → last table value
	next   map[string]map[int32]int64            // topic → partition → next offset
}

func newOutputReader(t *testing.T, brokers []string, names map[string]string) *outputReader {
	t.Helper()
	r := &outputReader{t: t, base: map[string]string{}, kinds: map[string]string{}, final: map[inputPos][]record.Outcome{},
		states: map[string]map[string]json.RawMessage{}, tables: map[string]map[string]json.RawMessage{}, next: map[string]map[int32]int64{}}
	var ts []string
	for base, name := range names {
		n := topics.For(name)
		for kind, topic := range map[string]string{"outcomes": n.Outcomes, "state": n.State, "table": n.Table} {
			r.base[topic], r.kinds[topic] = base, kind
			ts = append(ts, topic)
		}
		r.states[base], r.tables[base] = map[string]json.RawMessage{}, map[string]json.RawMessage{}
	}
	// As the sink reads them: committed records only. Transaction markers
	// are kept to know when a topic is read to its end.
	cl, err := kafka.NewClient(brokers, kgo.ConsumeTopics(ts...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
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
		if rec.Attrs.IsControl() {
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
			// Buffered is a decision to wait; the gap report names no input.
			if o.Outcome != record.Buffered && o.Outcome != record.Expired {
				pos := inputPos{base, o.InputPartition, o.InputOffset}
				r.final[pos] = append(r.final[pos], o)
			}
		}
	})
}

func (r *outputReader) outcomes() int {
	return r.count
}

func (r *outputReader) decidedAll(ins []*crashInput) bool {
	for _, in := range ins {
		if len(r.final[in.pos()]) == 0 {
			return false
		}
	}
	return true
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

// checkDecisions asserts that every delivery has one decision, repeated
// identically if a restart decided its input again, and that no event id
// was applied from two deliveries. It returns each delivery's decision.
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
		if d.Outcome == record.Applied {
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
