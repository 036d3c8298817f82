package clickhouse_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/driftguard/driftguard/internal/testenv"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// orderingVersion is the migration that creates ordering_minute.
const orderingVersion = 3

// A database that held events before ordering_minute existed gets them
// counted once by the migration's backfill, a backfill interrupted half way
// is completed without counting anything twice, and blocks inserted later
// are counted once each by the view.
func TestOrderingMinuteBackfillsOnceAndCountsEveryBlock(t *testing.T) {
	conn, c := openTestDatabase(t)
	ctx := testenv.Context(t, time.Minute)
	exec := func(stmt string) {
		t.Helper()
		if err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("%v\n%s", err, stmt)
		}
	}
	// The database as the migrations before ordering_minute left it.
	var backfill string
	for _, m := range migrateBelow(t, ctx, conn, c.Database, orderingVersion) {
		if m.Version == orderingVersion {
			// Its table, and a backfill interrupted after stream a.
			exec(m.Statements[0])
			backfill = m.Statements[1]
		}
	}
	if !strings.HasPrefix(backfill, "INSERT INTO "+c.Database+".ordering_minute") {
		t.Fatalf("migration %d: the second statement is not the backfill:\n%s", orderingVersion, backfill)
	}
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	insertEvents(t, ctx, conn, c.Database, syntheticEvents(base, 0, 40))
	exec(strings.Replace(backfill, "WHERE (stream,", "WHERE stream = 'a' AND (stream,", 1))

	if _, err := sinkch.Migrate(ctx, conn, c, nil); err != nil {
		t.Fatal(err)
	}
	compareOrderingWithEvents(t, ctx, conn, c.Database, 40)

	// The view counts each block once, in minutes old and new.
	insertEvents(t, ctx, conn, c.Database, syntheticEvents(base, 40, 25))
	insertEvents(t, ctx, conn, c.Database, syntheticEvents(base+5*60_000, 65, 30))
	compareOrderingWithEvents(t, ctx, conn, c.Database, 95)

	// Run again (as after an interruption before it was recorded), the
	// backfill adds nothing.
	exec(backfill)
	compareOrderingWithEvents(t, ctx, conn, c.Database, 95)
	if err := conn.Exec(ctx, "OPTIMIZE TABLE "+c.Database+".ordering_minute FINAL"); err != nil {
		t.Fatal(err)
	}
	compareOrderingWithEvents(t, ctx, conn, c.Database, 95)
}

type eventRow struct {
	stream, outcome, reason       string
	gap, bufferDepth              int64
	occurredMs, receivedMs, procd int64
	offset                        int64
}

// syntheticEvents returns n decisions numbered from first, over two streams,
// four outcomes and three minutes from base, with varied clocks and gaps.
func syntheticEvents(base int64, first, n int) []eventRow {
	outcomes := []string{"applied", "stale", "duplicate", "expired"}
	var rows []eventRow
	for i := first; i < first+n; i++ {
		r := eventRow{stream: "a", outcome: outcomes[i%4], gap: int64(i % 5), bufferDepth: int64(i % 3), offset: int64(i)}
		if i%3 == 0 {
			r.stream = "b"
		}
		if r.outcome == "expired" {
			r.reason = "orphan_ttl"
		}
		r.receivedMs = base + int64(i%3)*60_000 + int64(i)*97
		r.procd = r.receivedMs + int64(i*i%700)
		if i%4 != 1 {
			r.occurredMs = r.receivedMs - int64(i*37%5000)
		}
		rows = append(rows, r)
	}
	return rows
}

func insertEvents(t *testing.T, ctx context.Context, conn driver.Conn, database string, rows []eventRow) {
	t.Helper()
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+database+".events (stream, entity_key, event_id, outcome, reason, gap, buffer_depth, "+
		"occurred_at_ms, received_at_ms, processed_at_ms, processed_at, `topic`, `partition`, `offset`)")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := batch.Append(r.stream, fmt.Sprintf("k%d", r.offset%7), fmt.Sprintf("e%d", r.offset), r.outcome, r.reason, r.gap, r.bufferDepth,
			r.occurredMs, r.receivedMs, r.procd, time.UnixMilli(r.procd), r.stream+".outcomes", int32(0), r.offset); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
}

// compareOrderingWithEvents checks that ordering_minute, merged, says
// exactly what a GROUP BY over events says, and counts want rows.
func compareOrderingWithEvents(t *testing.T, ctx context.Context, conn driver.Conn, database string, want uint64) {
	t.Helper()
	fromView := queryText(t, ctx, conn, database+".ordering_minute", "stream, minute, outcome, reason", []string{
		"stream", "minute", "outcome", "reason", "sum(events)", "sum(gaps)", "sum(gap_sum)",
		"maxMerge(gap_max)", "maxMerge(buffer_depth_max)",
		"quantilesMerge(0.5, 0.9, 0.99)(lateness_ms)", "quantilesMerge(0.5, 0.9, 0.99)(latency_ms)",
	})
	fromEvents := queryText(t, ctx, conn, database+".events", "stream, toStartOfMinute(processed_at), outcome, reason", []string{
		"stream", "toStartOfMinute(processed_at)", "outcome", "reason", "count()", "countIf(gap > 0)", "sum(gap)",
		"max(gap)", "max(buffer_depth)",
		"quantilesIf(0.5, 0.9, 0.99)(received_at_ms - occurred_at_ms, occurred_at_ms > 0)",
		"quantiles(0.5, 0.9, 0.99)(processed_at_ms - received_at_ms)",
	})
	if strings.Join(fromView, "\n") != strings.Join(fromEvents, "\n") {
		t.Errorf("ordering_minute:\n%s\nevents:\n%s", strings.Join(fromView, "\n"), strings.Join(fromEvents, "\n"))
	}
	var counted uint64
	if err := conn.QueryRow(ctx, "SELECT sum(events) FROM "+database+".ordering_minute").Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if counted != want {
		t.Errorf("ordering_minute counts %d decisions, want %d", counted, want)
	}
}

// queryText returns the columns of a grouped query over table, one line of
// tab-separated text per group, in group order.
func queryText(t *testing.T, ctx context.Context, conn driver.Conn, table, groupBy string, columns []string) []string {
	t.Helper()
	text := make([]string, len(columns))
	for i, c := range columns {
		text[i] = "toString(" + c + ")"
	}
	query := fmt.Sprintf("SELECT concat(%s) FROM %s GROUP BY %s ORDER BY %s", strings.Join(text, ", '\t', "), table, groupBy, groupBy)
	rows, err := conn.Query(ctx, query)
	if err != nil {
		t.Fatalf("%v\n%s", err, query)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		out = append(out, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
