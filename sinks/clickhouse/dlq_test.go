package clickhouse_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// Every DLQ record lands in dlq; expired orphans also in orphans, with
// status PERMANENTLY_ORPHANED; a restarted sink given the same records
// (inserted, never committed) doubles neither.
func TestSinkArchivesDeadLettersAndOrphans(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	conn, cfg := migratedDatabase(t, ctx)
	dlq := naming.Prefixes{}.For("orders").DLQ
	orphan := record.DeadLetter{
		Stream: "orders", Topic: "orders.in", Partition: 2, Offset: 41, Key: "ord-9", Reason: "orphan_ttl",
		EventID: "pay-1", EventType: "order.payment_received", ReceivedAtMs: 1_700_000_000_000, AtMs: 1_700_086_400_000,
		Payload: []byte(`{"event_id":"pay-1","parent_id":"ord-9"}`),
	}
	poison := record.DeadLetter{Stream: "orders", Topic: "orders.in", Partition: 2, Offset: 42, Key: "ord-9", Reason: "undecodable",
		Detail: "not JSON", AtMs: 1_700_000_000_500, Payload: []byte("garbage")}
	records := []any{orphan, poison}
	for attempt := range 2 {
		sink := quietSink(cfg, conn)
		recs := make([]*kgo.Record, 0, len(records))
		for i, v := range records {
			recs = append(recs, kafkaRecord(t, dlq, 2, int64(10+i), v))
		}
		if err := sink.Insert(ctx, recs); err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
	}
	count := func(query string) uint64 {
		var n uint64
		if err := conn.QueryRow(ctx, fmt.Sprintf(query, cfg.ClickHouse.Database)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("SELECT count() FROM %s.dlq"); n != 2 {
		t.Errorf("dlq holds %d rows, want 2", n)
	}
	var key, id, status string
	var received, expired int64
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT entity_key, event_id, status, received_at_ms, expired_at_ms FROM %s.orphans", cfg.ClickHouse.Database)).
		Scan(&key, &id, &status, &received, &expired); err != nil {
		t.Fatal(err)
	}
	if key != "ord-9" || id != "pay-1" || status != sinkch.StatusPermanentlyOrphaned || received != orphan.ReceivedAtMs || expired != orphan.AtMs {
		t.Errorf("orphans row: %s %s %s %d %d", key, id, status, received, expired)
	}
	if n := count("SELECT count() FROM %s.orphans"); n != 1 {
		t.Errorf("orphans holds %d rows, want 1", n)
	}
	if n := count("SELECT count() FROM %s.dlq WHERE reason = 'undecodable' AND `offset` = 42 AND source_offset = 11"); n != 1 {
		t.Errorf("the poison record's positions are not kept (%d rows)", n)
	}
}
