package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// analystDoc holds the analyst queries; the test runs them from there, so
// the documentation cannot drift from what is tested.
const analystDoc = "../../docs/analyst-queries.md"

// orphanTTL is the orders stream's parent TTL in this test: short, so the
// orphans expire while the test waits.
const orphanTTL = 3 * time.Second

// Every query of docs/analyst-queries.md, on the data of a known history of
// the presence, workflow, chat and orders streams pushed through the real
// processors and sink, returns the numbers the history implies.
func TestAnalystQueriesOnPipelineData(t *testing.T) {
	ctx := testenv.Context(t, 3*time.Minute)
	brokers := testenv.Kafka(t)
	queries := analystQueries(t)

	h := newHistory(t, ctx, brokers)
	h.presence()
	h.workflow()
	h.chat()
	h.chatMembership()
	h.orders()
	h.produceAll()
	h.waitForSink()
	h.waitForChatStates()
	h.queries = queries

	checks := map[string]func([][]any){
		"presence_now":                  h.checkPresenceNow,
		"ordering_per_minute":           h.checkOrderingPerMinute,
		"gap_sizes":                     h.checkGapSizes,
		"gaps_by_entity":                h.checkGapsByEntity,
		"latency_and_lateness":          h.checkLatencyAndLateness,
		"orphans_reconciled_vs_expired": h.checkOrphanCounts,
		"orphans_expired":               h.checkOrphansExpired,
		"workflows_stuck":               h.checkWorkflowsStuck,
		"chat_messages":                 h.checkChatMessages,
		"chat_readers":                  h.checkChatReaders,
		"chat_readers_shared":           h.checkChatReadersShared,
		"chat_delivered":                h.checkChatDelivered,
		"decisions_by_input":            h.checkDecisionsByInput,
		"decisions_once":                h.checkDecisionsOnce,
		"replay_requests":               h.checkReplayRequests,
		"gaps_never_filled":             h.checkGapsNeverFilled,
	}
	for name := range checks {
		if _, ok := queries[name]; !ok {
			t.Errorf("%s has no query named %s", analystDoc, name)
		}
	}
	for name, sql := range queries {
		check, ok := checks[name]
		if !ok {
			t.Errorf("query %s of %s is not checked by this test: add its expected result", name, analystDoc)
			continue
		}
		t.Run(name, func(t *testing.T) {
			h.t = t
			rows := h.query(h.localize(sql))
			t.Logf("%s returns\n%s", name, formatRows(rows))
			check(rows)
		})
	}
	h.t = t
	// Every decision counted once by the view, whatever the blocks were.
	var decisions, counted uint64
	h.scalar("SELECT count() FROM %s.events", &decisions)
	h.scalar("SELECT sum(events) FROM %s.ordering_minute", &counted)
	if decisions != uint64(len(h.decisions)) || counted != decisions {
		t.Errorf("events holds %d decisions and ordering_minute counts %d; the history has %d", decisions, counted, len(h.decisions))
	}
}

// analystQueries returns the ```sql blocks of the doc by their `-- name:`.
func analystQueries(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(analystDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)```sql\n(-- name: (\\S+)\n.*?)```").FindAllSubmatch(doc, -1) {
		out[string(m[2])] = string(m[1])
	}
	if len(out) == 0 {
		t.Fatalf("no named queries in %s", analystDoc)
	}
	return out
}

// history is what the test sends, and the decisions it expects for it.
type history struct {
	t       *testing.T
	ctx     context.Context
	cfg     *config.Config
	conn    driver.Conn
	cl      *kgo.Client
	streams map[string]string // catalogue name → this test's copy
	// base is the test's reference time in unix seconds; every clock of
	// the history is before it, so nothing is received in the future.
	base   int64
	events []*sent
	// queries are the doc's, by name.
	queries   map[string]string
	decisions []decision
}

// sent is one input record with the clocks the test chose for it.
type sent struct {
	stream, key, id, typ string
	body                 []byte
	receivedMs           int64
	// occurredMs is the source clock, 0 for a stream without one.
	occurredMs int64
	// presence and expiresMs are the presence stream's claim.
	presence  string
	expiresMs int64
}

// decision is an outcome the history implies for an event.
type decision struct {
	ev              *sent
	outcome, reason string
	version, gap    int64
}

// newHistory runs, in this process, the processors of fresh copies of the
// four catalogue streams and the ClickHouse sink, on a database of its own.
func newHistory(t *testing.T, ctx context.Context, brokers []string) *history {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	h := &history{t: t, ctx: ctx, cfg: cfg, streams: map[string]string{}}
	streams := map[string]*config.Stream{}
	for _, name := range []string{"presence", "workflow", "chat", "orders"} {
		s := *cfg.Streams[name]
		s.Name = testenv.UniqueName(name)
		s.Limits.Partitions = 2
		h.streams[name] = s.Name
		streams[s.Name] = &s
	}
	streams[h.streams["orders"]].Parent.TTL = orphanTTL
	// No gap timeout fires during the test: stuck workflows report none.
	streams[h.streams["workflow"]].Limits.GapTimeout = time.Hour
	cfg.Streams = streams
	cfg.Processing.TimerTick = 200 * time.Millisecond
	cfg.Kafka.Brokers = brokers
	cfg.ClickHouse.Addr = testenv.ClickHouse(t)
	cfg.ClickHouse.Database = testenv.UniqueName("dg_analyst")
	cfg.ClickHouse.BatchPeriod = 100 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	h.conn, h.cl = prepare(t, ctx, cfg, brokers)
	t.Cleanup(h.cl.Close)

	log := testenv.Logger(t)
	runServices(t, ctx, "processors and sink", processors.NewService(processors.ServiceOptions{Config: cfg, Brokers: brokers, Logger: log, InMemoryTables: true}),
		sinkch.New(sinkch.Options{Config: cfg, Brokers: brokers, Conn: h.conn, Logger: log}))
	// The history's times count back from now, once the services run: a
	// child's parent TTL (orphanTTL) runs from its received_at, and a
	// base taken before a slow start could see it expire before its
	// parent is even produced.
	h.base = time.Now().Unix()
	return h
}

// send records an input of the catalogue stream, received receivedAgoMs
// before the base time.
func (h *history) send(stream, key, id, typ string, receivedAgoMs int64, body string) *sent {
	ev := &sent{stream: stream, key: key, id: id, typ: typ, body: []byte(body), receivedMs: h.base*1000 - receivedAgoMs}
	h.events = append(h.events, ev)
	return ev
}

// decide records an outcome the history implies.
func (h *history) decide(ev *sent, outcome, reason string, version, gap int64) {
	h.decisions = append(h.decisions, decision{ev: ev, outcome: outcome, reason: reason, version: version, gap: gap})
}

// presence: versions late, out of order and repeated; claims current,
// expired by expires_at, and expired by the stream's TTL.
func (h *history) presence() {
	// The source clock is tsAgo seconds before the base; the event is
	// received lateMs after it.
	send := func(id, user string, seq int64, presence string, tsAgo, lateMs, expiresIn int64) *sent {
		p := testenv.Presence{EventID: id, User: user, Status: presence, Version: seq, Timestamp: h.base - tsAgo}
		if expiresIn != 0 {
			p.ExpiresAt = h.base + expiresIn
		}
		ev := h.send("presence", user, id, "presence.changed", tsAgo*1000-lateMs, string(p.Body()))
		ev.occurredMs, ev.presence, ev.expiresMs = p.Timestamp*1000, presence, p.ExpiresAt*1000
		return ev
	}
	const hour = 3600
	h.decide(send("alice-841", "alice", 841, "ONLINE", 61, 3000, hour), "applied", "", 841, 0)
	alice843 := send("alice-843", "alice", 843, "AWAY", 60, 2500, hour)
	h.decide(alice843, "applied", "", 843, 1)
	h.decide(send("alice-842", "alice", 842, "BUSY", 62, 5000, hour), "stale", "", 842, 0)
	h.decide(send("alice-843-retry", "alice", 843, "AWAY", 60, 3500, hour), "stale", "", 843, 0)
	h.events = append(h.events, alice843) // the same delivery again
	h.decide(alice843, "duplicate", "", 843, 0)
	h.decide(send("alice-844", "alice", 844, "ONLINE", 59, 3000, hour), "applied", "", 844, 0)
	// bob's last claim expired an hour ago by its expires_at.
	h.decide(send("bob-10", "bob", 10, "BUSY", 7300, 1000, -hour), "applied", "", 10, 0)
	h.decide(send("bob-15", "bob", 15, "BUSY", 7200, 1100, -hour), "applied", "", 15, 4)
	// carol's claim has no expires_at: the stream's 5 minute TTL after
	// its timestamp, ten minutes ago.
	h.decide(send("carol-1", "carol", 1, "OFFLINE", 600, 200, 0), "applied", "", 1, 0)
	h.decide(send("dave-5", "dave", 5, "AWAY", 30, 300, hour), "applied", "", 5, 0)
	h.decide(send("dave-7", "dave", 7, "BUSY", 29, 400, hour), "applied", "", 7, 1)
}

// workflow: one operation completes after its steps arrive out of order,
// another is stuck behind step 2.
func (h *history) workflow() {
	send := func(id, op string, seq int64, status string, tsAgo, lateMs int64) *sent {
		ts := h.base - tsAgo
		body := fmt.Sprintf(`{"event_id":%q,"operation_id":%q,"sequence":%d,"status":%q,"occurred_at":%q}`,
			id, op, seq, status, time.Unix(ts, 0).UTC().Format(time.RFC3339))
		ev := h.send("workflow", op, id, "workflow.progress", tsAgo*1000-lateMs, body)
		ev.occurredMs = ts * 1000
		return ev
	}
	s1 := send("op1-1", "op-1", 1, "queued", 50, 100)
	h.decide(s1, "applied", "", 1, 0)
	h.decide(send("op1-2", "op-1", 2, "running", 49, 200), "applied", "", 2, 0)
	s4 := send("op1-4", "op-1", 4, "progress", 47, 300)
	h.decide(s4, "buffered", "", 4, 0)
	h.decide(send("op1-2b", "op-1", 2, "running", 49, 1200), "stale", "", 2, 0)
	h.events = append(h.events, s1)
	h.decide(s1, "duplicate", "", 1, 0)
	s5 := send("op1-5", "op-1", 5, "completed", 46, 400)
	h.decide(s5, "buffered", "", 5, 0)
	h.decide(send("op1-3", "op-1", 3, "progress", 48, 2000), "applied", "", 3, 0)
	h.decide(s4, "applied", "", 4, 0)
	h.decide(s5, "applied", "", 5, 0)
	h.decide(send("op1-6", "op-1", 6, "progress", 45, 500), "rejected", string(record.ReasonTerminal), 6, 0)

	h.decide(send("op2-1", "op-2", 1, "queued", 40, 100), "applied", "", 1, 0)
	h.decide(send("op2-3", "op-2", 3, "progress", 38, 100), "buffered", "", 3, 0)
	h.decide(send("op2-4", "op-2", 4, "progress", 37, 100), "buffered", "", 4, 0)
	h.decide(send("op2-3b", "op-2", 3, "progress", 38, 700), "duplicate", string(record.ReasonSameSequence), 3, 0)
}

// chat: members, sends numbered by the processor, a retried send, a send
// by a stranger, and read receipts out of order.
func (h *history) chat() {
	member := func(id, conv, user string, ago int64) *sent {
		return h.send("chat", conv, id, "member.added", ago,
			fmt.Sprintf(`{"event_id":%q,"type":"member.added","conversation_id":%q,"user_id":%q}`, id, conv, user))
	}
	msg := func(id, conv, sender, client, text string, ago int64) *sent {
		return h.send("chat", conv, id, "message.send", ago, fmt.Sprintf(
			`{"event_id":%q,"type":"message.send","conversation_id":%q,"sender_id":%q,"sender_device_id":%q,"client_message_id":%q,"body":%q}`,
			id, conv, sender, sender+"-phone", client, text))
	}
	read := func(id, conv, user string, seq, ago int64) *sent {
		return h.send("chat", conv, id, "receipt.read", ago, fmt.Sprintf(
			`{"event_id":%q,"type":"receipt.read","conversation_id":%q,"user_id":%q,"device_id":%q,"conversation_seq":%d}`,
			id, conv, user, user+"-phone", seq))
	}
	h.decide(member("c1-add-alice", "conv-1", "alice", 9000), "applied", "", 0, 0)
	h.decide(member("c1-add-bob", "conv-1", "bob", 8900), "applied", "", 0, 0)
	h.decide(msg("c1-m1", "conv-1", "alice", "a1", "hello bob", 8800), "applied", "", 1, 0)
	h.decide(msg("c1-m2", "conv-1", "bob", "b1", `hi "alice"`, 8700), "applied", "", 2, 0)
	h.decide(msg("c1-m1-retry", "conv-1", "alice", "a1", "hello bob", 8600), "duplicate", "", 1, 0)
	h.decide(msg("c1-m-carol", "conv-1", "carol", "c1", "let me in", 8500), "rejected", string(record.ReasonNotMember), 2, 0)
	h.decide(read("c1-read-2", "conv-1", "bob", 2, 8400), "applied", "", 2, 0)
	h.decide(read("c1-read-1", "conv-1", "bob", 1, 8300), "stale", "", 1, 0)
	h.decide(msg("c1-m3", "conv-1", "alice", "a2", "bye", 8200), "applied", "", 3, 0)
	h.decide(member("c2-add-dave", "conv-2", "dave", 8100), "applied", "", 0, 0)
	h.decide(msg("c2-m1", "conv-2", "dave", "d1", "solo", 8000), "applied", "", 1, 0)
	// A user id that JSON escapes, with brackets a naive reader of the
	// state's membership would take for its structure.
	const odd = `o"[d]{d}\<é`
	h.decide(member("c2-add-odd", "conv-2", odd, 7990), "applied", "", 1, 0)
	h.decide(msg("c2-m2", "conv-2", odd, "o1", "odd", 7980), "applied", "", 2, 0)
}

// orders: a payment before its order is reconciled; payments whose order
// never comes expire into orphans.
func (h *history) orders() {
	order := func(id, o string, ago int64) *sent {
		return h.send("orders", o, id, "order.created", ago,
			fmt.Sprintf(`{"event_id":%q,"event_type":"order.created","order_id":%q,"payload":{"total":12}}`, id, o))
	}
	payment := func(id, o string, ago int64) *sent {
		return h.send("orders", o, id, "order.payment_received", ago,
			fmt.Sprintf(`{"event_id":%q,"event_type":"order.payment_received","parent_id":%q,"payload":{"amount":12}}`, id, o))
	}
	p1 := payment("pay-1", "o1", 900)
	h.decide(p1, "quarantined", "", 0, 0)
	h.decide(order("order-1", "o1", 800), "applied", "", 1, 0)
	h.decide(p1, "reconciled", "", 2, 0)
	p2 := payment("pay-2", "o2", 700)
	h.decide(p2, "quarantined", "", 0, 0)
	h.decide(p2, "expired", string(record.ReasonOrphanTTL), 0, 0)
	h.decide(order("order-3", "o3", 600), "applied", "", 1, 0)
	h.decide(payment("pay-3", "o3", 500), "applied", "", 2, 0)
	p4 := payment("pay-4", "o4", 400)
	h.decide(p4, "quarantined", "", 0, 0)
	h.events = append(h.events, p4)
	h.decide(p4, "duplicate", "", 0, 0)
	h.decide(p4, "expired", string(record.ReasonOrphanTTL), 0, 0)
}

// produceAll writes the history to the streams' input topics as ingest
// would, in order, with the received_at the test chose.
func (h *history) produceAll() {
	for _, ev := range h.events {
		rec := inputRecordAt(h.streams[ev.stream], ev.key, ev.body, ev.receivedMs)
		if err := h.cl.ProduceSync(h.ctx, rec).FirstErr(); err != nil {
			h.t.Fatal(err)
		}
	}
}

// waitForSink waits until ClickHouse holds every decision, the orphans and
// the states, then a little longer for anything decided twice.
func (h *history) waitForSink() {
	applied := map[string]bool{}
	for _, d := range h.decisions {
		if d.outcome == "applied" || d.outcome == "reconciled" {
			applied[d.ev.stream+"/"+d.ev.key] = true
		}
	}
	testenv.WaitFor(h.t, h.ctx, fmt.Sprintf("%d decisions, 2 orphans and %d states", len(h.decisions), len(applied)), func() bool {
		var decisions, orphans, states uint64
		h.scalar("SELECT count() FROM %s.events", &decisions)
		h.scalar("SELECT count() FROM %s.orphans", &orphans)
		h.scalar("SELECT count() FROM %s.entity_state FINAL", &states)
		var replays uint64
		h.scalar("SELECT count() FROM %s.replay_requests", &replays)
		return decisions >= uint64(len(h.decisions)) && orphans >= 2 && states >= uint64(len(applied)) && replays >= uint64(len(h.replayRequests()))
	})
	time.Sleep(time.Second)
}

// scalar runs a one-value query whose %s is the database.
func (h *history) scalar(query string, dest any) {
	h.t.Helper()
	if err := h.conn.QueryRow(h.ctx, fmt.Sprintf(query, h.cfg.ClickHouse.Database)).Scan(dest); err != nil {
		h.t.Fatalf("%s: %v", query, err)
	}
}

// localize points a documented query at the test's database and streams
// (`stream = 'name'`; the same word elsewhere, such as a JSON field, stays).
func (h *history) localize(sql string) string {
	sql = strings.ReplaceAll(sql, "driftguard.", h.cfg.ClickHouse.Database+".")
	for name, local := range h.streams {
		sql = strings.ReplaceAll(sql, "stream = '"+name+"'", "stream = '"+local+"'")
	}
	return sql
}

// decisionsOf returns the expected decisions of a catalogue stream.
func (h *history) decisionsOf(stream string) []decision {
	var out []decision
	for _, d := range h.decisions {
		if d.ev.stream == stream {
			out = append(out, d)
		}
	}
	return out
}

// catalogueOrder lists the catalogue streams in the order of their test
// copies' names, as ORDER BY stream sorts them.
func (h *history) catalogueOrder() []string {
	names := []string{"chat", "orders", "presence", "workflow"}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(h.streams[a], h.streams[b]) })
	return names
}

func (h *history) checkPresenceNow(got [][]any) {
	// The newest applied claim per user, unknown once it has expired.
	latest := map[string]decision{}
	var users []string
	for _, d := range h.decisionsOf("presence") {
		if d.outcome != "applied" {
			continue
		}
		if _, ok := latest[d.ev.key]; !ok {
			users = append(users, d.ev.key)
		}
		if d.version > latest[d.ev.key].version {
			latest[d.ev.key] = d
		}
	}
	slices.Sort(users)
	ttl := h.cfg.Streams[h.streams["presence"]].TTL.Milliseconds()
	nowMs := time.Now().UnixMilli()
	var want [][]any
	for _, user := range users {
		d := latest[user]
		expires := d.ev.expiresMs
		if expires == 0 {
			expires = d.ev.occurredMs + ttl
		}
		presence := d.ev.presence
		if expires <= nowMs {
			presence = "unknown"
		}
		want = append(want, []any{user, d.version, presence})
	}
	h.expect(got, want)
	// The history has both kinds of expiry and live claims.
	if fmt.Sprint(want) != "[[alice 844 ONLINE] [bob 15 unknown] [carol 1 unknown] [dave 7 BUSY]]" {
		h.t.Errorf("the history no longer covers expired and live claims: %v", want)
	}
}

func (h *history) checkOrderingPerMinute(got [][]any) {
	// Per minute the view must agree with the rows of events themselves.
	raw := h.query(fmt.Sprintf(`SELECT stream, toStartOfMinute(processed_at) AS minute, count(),
		countIf(outcome = 'stale'), countIf(outcome = 'buffered'), countIf(outcome = 'quarantined'), countIf(outcome = 'duplicate')
		FROM %s.events GROUP BY stream, minute ORDER BY stream, minute`, h.cfg.ClickHouse.Database))
	var want [][]any
	for _, r := range raw {
		n := r[2].(uint64)
		outOfOrder := r[3].(uint64) + r[4].(uint64) + r[5].(uint64)
		rate := func(k uint64) float64 { return math.Round(float64(k)/float64(n)*1e4) / 1e4 }
		want = append(want, append(slices.Clone(r), rate(outOfOrder), rate(r[6].(uint64))))
	}
	h.expect(got, want)
	// Summed over minutes, the counts are the history's.
	totals := map[string][5]uint64{}
	for _, r := range got {
		t := totals[r[0].(string)]
		for i := range t {
			t[i] += r[2+i].(uint64)
		}
		totals[r[0].(string)] = t
	}
	for _, name := range h.catalogueOrder() {
		var wantTotals [5]uint64
		for _, d := range h.decisionsOf(name) {
			wantTotals[0]++
			if i := slices.Index([]string{"stale", "buffered", "quarantined", "duplicate"}, d.outcome); i >= 0 {
				wantTotals[1+i]++
			}
		}
		if totals[h.streams[name]] != wantTotals {
			h.t.Errorf("%s: decisions, stale, buffered, quarantined, duplicates = %v; the history has %v", name, totals[h.streams[name]], wantTotals)
		}
	}
}

func (h *history) checkGapSizes(got [][]any) {
	var want [][]any
	for _, name := range h.catalogueOrder() {
		var gaps, sum, largest int64
		for _, d := range h.decisionsOf(name) {
			if d.gap > 0 {
				gaps, sum, largest = gaps+1, sum+d.gap, max(largest, d.gap)
			}
		}
		if gaps > 0 {
			want = append(want, []any{h.streams[name], gaps, sum, largest})
		}
	}
	h.expect(got, want)
}

func (h *history) checkGapsByEntity(got [][]any) {
	var want [][]any
	for _, name := range h.catalogueOrder() {
		var rows [][]any
		for _, d := range h.decisionsOf(name) {
			if d.gap > 0 {
				rows = append(rows, []any{h.streams[name], d.ev.key, d.version, d.gap})
			}
		}
		slices.SortFunc(rows, func(a, b []any) int { return strings.Compare(fmt.Sprint(a...), fmt.Sprint(b...)) })
		want = append(want, rows...)
	}
	h.expect(got, want)
}

func (h *history) checkLatencyAndLateness(got [][]any) {
	// Latency depends on when the processors ran: the view's quantiles must
	// equal those of the rows in events. Lateness follows from the history.
	latency := map[string]any{}
	for _, r := range h.query(fmt.Sprintf(`SELECT stream, outcome, quantiles(0.5, 0.99)(processed_at_ms - received_at_ms)
		FROM %s.events GROUP BY stream, outcome`, h.cfg.ClickHouse.Database)) {
		latency[r[0].(string)+"/"+r[1].(string)] = r[2]
		for _, q := range r[2].([]float64) {
			if q < 0 {
				h.t.Errorf("%s %s: negative ingest→decision latency %v", r[0], r[1], r[2])
			}
		}
	}
	var want [][]any
	for _, name := range h.catalogueOrder() {
		byOutcome := map[string][]float64{}
		count := map[string]uint64{}
		for _, d := range h.decisionsOf(name) {
			count[d.outcome]++
			if d.ev.occurredMs > 0 {
				byOutcome[d.outcome] = append(byOutcome[d.outcome], float64(d.ev.receivedMs-d.ev.occurredMs))
			}
		}
		for _, outcome := range slices.Sorted(maps.Keys(count)) {
			lat := latency[h.streams[name]+"/"+outcome]
			lateness := []float64{quantile(byOutcome[outcome], 0.5), quantile(byOutcome[outcome], 0.99)}
			l, _ := floats(lat)
			if len(l) != 2 {
				h.t.Fatalf("%s %s: no latency in events", name, outcome)
			}
			want = append(want, []any{h.streams[name], outcome, count[outcome], lat, l[0], l[1], lateness, lateness[0], lateness[1]})
		}
	}
	h.expect(got, want)
}

func (h *history) checkOrphanCounts(got [][]any) {
	var want [][]any
	for _, name := range h.catalogueOrder() {
		var quarantined, reconciled, expired int64
		for _, d := range h.decisionsOf(name) {
			switch {
			case d.outcome == "quarantined":
				quarantined++
			case d.outcome == "reconciled":
				reconciled++
			case d.outcome == "expired" && d.reason == string(record.ReasonOrphanTTL):
				expired++
			}
		}
		if quarantined > 0 {
			want = append(want, []any{h.streams[name], quarantined, reconciled, expired, quarantined - reconciled - expired})
		}
	}
	h.expect(got, want)
}

// checkDecisionsByInput: with no crash in the history, counting decisions
// by input position gives every decision, by stream and outcome.
func (h *history) checkDecisionsByInput(got [][]any) {
	var want [][]any
	for _, name := range h.catalogueOrder() {
		counts := map[string]int64{}
		for _, d := range h.decisionsOf(name) {
			counts[d.outcome]++
		}
		for _, outcome := range slices.Sorted(maps.Keys(counts)) {
			want = append(want, []any{h.streams[name], outcome, counts[outcome]})
		}
	}
	h.expect(got, want)
}

// checkDecisionsOnce: with no crash in the history each decision is one
// row, and every row has its decision id.
func (h *history) checkDecisionsOnce(got [][]any) {
	h.expect(got, [][]any{{1}})
	var unnamed uint64
	h.scalar("SELECT count() FROM %s.events WHERE decision_id = ''", &unnamed)
	if unnamed != 0 {
		h.t.Errorf("%d events rows without a decision id", unnamed)
	}
}

func (h *history) checkOrphansExpired(got [][]any) {
	var want [][]any
	for _, d := range h.decisionsOf("orders") {
		if d.outcome == "expired" {
			want = append(want, []any{h.streams["orders"], d.ev.key, d.ev.id, d.ev.typ})
		}
	}
	var rest [][]any
	for _, r := range got {
		if len(r) != 5 {
			h.t.Fatalf("row %v: want 5 columns", r)
		}
		rest = append(rest, r[:4])
		// Not before the TTL: the timer fires on or after the deadline.
		if waited := r[4].(int64); waited < orphanTTL.Milliseconds() {
			h.t.Errorf("%v expired after %d ms, before its TTL of %s", r[:3], waited, orphanTTL)
		}
	}
	h.expect(rest, want)
}

func (h *history) checkWorkflowsStuck(got [][]any) {
	// An operation is stuck when buffered steps were never decided again.
	var want [][]any
	ops := map[string][]decision{}
	var names []string
	for _, d := range h.decisionsOf("workflow") {
		if _, ok := ops[d.ev.key]; !ok {
			names = append(names, d.ev.key)
		}
		ops[d.ev.key] = append(ops[d.ev.key], d)
	}
	slices.Sort(names)
	for _, op := range names {
		var last int64
		var waiting []int64
		for _, d := range ops[op] {
			switch d.outcome {
			case "applied":
				last = max(last, d.version)
				waiting = slices.DeleteFunc(waiting, func(v int64) bool { return v == d.version })
			case "rejected":
				waiting = slices.DeleteFunc(waiting, func(v int64) bool { return v == d.version })
			case "buffered":
				waiting = append(waiting, d.version)
			}
		}
		if len(waiting) > 0 {
			slices.Sort(waiting)
			want = append(want, []any{op, last, last + 1, waiting, waiting[0] - last - 1, 0})
		}
	}
	h.expect(got, want)
	if len(want) != 1 {
		h.t.Errorf("the history should leave exactly one operation stuck, has %v", want)
	}
}

func (h *history) checkChatMessages(got [][]any) {
	var want [][]any
	for _, d := range h.decisionsOf("chat") {
		if d.outcome == "applied" && d.ev.typ == "message.send" {
			var m struct {
				Sender string `json:"sender_id"`
				Body   string `json:"body"`
			}
			if err := json.Unmarshal(d.ev.body, &m); err != nil {
				h.t.Fatal(err)
			}
			want = append(want, []any{d.ev.key, d.version, m.Sender, m.Body})
		}
	}
	slices.SortStableFunc(want, func(a, b []any) int {
		if c := strings.Compare(a[0].(string), b[0].(string)); c != 0 {
			return c
		}
		return int(a[1].(int64) - b[1].(int64))
	})
	h.expect(got, want)
}
