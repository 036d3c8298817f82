package clickhouse_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// Design §6: kill the sink at any instant, restart it, and no row is missing
// or doubled. The worst instant is after a batch is inserted and before its
// offsets are committed; the restarted sink must resume from what ClickHouse
// holds, not from the stale committed offsets.
func TestSinkRestartAfterInsertBeforeCommitDoesNotDoubleRows(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	conn, cfg := migratedDatabase(t, ctx)
	cl := withFakeBroker(t, ctx, cfg)
	brokers := cfg.Kafka.Brokers
	outcomes := naming.Prefixes{}.For("presence").Outcomes

	// One key, so one partition, so the sink sees the records in this order.
	produce := func(eventID string, version int64) *kgo.Record {
		t.Helper()
		value, err := json.Marshal(record.Outcome{
			Stream: "presence", Key: "alice", EventID: eventID, EventType: "presence.changed",
			Version: version, Outcome: record.Applied, ProcessedAtMs: 1_700_000_000_000 + version,
		})
		if err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: outcomes, Key: []byte("alice"), Value: value}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	var beforeCrash []*kgo.Record
	for v := int64(1); v <= 3; v++ {
		beforeCrash = append(beforeCrash, produce("before-crash", v))
	}

	// The previous sink inserted this poll and died before committing it.
	log := slog.New(slog.DiscardHandler)
	if err := sinkch.New(sinkch.Options{Config: cfg, Brokers: brokers, Conn: conn, Logger: log}).Insert(ctx, beforeCrash); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- sinkch.New(sinkch.Options{Config: cfg, Brokers: brokers, Conn: conn, Logger: log}).Run(runCtx)
	}()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	}
	// A record after the crash: once its row is in, the restarted sink has
	// been through everything before it on the partition.
	produce("after-restart", 4)
	inserted := testenv.Poll(ctx, func() bool {
		var n uint64
		err := conn.QueryRow(ctx, "SELECT count() FROM "+cfg.ClickHouse.Database+".events WHERE event_id = 'after-restart'").Scan(&n)
		if err != nil {
			stop()
			t.Fatal(err)
		}
		return n > 0
	})
	stop()
	if !inserted {
		t.Fatal("the restarted sink never inserted the new record")
	}

	var rows, positions uint64
	err := conn.QueryRow(ctx, "SELECT count(), uniqExact(`topic`, `partition`, `offset`) FROM "+cfg.ClickHouse.Database+".events").Scan(&rows, &positions)
	if err != nil {
		t.Fatal(err)
	}
	if positions != 4 || rows != positions {
		t.Errorf("events has %d rows for %d source positions, want 4 rows, one per position", rows, positions)
	}
}

// Rows written before migration 0004 created sink_positions still count:
// the migration backfills their positions, and a sink started after it
// skips them.
func TestPositionsMigrationHonoursEarlierRows(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	conn, c := openTestDatabase(t)
	migrateBelow(t, ctx, conn, c.Database, 4)
	outcomes := naming.Prefixes{}.For("presence").Outcomes
	outcome := func(offset int64) *kgo.Record {
		return kafkaRecord(t, outcomes, 1, offset, record.Outcome{Stream: "presence", Key: "alice",
			EventID: fmt.Sprintf("e%d", offset), Outcome: record.Applied, ProcessedAtMs: 1_700_000_000_000 + offset})
	}
	// What an older sink wrote: offsets 0 to 4 of partition 1.
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+c.Database+".events (stream, entity_key, event_id, processed_at_ms, processed_at, `topic`, `partition`, `offset`)")
	if err != nil {
		t.Fatal(err)
	}
	for offset := int64(0); offset <= 4; offset++ {
		if err := batch.Append("presence", "alice", fmt.Sprintf("e%d", offset), 1_700_000_000_000+offset,
			time.UnixMilli(1_700_000_000_000+offset), outcomes, int32(1), offset); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}

	if _, err := sinkch.Migrate(ctx, conn, c, nil); err != nil {
		t.Fatal(err)
	}
	var held int64
	if err := conn.QueryRow(ctx, "SELECT max(max_offset) FROM "+c.Database+".sink_positions WHERE table_name = 'events' AND `topic` = ? AND `partition` = 1",
		outcomes).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 4 {
		t.Fatalf("sink_positions holds offset %d for the earlier rows, want 4", held)
	}

	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClickHouse = c
	var again []*kgo.Record
	for offset := int64(3); offset <= 7; offset++ {
		again = append(again, outcome(offset))
	}
	if err := quietSink(cfg, conn).Insert(ctx, again); err != nil {
		t.Fatal(err)
	}
	var rows, positions uint64
	var top int64
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExact(`offset`), max(`offset`) FROM "+c.Database+".events").Scan(&rows, &positions, &top); err != nil {
		t.Fatal(err)
	}
	if rows != 8 || positions != 8 || top != 7 {
		t.Fatalf("events has %d rows for %d offsets up to %d, want 8 rows for offsets 0 to 7", rows, positions, top)
	}
	// The insert moved the position through the view.
	if err := conn.QueryRow(ctx, "SELECT max(max_offset) FROM "+c.Database+".sink_positions WHERE table_name = 'events' AND `topic` = ? AND `partition` = 1",
		outcomes).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 7 {
		t.Fatalf("sink_positions holds offset %d after the insert, want 7", held)
	}
}

// An INSERT can land on the server while the client sees an error (the
// connection dropped after the server wrote the block). The retry reads the
// positions again, finds the block there, and does not send it twice.
func TestRetryDoesNotResendABlockThatLanded(t *testing.T) {
	ctx, newSink, count := sinkOverDatabase(t)
	records := presenceOutcomes(t, "bob", 2, 10, 20)

	// The retrying sink gathered its batch before the block landed; the
	// block then lands (here by another sink's hand, as the lost reply
	// would have it).
	retrying := newSink()
	pending, err := retrying.Gather(ctx, records[:8])
	if err != nil {
		t.Fatal(err)
	}
	if err := newSink().Insert(ctx, records[:6]); err != nil {
		t.Fatal(err)
	}
	if err := retrying.Flush(ctx, pending, true); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 8 {
		t.Fatalf("events has %d rows after the retry, want 8 (6 that landed and the 2 the retry added)", n)
	}
	// Without the reading again a retry would double them: the check fails
	// when it should.
	stale, err := newSink().Gather(ctx, records[8:])
	if err != nil {
		t.Fatal(err)
	}
	if err := newSink().Insert(ctx, records[8:]); err != nil {
		t.Fatal(err)
	}
	if err := retrying.Flush(ctx, stale, false); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 12 {
		t.Fatalf("events has %d rows after a first try of landed rows, want 12 (2 doubled)", n)
	}
}

// The writer prepares a batch's INSERT, its rows streamed to the server,
// while the batch before is written. Sent at the first try, it writes its
// rows once; on a retry it is dropped, because it was built before the
// positions were read again, and the server must write none of the rows it
// had received (Open's connections reset when closed; an orderly close
// would have ClickHouse 18.16 write them).
func TestPreparedInsertIsSentOnceOrRebuiltOnRetry(t *testing.T) {
	ctx, newSink, count := sinkOverDatabase(t)
	records := presenceOutcomes(t, "carol", 1, 0, 16)
	sink := newSink()
	prepared := func(records []*kgo.Record) *sinkch.Batch {
		b, err := sink.Gather(ctx, records)
		if err != nil {
			t.Fatal(err)
		}
		sink.Prepare(ctx, b)
		return b
	}

	if err := sink.Flush(ctx, prepared(records[:4]), false); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 4 {
		t.Fatalf("events has %d rows after a prepared insert of 4, want 4", n)
	}
	// Rows 4..9 land by another sink's hand after the INSERT of 4..11 was
	// prepared; the retry sends only 10 and 11.
	pending := prepared(records[4:12])
	if err := newSink().Insert(ctx, records[4:10]); err != nil {
		t.Fatal(err)
	}
	if err := sink.Flush(ctx, pending, true); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 12 {
		t.Fatalf("events has %d rows after the retry of a prepared insert, want 12", n)
	}
}

// presenceOutcomes returns outcome records of one entity at offsets from
// to to (exclusive) of a partition of presence.outcomes.
func presenceOutcomes(t *testing.T, key string, partition int32, from, to int64) []*kgo.Record {
	var records []*kgo.Record
	for offset := from; offset < to; offset++ {
		records = append(records, kafkaRecord(t, naming.Prefixes{}.For("presence").Outcomes, partition, offset, record.Outcome{Stream: "presence",
			Key: key, EventID: fmt.Sprintf("e%d", offset), Outcome: record.Applied, ProcessedAtMs: 1_700_000_000_000}))
	}
	return records
}

// sinkOverDatabase migrates a database of its own, and returns how to make
// a sink writing to it and how to count its events.
func sinkOverDatabase(t *testing.T) (context.Context, func() *sinkch.Sink, func() uint64) {
	ctx := testenv.Context(t, time.Minute)
	conn, cfg := migratedDatabase(t, ctx)
	newSink := func() *sinkch.Sink { return quietSink(cfg, conn) }
	return ctx, newSink, func() uint64 {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+cfg.ClickHouse.Database+".events").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// A sink stopped as it hands a batch to its INSERT lets the INSERT be
// answered: when the sink returns, ClickHouse holds the rows and, through
// the views, their positions, so a sink started next skips them. Given up
// at the stop, the INSERT would fail at once while the server could still
// be writing, and the sink would return before the positions were in.
func TestStoppedSinkLetsItsInsertLand(t *testing.T) {
	ctx, newSink, count := sinkOverDatabase(t)
	records := presenceOutcomes(t, "frank", 5, 0, 4)
	if err := newSink().NewPipeline().InsertStopped(ctx, records); err != nil {
		t.Fatalf("the INSERT under way at the stop: %v", err)
	}
	if n := count(); n != 4 {
		t.Fatalf("events has %d rows, want the 4 of the INSERT", n)
	}
	if err := newSink().Insert(ctx, records); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 4 {
		t.Errorf("events has %d rows after a sink started next read the records again, want 4: their positions were not in", n)
	}
}

// The server can die after writing an INSERT's rows to the table and
// before writing their position through the view: the rows are in,
// sink_positions lags them, and the client saw an error. The retry finds
// the rows themselves and does not send them twice, in every table. Here
// the views are detached while the block lands, which leaves the same
// state; the first retry, by a sink that gathered the batch before, must
// then add nothing.
func TestRetryFindsLandedRowsWhosePositionWasLost(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	conn, cfg := migratedDatabase(t, ctx)
	db := cfg.ClickHouse.Database
	newSink := func() *sinkch.Sink { return quietSink(cfg, conn) }
	var records []*kgo.Record
	records = append(records, presenceOutcomes(t, "dave", 0, 0, 5)...)
	records = append(records, presenceOutcomes(t, "erin", 3, 7, 9)...)
	for offset := int64(0); offset < 3; offset++ {
		records = append(records, kafkaRecord(t, naming.Prefixes{}.For("presence").State, 1, offset, state("dave", offset+1, "ONLINE")))
	}
	for offset := int64(0); offset < 2; offset++ {
		records = append(records, kafkaRecord(t, naming.Prefixes{}.For("orders").DLQ, 4, offset, record.DeadLetter{
			Stream: "orders", Topic: "orders.in", Partition: 2, Offset: 40 + offset, Key: fmt.Sprintf("ord-%d", offset),
			Reason: "orphan_ttl", EventID: fmt.Sprintf("pay-%d", offset), EventType: "order.payment_received",
			ReceivedAtMs: 1_700_000_000_000, AtMs: 1_700_086_400_000, Payload: []byte(`{"event_id":"pay"}`)}))
	}
	tables := map[string]uint64{"events": 7, "entity_state": 3, "dlq": 2, "orphans": 2}
	counts := func() map[string]uint64 {
		got := map[string]uint64{}
		for table := range tables {
			var n uint64
			if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+"."+table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			got[table] = n
		}
		return got
	}

	retrying := newSink()
	pending, err := retrying.Gather(ctx, records)
	if err != nil {
		t.Fatal(err)
	}
	views := []string{"events_positions", "entity_state_positions", "dlq_positions", "orphans_positions"}
	for _, view := range views {
		if err := conn.Exec(ctx, "DETACH TABLE "+db+"."+view); err != nil {
			t.Fatal(err)
		}
	}
	if err := newSink().Insert(ctx, records); err != nil {
		t.Fatal(err)
	}
	for _, view := range views {
		if err := conn.Exec(ctx, "ATTACH TABLE "+db+"."+view); err != nil {
			t.Fatal(err)
		}
	}
	var positions uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".sink_positions").Scan(&positions); err != nil {
		t.Fatal(err)
	}
	if positions != 0 {
		t.Fatalf("sink_positions has %d rows; the test needs the positions lost", positions)
	}
	if err := retrying.Flush(ctx, pending, true); err != nil {
		t.Fatal(err)
	}
	if got := counts(); !maps.Equal(got, tables) {
		t.Fatalf("rows per table after the retry: %v, want %v", got, tables)
	}
}

// Rows of a partition found in part (as a block that spans two months can
// land, one month's part without the other's) do not move the position:
// the retry sends them all again, doubling some rather than losing any.
func TestRetryResendsRowsThatLandedInPart(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	conn, cfg := migratedDatabase(t, ctx)
	db := cfg.ClickHouse.Database
	newSink := func() *sinkch.Sink { return quietSink(cfg, conn) }
	records := presenceOutcomes(t, "frank", 0, 0, 5)
	retrying := newSink()
	pending, err := retrying.Gather(ctx, records)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "DETACH TABLE "+db+".events_positions"); err != nil {
		t.Fatal(err)
	}
	if err := newSink().Insert(ctx, records[:3]); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "ATTACH TABLE "+db+".events_positions"); err != nil {
		t.Fatal(err)
	}
	if err := retrying.Flush(ctx, pending, true); err != nil {
		t.Fatal(err)
	}
	var n, offsets uint64
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExact(`offset`) FROM "+db+".events").Scan(&n, &offsets); err != nil {
		t.Fatal(err)
	}
	if n != 8 || offsets != 5 {
		t.Fatalf("events has %d rows for %d offsets, want 8 rows (3 doubled) for all 5", n, offsets)
	}
}
