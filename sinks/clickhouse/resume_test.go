package clickhouse_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
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
	outcomes := topics.For("presence").Outcomes

	// One key, so one partition, so the sink sees the records in this order.
	produce := func(eventID string, version int64) *kgo.Record {
		t.Helper()
		value, err := json.Marshal(envelope.Outcome{
			Stream: "presence", Key: "alice", EventID: eventID, EventType: "presence.changed",
			Version: version, Outcome: envelope.OutcomeApplied, ProcessedAtMs: 1_700_000_000_000 + version,
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
	if err := sinkch.New(cfg, brokers, conn, log, nil).Insert(ctx, beforeCrash); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sinkch.New(cfg, brokers, conn, log, nil).Run(runCtx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	}
	// A record after the crash: once its row is in, the restarted sink has
	// been through everything before it on the partition.
	produce("after-restart", 4)
	for {
		var n uint64
		err := conn.QueryRow(ctx, "SELECT count() FROM "+cfg.ClickHouse.Database+".events WHERE event_id = 'after-restart'").Scan(&n)
		if err != nil {
			stop()
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case <-ctx.Done():
			stop()
			t.Fatal("the restarted sink never inserted the new record")
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()

	var rows, positions uint64
	err := conn.QueryRow(ctx, "SELECT count(), uniqExact(`topic`, `partition`, `offset`) FROM "+cfg.ClickHouse.Database+".events").Scan(&rows, &positions)
	if err != nil {
		t.Fatal(err)
	}
	if positions != 4 || rows != positions {
		t.Errorf("events has %d rows for %d source positions, want 4 rows, one per position", rows, positions)
	}
}
