package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/admin"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// adminToken is the admin endpoint's token in these tests, of subject
// oncall.
const adminToken = "oncall:0123456789abcdef0123456789abcdef"

// Each operator action end to end on the real broker: issued by the CLI,
// the admin endpoint or the library, decided by a real `driftguard
// process` in order with the key's events, the entity's state and outcome
// rows after it checked. The processor is killed in the middle of deciding
// each of the four actions (killMidDecision), and each is decided once
// after the restart: one row of its own among the committed outcomes and
// in ClickHouse, naming the action and who asked, the issuer's answer and
// its `admin action decided` line naming that decision, and the processor's
// log line from the killed instance and from its successor. One more action is issued while
// the processor is down, and decided once when it is back.
func TestOperatorActionsEndToEnd(t *testing.T) {
	ctx := testenv.Context(t, 4*time.Minute)
	dir := t.TempDir()
	names := map[string]string{"workflow": testenv.UniqueName("wfa"), "orders": testenv.UniqueName("ora")}
	wf, ord := names["workflow"], names["orders"]
	configFile, _ := writeCatalogueCopies(t, dir, names, func(string, *config.Stream) {}, map[string]any{
		"clickhouse": map[string]any{"consumer_group": wf + "-sink", "batch_period": "100ms"},
	})
	cfg, chConn, cl := loadOnServices(t, ctx, configFile, "actions", wf, ord)
	brokers := cfg.Kafka.Brokers
	out := newActionOutputs(t, brokers, wf, ord)
	written := newWrittenOutcomes(t, brokers, wf, ord)

	// The processor reaches the broker through a proxy that can hold back
	// the acks of its writes; the sink, the issuers and the test's readers
	// reach it directly. The admin endpoint is the sink's: a request to it
	// outlives the processor killed while it waits for the decision.
	proxy := testenv.NewKafkaProxy(t, brokers)
	runner := newProcessRunner(t, dir, configFile, proxy.Addrs(), wf, ord)
	var procLogs, sinkLogs testenv.SyncBuffer
	startProc := func() *exec.Cmd {
		return runner.startTo("p0", io.MultiWriter(testenv.LogWriter(t), &procLogs), "DRIFTGUARD_LOG_LEVEL=info")
	}
	proc := startProc()
	ops := freeLoopbackAddr(t)
	startSinkTo(t, io.MultiWriter(testenv.LogWriter(t), &sinkLogs), runner.bin, configFile, cfg,
		"DRIFTGUARD_TELEMETRY_ADDR="+ops, "DRIFTGUARD_ADMIN_TOKEN="+adminToken, "DRIFTGUARD_LOG_LEVEL=info")
	produce := func(stream, key string, bodies ...string) {
		t.Helper()
		for _, b := range bodies {
			if err := cl.ProduceSync(ctx, inputRecord(stream, key, []byte(b))).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	wfStep := func(key string, seq int, id string) string {
		return fmt.Sprintf(`{"event_id":%q,"operation_id":%q,"sequence":%d,"status":"progress","occurred_at":"2026-01-01T00:00:00Z"}`, id, key, seq)
	}
	step := func(key string, seq int) string { return wfStep(key, seq, fmt.Sprintf("%s-%d", key, seq)) }
	waitOutcome := func(stream, eventID string, want record.Result) record.Outcome {
		t.Helper()
		var got record.Outcome
		testenv.WaitFor(t, ctx, fmt.Sprintf("%s %s", eventID, want), func() bool {
			var ok bool
			got, ok = out.find(stream, func(o record.Outcome) bool { return o.EventID == eventID && o.Outcome == want })
			return ok
		})
		return got
	}
	t.Setenv("DRIFTGUARD_KAFKA_BROKERS", strings.Join(brokers, ","))

	// killMidDecision issues an action with issue, in the background, and
	// kills the processor while it decides it. The proxy holds back the
	// acks of the processor's writes to the stream's outcomes, so the
	// transaction that decides the action cannot commit: the processor is
	// killed once the action's own row is written (read uncommitted) and
	// its ack is held, the partition's last stable offset not past the row
	// before the kill nor after it. The processor is started again, issue
	// awaited (it returns once it has the decision), and the decision read
	// again as the successor writes it. It returns the killed attempt's row.
	killMidDecision := func(stream, key string, action record.ActionName, issue func()) writtenOutcome {
		t.Helper()
		proxy.HoldAcks(naming.Prefixes{}.For(stream).Outcomes)
		issued := make(chan struct{})
		go func() { defer close(issued); issue() }()
		var killed writtenOutcome
		found := false
		testenv.WaitFor(t, ctx, fmt.Sprintf("the %s row of %s written", action, key), func() bool {
			killed, found = written.find(func(o writtenOutcome) bool {
				return o.Key == key && o.Action == action && o.EventType == record.ControlType
			})
			return found || isClosed(issued)
		})
		if !found {
			t.Fatalf("%s on %s: the issuer returned before the processor wrote a decision", action, key)
		}
		testenv.WaitFor(t, ctx, "the ack of the processor's write held back", func() bool { return proxy.Holding() > 0 })
		written.checkOpen(t, ctx, killed, "before the kill")
		sigkill(t, proc)
		written.checkOpen(t, ctx, killed, "after the kill")
		t.Logf("killed deciding %s on %s: its row at %s/%d@%d written, not committed", action, key, killed.topic, killed.partition, killed.offset)
		testenv.WaitFor(t, ctx, "the killed processor's held acks dropped", func() bool { return proxy.Holding() == 0 })
		proxy.ReleaseAcks()
		proc = startProc()
		<-issued
		testenv.WaitFor(t, ctx, fmt.Sprintf("the %s row of %s written again", action, key), func() bool {
			_, again := written.find(func(o writtenOutcome) bool {
				return o.DecisionID == killed.DecisionID && o.partition == killed.partition && o.offset > killed.offset
			})
			return again
		})
		return killed
	}
	// checkAction checks that the action whose killed attempt wrote killed
	// has one row of its own among the committed outcomes, as asked by
	// who; that the issuer's `admin action decided` line (in issuerLogs,
	// via the CLI or HTTP) names it once, actioned, as asked by who; and
	// that the processor logged it from the killed instance and again from
	// its successor, each line naming who.
	checkAction := func(killed writtenOutcome, who, via string, issuerLogs func() string) {
		t.Helper()
		testenv.WaitFor(t, ctx, fmt.Sprintf("the committed %s row of %s", killed.Action, killed.Key), func() bool {
			_, ok := out.find(killed.Stream, func(o record.Outcome) bool { return o.DecisionID == killed.DecisionID })
			return ok
		})
		own := out.all(func(o record.Outcome) bool { return o.DecisionID == killed.DecisionID })
		if len(own) != 1 || own[0].RequestedBy != who || own[0].Action != killed.Action || own[0].EventID != killed.EventID {
			t.Errorf("%s on %s: committed rows %+v, want one requested by %s", killed.Action, killed.Key, own, who)
		}
		decided := []string{"event_id", killed.EventID, "requested_by", who, "via", via, "outcome", string(record.Actioned)}
		testenv.WaitFor(t, ctx, fmt.Sprintf("the issuer's line of %s on %s", killed.Action, killed.Key), func() bool {
			return loggedLines(issuerLogs(), "admin action decided", decided...) > 0
		})
		if n := loggedLines(issuerLogs(), "admin action decided", "event_id", killed.EventID); n != 1 {
			t.Errorf("%s on %s: the issuer logged it %d times, want 1", killed.Action, killed.Key, n)
		}
		testenv.WaitFor(t, ctx, fmt.Sprintf("the processor's lines of %s on %s", killed.Action, killed.Key), func() bool {
			return loggedLines(procLogs.String(), "operator action decided", "event_id", killed.EventID) >= 2
		})
		logs := procLogs.String()
		if all, named := loggedLines(logs, "operator action decided", "event_id", killed.EventID),
			loggedLines(logs, "operator action decided", "event_id", killed.EventID, "requested_by", who, "stream", killed.Stream, "key", killed.Key); named != all {
			t.Errorf("%s on %s: %d of the processor's %d lines name %s", killed.Action, killed.Key, named, all, who)
		}
	}
	cliLogs := func(r *result) func() string { return func() string { return r.stderr } }

	// skip-gap through the CLI: 2 never comes; 3 and 4 apply, 2 is skipped.
	produce(wf, "op-skip", step("op-skip", 1), step("op-skip", 3), step("op-skip", 4))
	waitOutcome(wf, "op-skip-4", record.Buffered)
	var r result
	killed := killMidDecision(wf, "op-skip", record.ActionSkipGap, func() {
		r = runCLI(t, "admin", "skip-gap", "--config", configFile, "--stream", wf, "--key", "op-skip", "--as", "alice", "--reason", "INC-7", "--wait", "1m")
	})
	if r.code != 0 || !strings.Contains(r.stdout, "actioned") || !strings.Contains(r.stdout, "sequences 2..2") || !strings.Contains(r.stdout, "event op-skip-4 version 4") ||
		!strings.Contains(r.stdout, killed.EventID) {
		t.Fatalf("admin skip-gap: %v", r)
	}
	rows := out.waitAction(t, wf, "op-skip", record.ActionSkipGap, 4)
	if got := actionRows(rows); got != "actioned/ skipped/2+1 applied/3 applied/4" || rows[0].RequestedBy != "alice" {
		t.Fatalf("skip-gap rows: %s, requested by %q", got, rows[0].RequestedBy)
	}
	checkAction(killed, "alice", "cli", cliLogs(&r))
	produce(wf, "op-skip", step("op-skip", 5), step("op-skip", 2))
	waitOutcome(wf, "op-skip-5", record.Applied)
	waitOutcome(wf, "op-skip-2", record.Stale)

	// abandon through the endpoint on the sink's operations port, after it
	// refused a request without the token or with a wrong one.
	produce(wf, "op-ab", step("op-ab", 1), step("op-ab", 3))
	waitOutcome(wf, "op-ab-3", record.Buffered)
	url := "http://" + ops + "/admin/v1/streams/" + wf + "/keys/op-ab/actions/abandon"
	testenv.WaitFor(t, ctx, "the operations port", func() bool { s, _ := get(t, "http://"+ops+"/healthz"); return s == http.StatusOK })
	for _, auth := range []string{"", "Bearer wrong-token-0123456789abcdef01", "Bearer " + strings.TrimPrefix(adminToken, "oncall:") + "x"} {
		if status, _ := postAdmin(t, ctx, url, auth, ""); status != http.StatusUnauthorized {
			t.Fatalf("admin request with Authorization %q: %d, want 401", auth, status)
		}
	}
	bearer := "Bearer " + strings.TrimPrefix(adminToken, "oncall:")
	var status int
	var res *admin.Result
	killed = killMidDecision(wf, "op-ab", record.ActionAbandon, func() {
		status, res = postAdmin(t, ctx, url, bearer, `{"reason":"operation cancelled upstream"}`)
	})
	if status != http.StatusOK || res.Outcome() != record.Actioned || actionRows(res.Decisions) != "actioned/ rejected/3terminal" || res.Decisions[0].RequestedBy != "oncall" ||
		res.Decisions[0].DecisionID != killed.DecisionID {
		t.Fatalf("abandon over HTTP: %d %+v", status, res)
	}
	checkAction(killed, "oncall", "http", sinkLogs.String)
	produce(wf, "op-ab", step("op-ab", 2))
	waitOutcome(wf, "op-ab-2", record.Rejected)
	out.waitState(t, wf, "op-ab", func(st record.State) bool { return strings.Contains(string(st.State), `"abandoned":true`) })
	// An action the policy has no use for is refused, and says why.
	status, res = postAdmin(t, ctx, "http://"+ops+"/admin/v1/streams/"+ord+"/keys/o-1/actions/skip-gap", bearer, "")
	if status != http.StatusConflict || res.Outcome() != record.Rejected || res.Decisions[0].Reason != record.ReasonActionNotSupported {
		t.Fatalf("skip-gap on orders: %d %+v", status, res)
	}

	// release through the CLI: the waiting child expires to the DLQ.
	produce(ord, "o-1", `{"event_id":"pay-1","event_type":"order.payment_received","parent_id":"o-1","payload":{}}`)
	waitOutcome(ord, "pay-1", record.Quarantined)
	killed = killMidDecision(ord, "o-1", record.ActionRelease, func() {
		r = runCLI(t, "admin", "release", "--config", configFile, "--stream", ord, "--key", "o-1", "--as", "bob", "--wait", "1m")
	})
	if r.code != 0 || !strings.Contains(r.stdout, "actioned") || !strings.Contains(r.stdout, "released event pay-1") {
		t.Fatalf("admin release: %v", r)
	}
	if rows := out.waitAction(t, ord, "o-1", record.ActionRelease, 2); actionRows(rows) != "actioned/ expired/0released" {
		t.Fatalf("release rows: %s", actionRows(rows))
	}
	checkAction(killed, "bob", "cli", cliLogs(&r))
	testenv.WaitFor(t, ctx, "the released child in the DLQ", func() bool { out.poll(); return len(out.dlq[ord]) > 0 })
	if dl := out.dlq[ord]; len(dl) != 1 || dl[0].Reason != record.ReasonReleased || dl[0].EventID != "pay-1" {
		t.Fatalf("the DLQ holds %+v, want the released child", dl)
	}

	// reset through the CLI: refused without --yes, then the key starts over.
	if r := runCLI(t, "admin", "reset", "--config", configFile, "--stream", wf, "--key", "op-skip"); r.code != 2 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("reset without --yes: %v", r)
	}
	killed = killMidDecision(wf, "op-skip", record.ActionReset, func() {
		r = runCLI(t, "admin", "reset", "--config", configFile, "--stream", wf, "--key", "op-skip", "--yes", "--as", "alice", "--wait", "1m")
	})
	if r.code != 0 || !strings.Contains(r.stdout, "actioned") {
		t.Fatalf("reset: %v", r)
	}
	checkAction(killed, "alice", "cli", cliLogs(&r))
	produce(wf, "op-skip", wfStep("op-skip", 1, "op-skip-again-1"))
	if o := waitOutcome(wf, "op-skip-again-1", record.Applied); o.Version != 1 {
		t.Fatalf("first step after reset: %+v", o)
	}
	// A gap after the reset, at the sequence skipped before it: open.
	produce(wf, "op-skip", wfStep("op-skip", 3, "op-skip-again-3"))
	waitOutcome(wf, "op-skip-again-3", record.Buffered)

	// An action issued through the library while the processor is down is
	// pending, and decided once when it is back.
	conn, err := kafka.Connect(cfg, brokers)
	if err != nil {
		t.Fatal(err)
	}
	sigkill(t, proc)
	produce(wf, "op-kill", step("op-kill", 1), step("op-kill", 3))
	pending, err := admin.NewIssuer(cfg, conn).Issue(ctx, admin.Request{Stream: wf, Key: "op-kill", Action: record.ActionSkipGap, RequestedBy: "carol"}, 200*time.Millisecond)
	if err != nil || !pending.Pending || pending.EventID == "" {
		t.Fatalf("issued with no processor: %v %+v", err, pending)
	}
	proc = startProc()
	waitOutcome(wf, pending.EventID, record.Actioned)
	if rows := out.waitAction(t, wf, "op-kill", record.ActionSkipGap, 3); actionRows(rows) != "actioned/ skipped/2+1 applied/3" || rows[0].RequestedBy != "carol" {
		t.Fatalf("pending skip-gap rows: %s", actionRows(rows))
	}
	out.decidedOnce(t)

	// ClickHouse holds every row once, each action once with who asked,
	// and the released child archived as an orphan.
	q := func(query string) uint64 {
		var n uint64
		if err := chConn.QueryRow(ctx, fmt.Sprintf(query, cfg.ClickHouse.Database)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.WaitFor(t, ctx, "the outcomes in ClickHouse", func() bool {
		out.poll()
		return q("SELECT count() FROM %s.events") == uint64(len(out.all(func(record.Outcome) bool { return true }))) &&
			q("SELECT count() FROM %s.orphans WHERE event_id = 'pay-1'") == 1
	})
	if rows, ids := q("SELECT count() FROM %s.events"), q("SELECT uniqExact(decision_id) FROM %s.events"); rows != ids {
		t.Errorf("ClickHouse holds %d rows of %d decisions", rows, ids)
	}
	if n := q("SELECT count() FROM %s.events WHERE outcome = 'skipped' AND event_type = 'gap'"); n != 2 {
		t.Errorf("%d skipped rows in ClickHouse, want 2", n)
	}
	actions, err := chConn.Query(ctx, fmt.Sprintf("SELECT visitParamExtractString(payload, 'requested_by') AS who, visitParamExtractString(payload, 'action') AS act, outcome, count() "+
		"FROM %s.events WHERE event_type = '%s' GROUP BY who, act, outcome ORDER BY who, act, outcome", cfg.ClickHouse.Database, record.ControlType))
	if err != nil {
		t.Fatal(err)
	}
	defer actions.Close()
	var got []string
	for actions.Next() {
		var who, action, outcome string
		var n uint64
		if err := actions.Scan(&who, &action, &outcome, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %s %s %d", who, action, outcome, n))
	}
	if want := "alice reset actioned 1, alice skip-gap actioned 1, bob release actioned 1, carol skip-gap actioned 1, oncall abandon actioned 1, oncall skip-gap rejected 1"; strings.Join(got, ", ") != want {
		t.Errorf("the actions in ClickHouse:\n%s\nwant\n%s", strings.Join(got, ", "), want)
	}

	// Of the gaps the processor asked to be replayed (op-skip's from 2
	// twice, op-ab's, op-kill's, and op-skip's again after its reset),
	// only the last is open: the others were skipped, or their key
	// abandoned, after they were asked for (gaps_never_filled in
	// docs/analyst-queries.md).
	testenv.WaitFor(t, ctx, "the replay requests in ClickHouse", func() bool {
		return q("SELECT count() FROM %s.replay_requests") == 5
	})
	h := &history{t: t, ctx: ctx, cfg: cfg, conn: chConn, streams: map[string]string{"workflow": wf}}
	gaps := h.query(h.localize(analystQueries(t)["gaps_never_filled"]))
	if len(gaps) != 1 || gaps[0][0] != "op-skip" || gaps[0][1] != int64(2) || gaps[0][3] != uint64(1) {
		t.Errorf("gaps never filled: %v, want op-skip's from 2 asked once after its reset", gaps)
	}
}

// postAdmin POSTs to an admin endpoint with the Authorization header auth
// and body, and returns the status and the result it answered.
func postAdmin(t *testing.T, ctx context.Context, url, auth, body string) (int, *admin.Result) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res admin.Result
	_ = json.NewDecoder(resp.Body).Decode(&res)
	return resp.StatusCode, &res
}

// actionRows is each decision as outcome/version plus reason, the
// version after + the gap of a skipped row, separated by spaces; the
// action's own row shows no version.
func actionRows(rows []record.Outcome) string {
	var parts []string
	for _, o := range rows {
		switch {
		case o.EventType == record.ControlType:
			parts = append(parts, string(o.Outcome)+"/"+string(o.Reason))
		case o.Outcome == record.Skipped:
			parts = append(parts, fmt.Sprintf("skipped/%d+%d", o.Version, o.Gap))
		default:
			parts = append(parts, fmt.Sprintf("%s/%d%s", o.Outcome, o.Version, o.Reason))
		}
	}
	return strings.Join(parts, " ")
}

// actionOutputs reads the outcomes and state records of streams as the
// sink does, committed only.
type actionOutputs struct {
	cl       *kgo.Client
	outcomes map[string][]record.Outcome        // stream → in order of each partition
	states   map[string]map[string]record.State // stream → key → last state
	dlq      map[string][]record.DeadLetter
	topics   map[string]string // topic → stream
}

func newActionOutputs(t *testing.T, brokers []string, streams ...string) *actionOutputs {
	t.Helper()
	o := &actionOutputs{outcomes: map[string][]record.Outcome{}, states: map[string]map[string]record.State{}, dlq: map[string][]record.DeadLetter{}, topics: map[string]string{}}
	var ts []string
	for _, s := range streams {
		n := naming.Prefixes{}.For(s)
		o.topics[n.Outcomes], o.topics[n.State], o.topics[n.DLQ] = s, s, s
		o.states[s] = map[string]record.State{}
		ts = append(ts, n.Outcomes, n.State, n.DLQ)
	}
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.ConsumeTopics(ts...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	o.cl = cl
	return o
}

// poll reads what has arrived within a moment.
func (o *actionOutputs) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	o.cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
		stream := o.topics[r.Topic]
		if strings.HasSuffix(r.Topic, ".dlq") {
			var dl record.DeadLetter
			if json.Unmarshal(r.Value, &dl) == nil {
				o.dlq[stream] = append(o.dlq[stream], dl)
			}
			return
		}
		if strings.HasSuffix(r.Topic, ".state") {
			var st record.State
			if json.Unmarshal(r.Value, &st) == nil {
				o.states[stream][st.Key] = st
			}
			return
		}
		var out record.Outcome
		if json.Unmarshal(r.Value, &out) == nil {
			o.outcomes[stream] = append(o.outcomes[stream], out)
		}
	})
}

// find polls once and returns the first outcome of stream match accepts.
func (o *actionOutputs) find(stream string, match func(record.Outcome) bool) (record.Outcome, bool) {
	o.poll()
	for _, out := range o.outcomes[stream] {
		if match(out) {
			return out, true
		}
	}
	return record.Outcome{}, false
}

// action is every row of stream's actions of kind on key, in order.
func (o *actionOutputs) action(stream, key string, kind record.ActionName) []record.Outcome {
	var rows []record.Outcome
	for _, out := range o.outcomes[stream] {
		if out.Key == key && out.Action == kind {
			rows = append(rows, out)
		}
	}
	return rows
}

// waitAction waits for n rows of action kind on key, and returns them.
func (o *actionOutputs) waitAction(t *testing.T, stream, key string, kind record.ActionName, n int) []record.Outcome {
	t.Helper()
	testenv.WaitFor(t, testenv.Context(t, time.Minute), fmt.Sprintf("%d rows of %s on %s", n, kind, key), func() bool {
		o.poll()
		return len(o.action(stream, key, kind)) >= n
	})
	return o.action(stream, key, kind)
}

func (o *actionOutputs) all(match func(record.Outcome) bool) []record.Outcome {
	var rows []record.Outcome
	for _, outs := range o.outcomes {
		for _, out := range outs {
			if match(out) {
				rows = append(rows, out)
			}
		}
	}
	return rows
}

// waitState waits for a state record of key that ok accepts.
func (o *actionOutputs) waitState(t *testing.T, stream, key string, ok func(record.State) bool) {
	t.Helper()
	testenv.WaitFor(t, testenv.Context(t, time.Minute), "the state of "+key, func() bool {
		o.poll()
		st, found := o.states[stream][key]
		return found && ok(st)
	})
}

// decidedOnce checks that no decision id was written twice.
func (o *actionOutputs) decidedOnce(t *testing.T) {
	t.Helper()
	seen := map[string]bool{}
	for _, out := range o.all(func(record.Outcome) bool { return true }) {
		if seen[out.DecisionID] {
			t.Errorf("decision %s written twice", out.DecisionID)
		}
		seen[out.DecisionID] = true
	}
}

// writtenOutcomes reads the outcome records of streams as they are
// written, read uncommitted as no sink reads them: a decision is there
// before its transaction commits, and one whose transaction aborts stays.
type writtenOutcomes struct {
	cl   *kgo.Client
	adm  *kadm.Client
	rows []writtenOutcome
}

// writtenOutcome is an outcome record and where it was written.
type writtenOutcome struct {
	record.Outcome
	topic     string
	partition int32
	offset    int64
}

func newWrittenOutcomes(t *testing.T, brokers []string, streams ...string) *writtenOutcomes {
	t.Helper()
	var ts []string
	for _, s := range streams {
		ts = append(ts, naming.Prefixes{}.For(s).Outcomes)
	}
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.ConsumeTopics(ts...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &writtenOutcomes{cl: cl, adm: kadm.NewClient(cl)}
}

// find polls once and returns the first record match accepts.
func (w *writtenOutcomes) find(match func(writtenOutcome) bool) (writtenOutcome, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	w.cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
		var o record.Outcome
		if json.Unmarshal(r.Value, &o) == nil {
			w.rows = append(w.rows, writtenOutcome{Outcome: o, topic: r.Topic, partition: r.Partition, offset: r.Offset})
		}
	})
	for _, o := range w.rows {
		if match(o) {
			return o, true
		}
	}
	return writtenOutcome{}, false
}

// checkOpen fails the test unless the transaction that wrote o is still
// open: its partition's last stable offset, where read_committed readers
// stop, is not past it.
func (w *writtenOutcomes) checkOpen(t *testing.T, ctx context.Context, o writtenOutcome, when string) {
	t.Helper()
	stable, err := w.adm.ListCommittedOffsets(ctx, o.topic)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	if lso, _ := stable.Lookup(o.topic, o.partition); lso.Offset > o.offset {
		t.Fatalf("%s, %s/%d is stable up to %d, past the %s row at %d: its transaction committed", when, o.topic, o.partition, lso.Offset, o.Action, o.offset)
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// loggedLines counts the JSON lines of logs with message msg and each
// attribute of attrs (name, value pairs) as given.
func loggedLines(logs, msg string, attrs ...string) int {
	n := 0
	for line := range strings.Lines(logs) {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil || entry["msg"] != msg {
			continue
		}
		matches := true
		for i := 0; i+1 < len(attrs); i += 2 {
			matches = matches && fmt.Sprint(entry[attrs[i]]) == attrs[i+1]
		}
		if matches {
			n++
		}
	}
	return n
}

// The admin endpoints are on the operations port only: the webhook port
// has no admin route, and the operations port refuses a request without
// the token or with a wrong one.
func TestAdminEndpointOnTheOperationsPortOnly(t *testing.T) {
	webhooks, ops := runIngestOnKfake(t, "DRIFTGUARD_ADMIN_TOKEN="+adminToken)
	path := "/admin/v1/streams/workflow/keys/op-1/actions/abandon"
	bearer := "Bearer " + strings.TrimPrefix(adminToken, "oncall:")
	ctx := testenv.Context(t, time.Minute)
	if status, _ := postAdmin(t, ctx, "http://"+webhooks+path, bearer, ""); status != http.StatusNotFound {
		t.Errorf("the webhook port answers an admin request with %d, want 404", status)
	}
	for _, auth := range []string{"", "Basic b25jYWxsOnNlY3JldA==", "Bearer 0123456789abcdef0123456789abcdeF"} {
		if status, _ := postAdmin(t, ctx, "http://"+ops+path, auth, ""); status != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, status)
		}
	}
	// With the token, a request the catalogue cannot take is refused
	// before anything is written.
	if status, _ := postAdmin(t, ctx, "http://"+ops+"/admin/v1/streams/nope/keys/k/actions/abandon", bearer, ""); status != http.StatusNotFound {
		t.Errorf("an unknown stream: %d, want 404", status)
	}
	if status, _ := postAdmin(t, ctx, "http://"+ops+"/admin/v1/streams/workflow/keys/k/actions/explode", bearer, ""); status != http.StatusBadRequest {
		t.Errorf("an unknown action: %d, want 400", status)
	}
	// Inspect and explain are served there too, behind the same token:
	// an unknown stream is their problem answer, not the mux's 404 page.
	for _, path := range []string{"/admin/v1/streams/nope/keys/k", "/admin/v1/streams/nope/events/e1"} {
		for auth, want := range map[string]int{"": http.StatusUnauthorized, bearer: http.StatusNotFound} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ops+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want || want == http.StatusNotFound && resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("GET %s with %q: %d %s, want %d", path, auth, resp.StatusCode, resp.Header.Get("Content-Type"), want)
			}
		}
	}
}

// Without a token the admin endpoints are off; a token too short refuses
// to start.
func TestAdminEndpointOffWithoutAToken(t *testing.T) {
	_, ops := runIngestOnKfake(t)
	if status, _ := postAdmin(t, testenv.Context(t, time.Minute), "http://"+ops+"/admin/v1/streams/workflow/keys/k/actions/abandon", "Bearer x", ""); status != http.StatusNotFound {
		t.Errorf("no token configured: %d, want 404", status)
	}
	isolateEnv(t)
	t.Setenv("DRIFTGUARD_ADMIN_TOKEN", "oncall:short")
	t.Setenv("DRIFTGUARD_KAFKA_BROKERS", strings.Join(testenv.Fake(t), ","))
	t.Setenv("DRIFTGUARD_TELEMETRY_ADDR", freeLoopbackAddr(t))
	if r := runCLI(t, "process"); r.code == 0 || !strings.Contains(r.stderr, "telemetry.admin_token") {
		t.Errorf("a short admin token: %v", r)
	}
}
