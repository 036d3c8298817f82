package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/admin"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// adminToken is the admin endpoint's token in these tests, of subject
// oncall.
const adminToken = "oncall:0123456789abcdef0123456789abcdef"

// Each operator action end to end on the real broker: issued by the CLI,
// the admin endpoint or the library, decided by a real `driftguard
// process` in order with the key's events, the entity's state and outcome
// rows after it checked, one action issued while the processor is killed
// and another just before it is killed mid-stream, each decided once; and
// the rows in ClickHouse.
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
	runServices(t, ctx, "sink", sinkch.New(sinkch.Options{Config: cfg, Brokers: brokers, Conn: chConn, Logger: testenv.Logger(t)}))
	out := newActionOutputs(t, brokers, wf, ord)

	runner := newProcessRunner(t, dir, configFile, brokers, wf, ord)
	ops := freeLoopbackAddr(t)
	startProc := func() *exec.Cmd {
		return runner.startTo("p0", testenv.LogWriter(t), "DRIFTGUARD_TELEMETRY_ADDR="+ops, "DRIFTGUARD_ADMIN_TOKEN="+adminToken)
	}
	proc := startProc()
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

	// skip-gap through the CLI: 2 never comes; 3 and 4 apply, 2 is skipped.
	produce(wf, "op-skip", step("op-skip", 1), step("op-skip", 3), step("op-skip", 4))
	waitOutcome(wf, "op-skip-4", record.Buffered)
	r := runCLI(t, "admin", "skip-gap", "--config", configFile, "--stream", wf, "--key", "op-skip", "--as", "alice", "--reason", "INC-7")
	if r.code != 0 || !strings.Contains(r.stdout, "actioned") || !strings.Contains(r.stdout, "sequences 2..2") || !strings.Contains(r.stdout, "event op-skip-4 version 4") {
		t.Fatalf("admin skip-gap: %v", r)
	}
	rows := out.waitAction(t, wf, "op-skip", record.ActionSkipGap, 4)
	if got := actionRows(rows); got != "actioned/ skipped/2+1 applied/3 applied/4" || rows[0].RequestedBy != "alice" {
		t.Fatalf("skip-gap rows: %s, requested by %q", got, rows[0].RequestedBy)
	}
	produce(wf, "op-skip", step("op-skip", 5), step("op-skip", 2))
	waitOutcome(wf, "op-skip-5", record.Applied)
	waitOutcome(wf, "op-skip-2", record.Stale)

	// abandon through the endpoint on the processor's operations port,
	// after it refused a request without the token or with a wrong one.
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
	status, res := postAdmin(t, ctx, url, bearer, `{"reason":"operation cancelled upstream"}`)
	if status != http.StatusOK || res.Outcome() != record.Actioned || actionRows(res.Decisions) != "actioned/ rejected/3terminal" || res.Decisions[0].RequestedBy != "oncall" {
		t.Fatalf("abandon over HTTP: %d %+v", status, res)
	}
	produce(wf, "op-ab", step("op-ab", 2))
	waitOutcome(wf, "op-ab-2", record.Rejected)
	out.waitState(t, wf, "op-ab", func(st record.State) bool { return strings.Contains(string(st.State), `"abandoned":true`) })
	// An action the policy has no use for is refused, and says why.
	status, res = postAdmin(t, ctx, "http://"+ops+"/admin/v1/streams/"+ord+"/keys/o-1/actions/skip-gap", bearer, "")
	if status != http.StatusConflict || res.Outcome() != record.Rejected || res.Decisions[0].Reason != record.ReasonActionNotSupported {
		t.Fatalf("skip-gap on orders: %d %+v", status, res)
	}

	// release through the library: the waiting child expires to the DLQ.
	conn, err := kafka.Connect(cfg, brokers)
	if err != nil {
		t.Fatal(err)
	}
	issuer := admin.NewIssuer(cfg, conn)
	produce(ord, "o-1", `{"event_id":"pay-1","event_type":"order.payment_received","parent_id":"o-1","payload":{}}`)
	waitOutcome(ord, "pay-1", record.Quarantined)
	rel, err := issuer.Issue(ctx, admin.Request{Stream: ord, Key: "o-1", Action: record.ActionRelease, RequestedBy: "bob"}, time.Minute)
	if err != nil || rel.Pending || actionRows(rel.Decisions) != "actioned/ expired/0released" {
		t.Fatalf("release: %v %+v", err, rel)
	}
	testenv.WaitFor(t, ctx, "the released child in the DLQ", func() bool { out.poll(); return len(out.dlq[ord]) > 0 })
	if dl := out.dlq[ord]; len(dl) != 1 || dl[0].Reason != record.ReasonReleased || dl[0].EventID != "pay-1" {
		t.Fatalf("the DLQ holds %+v, want the released child", dl)
	}

	// reset through the CLI: refused without --yes, then the key starts over.
	if r := runCLI(t, "admin", "reset", "--config", configFile, "--stream", wf, "--key", "op-skip"); r.code != 2 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("reset without --yes: %v", r)
	}
	if r := runCLI(t, "admin", "reset", "--config", configFile, "--stream", wf, "--key", "op-skip", "--yes", "--as", "alice"); r.code != 0 || !strings.Contains(r.stdout, "actioned") {
		t.Fatalf("reset: %v", r)
	}
	produce(wf, "op-skip", wfStep("op-skip", 1, "op-skip-again-1"))
	if o := waitOutcome(wf, "op-skip-again-1", record.Applied); o.Version != 1 {
		t.Fatalf("first step after reset: %+v", o)
	}

	// An action issued while the processor is down is pending, and decided
	// once when it is back.
	sigkill(t, proc)
	produce(wf, "op-kill", step("op-kill", 1), step("op-kill", 3))
	pending, err := issuer.Issue(ctx, admin.Request{Stream: wf, Key: "op-kill", Action: record.ActionSkipGap, RequestedBy: "carol"}, 200*time.Millisecond)
	if err != nil || !pending.Pending || pending.EventID == "" {
		t.Fatalf("issued with no processor: %v %+v", err, pending)
	}
	proc = startProc()
	waitOutcome(wf, pending.EventID, record.Actioned)
	// Another, with steps before and after it, and the processor killed
	// as soon as the action is written, while it works through them.
	var bodies []string
	for seq := 1; seq <= 40; seq += 2 {
		bodies = append(bodies, step("op-kill2", seq))
	}
	produce(wf, "op-kill2", bodies...)
	mid, err := issuer.Issue(ctx, admin.Request{Stream: wf, Key: "op-kill2", Action: record.ActionSkipGap, RequestedBy: "carol"}, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	sigkill(t, proc)
	produce(wf, "op-kill2", step("op-kill2", 40), step("op-kill2", 42))
	proc = startProc()
	waitOutcome(wf, "op-kill2-42", record.Buffered)
	rows = out.waitAction(t, wf, "op-kill2", record.ActionSkipGap, 39)
	if got := actionRows(rows); rows[0].EventID != mid.EventID || strings.Count(got, "actioned") != 1 || strings.Count(got, "skipped") != 19 || strings.Count(got, "applied") != 19 {
		t.Fatalf("action through a kill: %s", got)
	}
	out.decidedOnce(t)

	// ClickHouse holds every row once, the actions named with who asked,
	// and the released child archived as an orphan.
	actioned := len(out.all(func(o record.Outcome) bool { return o.Outcome == record.Actioned }))
	q := func(query string) uint64 {
		var n uint64
		if err := chConn.QueryRow(ctx, fmt.Sprintf(query, cfg.ClickHouse.Database)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.WaitFor(t, ctx, "the actions in ClickHouse", func() bool {
		return q("SELECT count() FROM %s.events WHERE outcome = 'actioned'") == uint64(actioned) &&
			q("SELECT count() FROM %s.orphans WHERE event_id = 'pay-1'") == 1
	})
	if n := q("SELECT count() FROM %s.events WHERE outcome = 'skipped' AND event_type = 'gap'"); n != uint64(len(out.all(func(o record.Outcome) bool { return o.Outcome == record.Skipped }))) {
		t.Errorf("%d skipped rows in ClickHouse", n)
	}
	if n := q("SELECT count() FROM %s.events WHERE event_type = '" + record.ControlType + "' AND visitParamExtractString(payload, 'requested_by') = 'alice'"); n != 2 {
		t.Errorf("%d actions requested by alice in ClickHouse, want 2", n)
	}
	if rows, ids := q("SELECT count() FROM %s.events"), q("SELECT uniqExact(decision_id) FROM %s.events"); rows != ids {
		t.Errorf("ClickHouse holds %d rows of %d decisions", rows, ids)
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
