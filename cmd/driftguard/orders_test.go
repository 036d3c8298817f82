package main

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/driftguard/driftguard/internal/testenv"
)

// Lost+found on the real broker and ClickHouse, with the processor as a real
// process killed by SIGKILL while children wait: a payment before its order
// is reconciled, payments whose order never comes are expired on time into
// the DLQ and driftguard.orphans, and no child is lost or decided twice.
func TestOrdersLostAndFoundSurvivesSIGKILL(t *testing.T) {
	ctx := testenv.Context(t, 90*time.Second)

	// A uniquely named copy of the orders stream with a short TTL, defined
	// in a config file the way an operator would.
	stream := testenv.UniqueName("orders")
	const ttl = 4 * time.Second
	h := newProcessHarness(t, ctx, "orders", stream, ordersConfig(stream, ttl))
	proc := h.start("state")

	child := func(id, parent string) []byte {
		return fmt.Appendf(nil, `{"event_id":%q,"event_type":"order.payment_received","parent_id":%q,"payload":{"amount":12}}`, id, parent)
	}
	h.produce("o1", child("pay-1", "o1"))
	h.produce("o2", child("pay-2", "o2"))
	h.produce("o3", child("pay-3", "o3"))

	q := h.count
	testenv.WaitFor(t, ctx, "three quarantined children", func() bool {
		return q("SELECT uniqExact(event_id) FROM %s.events WHERE stream = '%s' AND outcome = 'quarantined'") == 3
	})

	// Killed while the children wait; the order arrives while it is down.
	sigkill(t, proc)
	h.produce("o1", []byte(`{"event_id":"order-1","event_type":"order.created","order_id":"o1","payload":{"total":12}}`))
	h.start("state")

	defer func() {
		if t.Failed() {
			dumpEvents(t, h.conn, h.cfg.ClickHouse.Database, stream)
		}
	}()
	// The sink reads outcomes and DLQ records from different topics: wait
	// for both.
	testenv.WaitFor(t, ctx, "the payment reconciled and two orphans expired and archived", func() bool {
		return q("SELECT count() FROM %s.events WHERE stream = '%s' AND event_id = 'pay-1' AND outcome = 'reconciled'") == 1 &&
			q("SELECT count() FROM %s.events WHERE stream = '%s' AND outcome = 'expired'") >= 2 &&
			q("SELECT count() FROM %s.orphans WHERE stream = '%s' AND status = 'PERMANENTLY_ORPHANED'") >= 2 &&
			q("SELECT count() FROM %s.dlq WHERE stream = '%s'") >= 2
	})
	// Anything decided twice would have been written by now too.
	time.Sleep(time.Second)
	// Each child ends exactly once, however often the restart replayed its
	// input.
	finals := map[string]string{"pay-1": "reconciled", "pay-2": "expired", "pay-3": "expired"}
	for id, want := range finals {
		query := "SELECT count() FROM %s.events WHERE stream = '%s' AND event_id = '" + id + "' AND outcome IN ('applied', 'reconciled', 'expired')"
		if n := q(query); n != 1 {
			t.Errorf("%s has %d final outcomes, want exactly one (%s)", id, n, want)
		}
		query = "SELECT count() FROM %s.events WHERE stream = '%s' AND event_id = '" + id + "' AND outcome = '" + want + "'"
		if n := q(query); n != 1 {
			t.Errorf("%s did not end %s", id, want)
		}
	}
	if n := q("SELECT count() FROM %s.dlq WHERE stream = '%s' AND reason = 'orphan_ttl'"); n != 2 {
		t.Errorf("%d orphan_ttl rows in dlq, want 2", n)
	}
	var parents string
	_ = h.conn.QueryRow(ctx, fmt.Sprintf("SELECT arrayStringConcat(groupArray(entity_key), ',') FROM (SELECT entity_key FROM %s.orphans WHERE stream = '%s' ORDER BY entity_key)",
		h.cfg.ClickHouse.Database, stream)).Scan(&parents)
	if parents != "o2,o3" {
		t.Errorf("orphans name missing parents %q, want o2,o3", parents)
	}
	// On time: no orphan expired before its TTL had passed.
	if n := q("SELECT count() FROM %s.orphans WHERE stream = '%s' AND expired_at_ms - received_at_ms < " + strconv.FormatInt(ttl.Milliseconds(), 10)); n != 0 {
		t.Errorf("%d orphans expired before their TTL", n)
	}
}

// dumpEvents logs the stream's outcome rows, to see a failure's history.
func dumpEvents(t *testing.T, conn driver.Conn, database, stream string) {
	rows, err := conn.Query(context.Background(), fmt.Sprintf(
		"SELECT entity_key, event_id, outcome, reason, input_offset, processed_at_ms FROM %s.events WHERE stream = '%s' ORDER BY processed_at_ms", database, stream))
	if err != nil {
		t.Log(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var key, id, outcome, reason string
		var offset, at int64
		_ = rows.Scan(&key, &id, &outcome, &reason, &offset, &at)
		t.Logf("event %s %s %s %s offset=%d at=%d", key, id, outcome, reason, offset, at)
	}
}

// ordersConfig is a config file defining stream as a copy of the
// shipped orders entry with the given TTL and a fast timer tick.
func ordersConfig(stream string, ttl time.Duration) string {
	return fmt.Sprintf(`processing:
  timer_tick: 200ms
streams:
  %s:
    policy: latest
    key: /order_id
    key_by_type:
      order.payment_received: /parent_id
    event_id: /event_id
    type: {field: /event_type}
    parent:
      types: [order.created]
      children: [order.payment_received]
      ttl: %s
    schemas:
      order.created: streams/orders.created.schema.json
      order.payment_received: streams/orders.child.schema.json
    limits: {partitions: 3}
`, stream, ttl)
}
