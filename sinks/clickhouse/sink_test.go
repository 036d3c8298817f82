package clickhouse_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

func kafkaRecord(t *testing.T, topic string, partition int32, offset int64, value any) *kgo.Record {
	t.Helper()
	raw, ok := value.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(value); err != nil {
			t.Fatal(err)
		}
	}
	return &kgo.Record{Topic: topic, Partition: partition, Offset: offset, Value: raw}
}

func state(key string, version int64, presence string) record.State {
	return record.State{
		Stream:      "presence",
		Key:         key,
		Version:     version,
		State:       json.RawMessage(`{"presence":"` + presence + `"}`),
		UpdatedAtMs: 1_700_000_000_000 + version,
		ExpiresAtMs: 1_700_000_900_000,
	}
}

// The sink's Insert, fed records as the consumer would poll them, against a
// migrated database on the real server.
func TestSinkInsertWritesOutcomesAndLatestState(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	conn, cfg := migratedDatabase(t, ctx)
	sink := quietSink(cfg, conn)
	names := naming.Prefixes{}.For("presence")

	applied := record.Outcome{
		Stream: "presence", Key: "alice", EventID: "alice-843", EventType: "presence.changed",
		Version: 843, Outcome: record.Applied, Gap: 1, BufferDepth: 0,
		OccurredAtMs: 1_700_000_000_000, ReceivedAtMs: 1_700_000_000_100, ProcessedAtMs: 1_700_000_000_200,
		InputPartition: 4, InputOffset: 7, DecisionID: "presence/4/7/0",
		Payload: json.RawMessage(`{"event_id":"alice-843","user_id":"alice","presence":"BUSY"}`),
	}
	stale := applied
	stale.EventID, stale.Version, stale.Outcome, stale.Reason, stale.Gap = "alice-842", 842, record.Stale, "version 842 <= 843", 0
	stale.InputOffset, stale.DecisionID = 8, "presence/4/8/0"

	// One poll: decodable and undecodable records of both kinds, plus a
	// record from a topic the sink does not own. The undecodable ones go
	// to dlq, the batch is not failed: a poison record must not block a
	// partition.
	first := []*kgo.Record{
		kafkaRecord(t, names.Outcomes, 2, 40, applied),
		kafkaRecord(t, names.Outcomes, 2, 41, []byte("not json")),
		kafkaRecord(t, names.Outcomes, 2, 42, stale),
		kafkaRecord(t, names.State, 2, 10, state("alice", 843, "BUSY")),
		kafkaRecord(t, names.State, 2, 11, []byte("{")),
		kafkaRecord(t, names.State, 1, 20, state("bob", 5, "ONLINE")),
		kafkaRecord(t, "elsewhere.outcomes", 0, 0, applied),
	}
	if err := sink.Insert(ctx, first); err != nil {
		t.Fatalf("Insert with undecodable records: %v", err)
	}
	// A later poll, a separate insert and so a separate part: alice gets an
	// older version (it must not win), bob a newer one (it must).
	second := []*kgo.Record{
		kafkaRecord(t, names.State, 2, 12, state("alice", 842, "ONLINE")),
		kafkaRecord(t, names.State, 1, 21, state("bob", 9, "AWAY")),
	}
	if err := sink.Insert(ctx, second); err != nil {
		t.Fatalf("second Insert: %v", err)
	}
	// A poll of nothing but poison inserts it into dlq alone.
	if err := sink.Insert(ctx, []*kgo.Record{kafkaRecord(t, names.Outcomes, 2, 43, []byte("\x00"))}); err != nil {
		t.Fatalf("Insert of only undecodable records: %v", err)
	}

	type eventRow struct {
		Stream, Key, EventID, EventType, Outcome, Reason string
		Version, Gap, BufferDepth                        int64
		OccurredAtMs, ReceivedAtMs, ProcessedAtMs        int64
		Topic                                            string
		Partition                                        int32
		Offset                                           int64
		InputPartition                                   int32
		InputOffset                                      int64
		Payload, DecisionID                              string
	}
	rows, err := conn.Query(ctx, "SELECT stream, entity_key, event_id, event_type, outcome, reason, version, gap, buffer_depth, "+
		"occurred_at_ms, received_at_ms, processed_at_ms, `topic`, `partition`, `offset`, input_partition, input_offset, payload, decision_id "+
		"FROM "+cfg.ClickHouse.Database+".events ORDER BY `offset`")
	if err != nil {
		t.Fatal(err)
	}
	var events []eventRow
	for rows.Next() {
		var r eventRow
		if err := rows.Scan(&r.Stream, &r.Key, &r.EventID, &r.EventType, &r.Outcome, &r.Reason, &r.Version, &r.Gap, &r.BufferDepth,
			&r.OccurredAtMs, &r.ReceivedAtMs, &r.ProcessedAtMs, &r.Topic, &r.Partition, &r.Offset, &r.InputPartition, &r.InputOffset, &r.Payload, &r.DecisionID); err != nil {
			t.Fatal(err)
		}
		events = append(events, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantEvents := []eventRow{
		{"presence", "alice", "alice-843", "presence.changed", "applied", "", 843, 1, 0,
			1_700_000_000_000, 1_700_000_000_100, 1_700_000_000_200, names.Outcomes, 2, 40, 4, 7, string(applied.Payload), "presence/4/7/0"},
		{"presence", "alice", "alice-842", "presence.changed", "stale", "version 842 <= 843", 842, 0, 0,
			1_700_000_000_000, 1_700_000_000_100, 1_700_000_000_200, names.Outcomes, 2, 42, 4, 8, string(applied.Payload), "presence/4/8/0"},
	}
	if len(events) != len(wantEvents) {
		t.Fatalf("events rows:\n%+v\nwant:\n%+v", events, wantEvents)
	}
	for i := range events {
		if events[i] != wantEvents[i] {
			t.Errorf("events row %d:\n%+v\nwant:\n%+v", i, events[i], wantEvents[i])
		}
	}

	cases := []struct {
		key           string
		wantVersion   uint64
		wantState     string
		wantPartition int32
		wantOffset    int64
	}{
		{"alice", 843, `{"presence":"BUSY"}`, 2, 10},
		{"bob", 9, `{"presence":"AWAY"}`, 1, 21},
	}
	for _, tc := range cases {
		t.Run("entity_state FINAL of "+tc.key, func(t *testing.T) {
			var (
				version              uint64
				st, topic            string
				updatedAt, expiresAt int64
				partition            int32
				offset               int64
			)
			err := conn.QueryRow(ctx, "SELECT version, state, updated_at_ms, expires_at_ms, `topic`, `partition`, `offset` FROM "+
				cfg.ClickHouse.Database+".entity_state FINAL WHERE stream = 'presence' AND entity_key = ?", tc.key).
				Scan(&version, &st, &updatedAt, &expiresAt, &topic, &partition, &offset)
			if err != nil {
				t.Fatal(err)
			}
			if version != tc.wantVersion || st != tc.wantState || topic != names.State || partition != tc.wantPartition || offset != tc.wantOffset {
				t.Errorf("got version %d state %s at %s/%d/%d; want version %d state %s at %s/%d/%d",
					version, st, topic, partition, offset, tc.wantVersion, tc.wantState, names.State, tc.wantPartition, tc.wantOffset)
			}
			if updatedAt != 1_700_000_000_000+int64(tc.wantVersion) || expiresAt != 1_700_000_900_000 {
				t.Errorf("updated_at_ms %d, expires_at_ms %d", updatedAt, expiresAt)
			}
		})
	}

	// The DateTime columns are the *_ms columns in seconds.
	for _, q := range []string{
		"SELECT count() FROM %s.events WHERE toUnixTimestamp(processed_at) != intDiv(processed_at_ms, 1000)",
		"SELECT count() FROM %s.entity_state WHERE toUnixTimestamp(updated_at) != intDiv(updated_at_ms, 1000)",
	} {
		var wrong uint64
		if err := conn.QueryRow(ctx, fmt.Sprintf(q, cfg.ClickHouse.Database)).Scan(&wrong); err != nil {
			t.Fatal(err)
		}
		if wrong != 0 {
			t.Errorf("%d rows where %s", wrong, q)
		}
	}

	// The undecodable records, each once, where the sink read them.
	rows, err = conn.Query(ctx, "SELECT stream, reason, `topic`, `partition`, `offset`, source_topic, source_offset, payload FROM "+
		cfg.ClickHouse.Database+".dlq ORDER BY source_topic, source_offset")
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	for rows.Next() {
		var stream, reason, topic, sourceTopic, payload string
		var partition int32
		var offset, sourceOffset int64
		if err := rows.Scan(&stream, &reason, &topic, &partition, &offset, &sourceTopic, &sourceOffset, &payload); err != nil {
			t.Fatal(err)
		}
		if topic != sourceTopic || offset != sourceOffset {
			t.Errorf("dlq row of %s/%d at %s/%d/%d: want it located where it was read", sourceTopic, sourceOffset, topic, partition, offset)
		}
		dead = append(dead, fmt.Sprintf("%s %s %s/%d %q", stream, reason, topic, offset, payload))
	}
	rows.Close()
	wantDead := []string{
		`presence sink_undecodable presence.outcomes/41 "not json"`,
		`presence sink_undecodable presence.outcomes/43 "\x00"`,
		`presence sink_undecodable presence.state/11 "{"`,
	}
	if !slices.Equal(dead, wantDead) {
		t.Errorf("dlq rows\n%s\nwant\n%s", strings.Join(dead, "\n"), strings.Join(wantDead, "\n"))
	}

	// Without FINAL every inserted version is still there: the undecodable
	// state record added none.
	var stateRows uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+cfg.ClickHouse.Database+".entity_state").Scan(&stateRows); err != nil {
		t.Fatal(err)
	}
	if stateRows != 4 {
		t.Errorf("entity_state has %d rows before merging, want 4", stateRows)
	}
}
