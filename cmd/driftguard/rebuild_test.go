package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// `driftguard sink --rebuild`, on the real broker and server: the orders
// pipeline and a gapless stream fill every table (orders applied, payments
// reconciled, orphans expired into dlq and orphans, a poison record, a
// record the sink cannot decode, a replay request); the sink stops;
// without --yes the rebuild only says what it would empty; with it,
// ClickHouse is emptied and the sink refills it from Kafka, and every
// table then equals the original row for row. Then the database is
// dropped, and the rebuild, whose migrations make it again, refills it
// row for row too.
func TestSinkRebuildRefillsEveryTableRowForRow(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	stream := testenv.UniqueName("orders")
	dir := t.TempDir()
	// The CLI's sink reads the embedded catalogue's streams too: under a
	// prefix of this test's, they are empty.
	prefix := strings.ReplaceAll(stream, "_", "-") + "."
	yaml := ordersConfig(stream, time.Second) + "clickhouse:\n  batch_period: 100ms\n  consumer_group: " + stream + "-sink\n" +
		"kafka:\n  topic_prefix: " + prefix + "\n  group_prefix: " + prefix + "\n"
	configFile := testenv.WriteConfig(t, dir, yaml)
	// The catalogue's gapless stream, under the test's prefix.
	cfg, conn, cl := loadOnServices(t, ctx, configFile, "rebuild", stream, "workflow")
	log := testenv.Logger(t)
	runServices(t, ctx, "process", processors.NewService(processors.ServiceOptions{Config: cfg, Logger: log, InMemoryTables: true}))
	sinkCtx, stopSink := context.WithCancel(ctx)
	sinkDone := make(chan error, 1)
	go func() { sinkDone <- sinkch.New(sinkch.Options{Config: cfg, Conn: conn, Logger: log}).Run(sinkCtx) }()

	ordersTraffic(t, ctx, cl, cfg.Kafka.Naming(), stream)
	gapTraffic(t, ctx, cl, cfg.Kafka.Naming(), "workflow")
	q := func(query string) uint64 {
		var n uint64
		if err := conn.QueryRow(ctx, fmt.Sprintf(query, cfg.ClickHouse.Database)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.WaitFor(t, ctx, "every decision of the traffic in ClickHouse", func() bool { return trafficComplete(q) })
	stopSink()
	if err := <-sinkDone; err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, ctx, conn, cfg.ClickHouse.Database)

	// The CLI, as an operator runs it, on the test's config.
	t.Setenv("DRIFTGUARD_KAFKA_BROKERS", strings.Join(cfg.Kafka.Brokers, ","))
	t.Setenv("DRIFTGUARD_CLICKHOUSE_ADDR", cfg.ClickHouse.Addr)
	t.Setenv("DRIFTGUARD_CLICKHOUSE_DATABASE", cfg.ClickHouse.Database)
	t.Setenv("DRIFTGUARD_TELEMETRY_ADDR", "127.0.0.1:0")
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"sink", "--config", configFile, "--rebuild"}, &stdout, &stderr); code != 2 {
		t.Fatalf("sink --rebuild without --yes: exit %d, want 2\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "would empty events (") || !strings.Contains(stderr.String(), "--yes") {
		t.Errorf("sink --rebuild without --yes says:\n%s%s", stdout.String(), stderr.String())
	}
	if diff := snapshotDiff(before, snapshot(t, ctx, conn, cfg.ClickHouse.Database)); diff != "" {
		t.Fatalf("sink --rebuild without --yes changed ClickHouse (-before +after):\n%s", diff)
	}

	// rebuild runs `sink --rebuild --yes` until the tables are refilled,
	// and returns what it printed.
	rebuild := func() string {
		rebuildCtx, stopRebuild := context.WithCancel(ctx)
		rebuilt := make(chan int, 1)
		var out syncBuffer
		go func() {
			rebuilt <- run(rebuildCtx, []string{"sink", "--config", configFile, "--rebuild", "--yes"}, &out, testenv.LogWriter(t))
		}()
		// The tables are emptied before the sink starts, then refilled.
		testenv.WaitFor(t, ctx, "the tables emptied", func() bool { return strings.Contains(out.String(), "emptied ordering_minute (") })
		testenv.WaitFor(t, ctx, "the rebuilt tables refilled", func() bool { return trafficComplete(q) })
		stopRebuild()
		if code := <-rebuilt; code != 0 {
			t.Fatalf("sink --rebuild --yes: exit %d\n%s", code, out.String())
		}
		return out.String()
	}
	if out := rebuild(); !strings.Contains(out, "emptied events (36 rows)") || !strings.Contains(out, "emptied replay_requests (1 rows)") {
		t.Errorf("sink --rebuild --yes says:\n%s", out)
	}
	if diff := snapshotDiff(before, snapshot(t, ctx, conn, cfg.ClickHouse.Database)); diff != "" {
		t.Errorf("rebuilt ClickHouse differs from the original (-before +after):\n%s", diff)
	}

	if err := conn.Exec(ctx, "DROP DATABASE "+cfg.ClickHouse.Database); err != nil {
		t.Fatal(err)
	}
	rebuild()
	if diff := snapshotDiff(before, snapshot(t, ctx, conn, cfg.ClickHouse.Database)); diff != "" {
		t.Errorf("ClickHouse dropped and rebuilt differs from the original (-before +after):\n%s", diff)
	}
}

// ordersTraffic sends the stream's input straight to Kafka, as ingest
// writes it: ten orders, five payments after their order and five before
// it, three payments whose order never comes, a duplicate and a record
// that is not JSON; and, straight to the outcomes topic, a record no sink
// can decode.
func ordersTraffic(t *testing.T, ctx context.Context, cl *kgo.Client, names naming.Prefixes, stream string) {
	t.Helper()
	order := func(i int) *kgo.Record {
		return inputRecord(stream, fmt.Sprint("o", i),
			fmt.Appendf(nil, `{"event_id":"order-%d","event_type":"order.created","order_id":"o%d","payload":{"total":%d}}`, i, i, i))
	}
	payment := func(i int) *kgo.Record {
		return inputRecord(stream, fmt.Sprint("o", i),
			fmt.Appendf(nil, `{"event_id":"pay-%d","event_type":"order.payment_received","parent_id":"o%d","payload":{"amount":%d}}`, i, i, i))
	}
	var records []*kgo.Record
	for i := range 5 {
		records = append(records, order(i), payment(i))
	}
	for i := 5; i < 10; i++ {
		records = append(records, payment(i))
	}
	for i := 5; i < 10; i++ {
		records = append(records, order(i))
	}
	for i := 100; i < 103; i++ {
		records = append(records, payment(i))
	}
	records = append(records, order(0), inputRecord(stream, "o0", []byte("not json")))
	for _, r := range records {
		r.Topic = names.For(stream).In
	}
	records = append(records, &kgo.Record{Topic: names.For(stream).Outcomes, Key: []byte("o0"), Value: []byte("{")})
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// gapTraffic sends a gapless stream's operation its steps 1, 3 and 2:
// step 3 is buffered and asks for a replay of step 2, which then fills
// the gap, so no gap is left open for a timer to report later.
func gapTraffic(t *testing.T, ctx context.Context, cl *kgo.Client, names naming.Prefixes, stream string) {
	t.Helper()
	var records []*kgo.Record
	for _, seq := range []int{1, 3, 2} {
		r := inputRecord(stream, "op-1", fmt.Appendf(nil,
			`{"event_id":"op-1-%d","operation_id":"op-1","sequence":%d,"status":"running","occurred_at":"2026-01-01T00:00:00Z"}`, seq, seq))
		r.Topic = names.For(stream).In
		records = append(records, r)
	}
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// trafficComplete reports whether ClickHouse holds every decision of
// ordersTraffic and gapTraffic. Of the orders: 24 decisions of the input
// (none for the poison record), 8 later ones (5 reconciled, 3 expired),
// the 3 orphans, 5 dead letters (3 orphans, the poison record, the
// undecodable outcome), and each order's state at its second revision.
// Of the gapless operation: 4 decisions (1 applied, 3 buffered, 2 and 3
// applied), its replay request, and its state at step 3. q runs a count
// query of the database (%s).
func trafficComplete(q func(string) uint64) bool {
	return q("SELECT count() FROM %s.events") == 32+4 &&
		q("SELECT count() FROM %s.orphans") == 3 &&
		q("SELECT count() FROM %s.dlq") == 5 &&
		q("SELECT countIf(version = 2) FROM %s.entity_state FINAL") == 10 &&
		q("SELECT countIf(version = 3) FROM %s.entity_state FINAL") == 1 &&
		q("SELECT count() FROM %s.replay_requests") == 1
}

// snapshot is every row of every table the sink fills, each table's rows
// sorted, read as text: entity_state as FINAL reads it, ordering_minute's
// aggregates finalized, sink_positions as the sink reads it (the highest
// offset of each key). Left out: the dead_at of the rows the sink writes
// for records it cannot decode (reason sink_undecodable), the one time a
// sink sets itself, when it inserts.
func snapshot(t *testing.T, ctx context.Context, conn driver.Conn, db string) map[string][]string {
	t.Helper()
	queries := map[string]string{
		"events":       "SELECT * FROM %s.events",
		"entity_state": "SELECT * FROM %s.entity_state FINAL",
		"dlq": "SELECT stream, entity_key, event_id, event_type, reason, detail, `topic`, `partition`, `offset`, " +
			"if(reason = 'sink_undecodable', 0, dead_at_ms), if(reason = 'sink_undecodable', toDateTime(0), dead_at), " +
			"source_topic, source_partition, source_offset, source_topic_id, payload FROM %s.dlq",
		"orphans":         "SELECT * FROM %s.orphans",
		"replay_requests": "SELECT * FROM %s.replay_requests",
		"ordering_minute": "SELECT stream, minute, outcome, reason, sum(events), sum(gaps), sum(gap_sum), maxMerge(gap_max), maxMerge(buffer_depth_max), " +
			"quantilesMerge(0.5, 0.9, 0.99)(lateness_ms), quantilesMerge(0.5, 0.9, 0.99)(latency_ms) FROM %s.ordering_minute GROUP BY stream, minute, outcome, reason",
		"sink_positions": "SELECT table_name, `topic`, `partition`, topic_id, max(max_offset) FROM %s.sink_positions GROUP BY table_name, `topic`, `partition`, topic_id",
	}
	out := map[string][]string{}
	for table, query := range queries {
		rows, err := conn.Query(ctx, fmt.Sprintf(query, db))
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		types := rows.ColumnTypes()
		for rows.Next() {
			values := make([]any, len(types))
			for i, ct := range types {
				values[i] = newValue(ct.ScanType())
			}
			if err := rows.Scan(values...); err != nil {
				t.Fatalf("%s: %v", table, err)
			}
			var b strings.Builder
			for i, v := range values {
				if i > 0 {
					b.WriteString(" | ")
				}
				fmt.Fprint(&b, deref(v))
			}
			out[table] = append(out[table], b.String())
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		slices.Sort(out[table])
	}
	return out
}

// snapshotDiff lists, table by table, the rows only one of two snapshots
// has ("-" before, "+" after); empty when they are equal.
func snapshotDiff(before, after map[string][]string) string {
	var b strings.Builder
	for _, table := range slices.Sorted(maps.Keys(before)) {
		if _, ok := after[table]; !ok {
			fmt.Fprintf(&b, "%s: missing\n", table)
		}
	}
	for _, table := range slices.Sorted(maps.Keys(after)) {
		x, y := before[table], after[table]
		for _, row := range x {
			if !slices.Contains(y, row) {
				fmt.Fprintf(&b, "%s -%s\n", table, row)
			}
		}
		for _, row := range y {
			if !slices.Contains(x, row) {
				fmt.Fprintf(&b, "%s +%s\n", table, row)
			}
		}
		if len(x) != len(y) {
			fmt.Fprintf(&b, "%s: %d rows before, %d after\n", table, len(x), len(y))
		}
	}
	return b.String()
}

func newValue(t reflect.Type) any { return reflect.New(t).Interface() }

func deref(v any) any { return reflect.ValueOf(v).Elem().Interface() }

// `driftguard retention --print` renders the TTLs of the configured
// retention without a server, and nothing for tables kept forever;
// `--dry-run` on the real server changes nothing; `sink --yes` alone is a
// usage error.
func TestRunRetentionAndRebuildFlags(t *testing.T) {
	isolateEnv(t)
	t.Setenv("DRIFTGUARD_CLICKHOUSE_ADDR", "127.0.0.1:1")
	t.Setenv("DRIFTGUARD_CLICKHOUSE_DATABASE", "dg_print")
	configFile := testenv.WriteConfig(t, "", "clickhouse: {retention: {events: 2160h, orphans: 24h, replay_requests: 720h}}\n")
	r := runCLI(t, "retention", "--config", configFile, "--print")
	want := "ALTER TABLE dg_print.events MODIFY TTL processed_at + INTERVAL 7776000 SECOND;\n\n" +
		"ALTER TABLE dg_print.orphans MODIFY TTL expired_at + INTERVAL 86400 SECOND;\n\n" +
		"ALTER TABLE dg_print.replay_requests MODIFY TTL requested_at + INTERVAL 2592000 SECOND;\n\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("retention --print: %v\nwant stdout:\n%s", r, want)
	}
	if r := runCLI(t, "sink", "--yes"); r.code != 2 || !strings.Contains(r.stderr, "--yes confirms --rebuild") {
		t.Errorf("sink --yes without --rebuild: %v", r)
	}

	ctx := testenv.Context(t, time.Minute)
	c := config.ClickHouse{Addr: testenv.ClickHouse(t), Database: testenv.UniqueName("dg_retention"), Username: "default"}
	conn := openDroppedAtEnd(t, ctx, c)
	if _, err := sinkch.Migrate(ctx, conn, c, nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DRIFTGUARD_CLICKHOUSE_ADDR", c.Addr)
	t.Setenv("DRIFTGUARD_CLICKHOUSE_DATABASE", c.Database)
	r = runCLI(t, "retention", "--config", configFile, "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to do") && !strings.Contains(r.stdout, "(dry run) events: set TTL") {
		t.Errorf("retention --dry-run on empty tables: %v", r)
	}
}
