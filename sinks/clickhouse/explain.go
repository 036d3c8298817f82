package clickhouse

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/driftguard/driftguard/internal/record"
)

// EventDecisions reads every decision made for eventID of stream from
// database's events table, in the order of `<stream>.outcomes` (by its
// partition and offset: within a key, the order they were made), for
// `driftguard explain`. The table is indexed by stream and key, not by
// event id: the query reads the stream's rows, and ClickHouse reads them
// far faster than a scan of the outcomes topic would.
func EventDecisions(ctx context.Context, conn driver.Conn, database, stream, eventID string) ([]record.Outcome, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT stream, entity_key, event_id, event_type, version, outcome, reason, gap,
	buffer_depth, occurred_at_ms, received_at_ms, processed_at_ms, input_partition, input_offset, decision_id, action, requested_by, payload
FROM %s.events WHERE stream = ? AND event_id = ? ORDER BY `+"`partition`, `offset`", database), stream, eventID)
	if err != nil {
		return nil, fmt.Errorf("decisions of %s in %s.events: %w", eventID, database, err)
	}
	defer rows.Close()
	var outs []record.Outcome
	for rows.Next() {
		var o record.Outcome
		var outcome, reason, action, payload string
		var depth int64
		if err := rows.Scan(&o.Stream, &o.Key, &o.EventID, &o.EventType, &o.Version, &outcome, &reason, &o.Gap,
			&depth, &o.OccurredAtMs, &o.ReceivedAtMs, &o.ProcessedAtMs, &o.InputPartition, &o.InputOffset, &o.DecisionID, &action, &o.RequestedBy, &payload); err != nil {
			return nil, err
		}
		o.Outcome, o.Reason, o.BufferDepth, o.Action = record.Result(outcome), record.Reason(reason), int(depth), record.ActionName(action)
		if payload != "" {
			o.Payload = []byte(payload)
		}
		outs = append(outs, o)
	}
	return outs, rows.Err()
}
