package clickhouse_test

import (
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"

	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// An INSERT streamed in several Data packets must land as one block: one
// new part in events and one in each table a view fills from it. That is
// what lets a batch land whole or not at all, and the views see each row
// once. It must, even where the user's profile sets a small
// min_insert_block_size_rows, as the sink's connection here does.
func TestStreamedInsertLandsAsOneBlock(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	conn, cfg := migratedDatabase(t, ctx)
	db := cfg.ClickHouse.Database
	smallBlocks, err := ch.Open(&ch.Options{
		Addr:     []string{cfg.ClickHouse.Addr},
		Settings: ch.Settings{"min_insert_block_size_rows": 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { smallBlocks.Close() })
	tables := []string{"events", "ordering_minute", "sink_positions"}
	for _, table := range tables {
		// Merging would hide how many parts the INSERT made.
		if err := conn.Exec(ctx, "SYSTEM STOP MERGES "+db+"."+table); err != nil {
			t.Fatal(err)
		}
	}
	sink := sinkch.New(sinkch.Options{Config: cfg, Conn: smallBlocks, Ops: telemetry.NewOps()})
	rows := 3*sinkch.ChunkRows + 5
	if err := sink.Insert(ctx, outcomeRecords(naming.Prefixes{}.For("presence").Outcomes, 0, rows)); err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		var parts, partRows uint64
		err := conn.QueryRow(ctx, "SELECT count(), sum(rows) FROM system.parts WHERE database = ? AND table = ? AND active",
			db, table).Scan(&parts, &partRows)
		if err != nil {
			t.Fatal(err)
		}
		if parts != 1 {
			t.Errorf("%s: the INSERT of %d rows in %d packets made %d parts (%d rows), want 1", table, rows, (rows+sinkch.ChunkRows-1)/sinkch.ChunkRows, parts, partRows)
		}
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".events").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != uint64(rows) {
		t.Errorf("events has %d rows, want %d", n, rows)
	}
}
