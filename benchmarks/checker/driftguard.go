package checker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// Driftguard is where a driftguard pipeline keeps what it was sent: the
// brokers and the ClickHouse database its sink writes.
type Driftguard struct {
	Brokers    []string
	ClickHouse config.ClickHouse
	// Drain is how long to wait for the processors to decide everything
	// in `<stream>.in` and for the sink to write every outcome before
	// judging; default 2 minutes.
	Drain time.Duration
	// Naming is the pipeline's kafka.topic_prefix and kafka.group_prefix;
	// zero: none.
	Naming naming.Prefixes
}

// input is one record of `<stream>.in`.
type input struct {
	eventID string
	decided bool
}

// Check judges a driftguard run of streams at every hop: each accepted
// event id in `<stream>.in`, each of those records decided in
// `<stream>.outcomes`, each decision once there and once in ClickHouse's
// events, each event applied at most once, and the final state in
// ClickHouse (entity_state, and for orders the applied children in
// events) against want.
func (dg Driftguard) Check(ctx context.Context, sent []model.Delivery, want model.State, streams []string) (*Report, error) {
	if dg.Drain == 0 {
		dg.Drain = 2 * time.Minute
	}
	conn, err := sinkch.Open(ctx, dg.ClickHouse)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	r := newReport(sent, streams)
	got := model.State{}
	for _, stream := range streams {
		if err := dg.checkStream(ctx, conn, r, stream, sent, &got); err != nil {
			return nil, fmt.Errorf("%s: %w", stream, err)
		}
	}
	r.compare(want, got)
	return r.finish(), nil
}

func (dg Driftguard) checkStream(ctx context.Context, conn driver.Conn, r *Report, stream string, sent []model.Delivery, got *model.State) error {
	sr := r.Streams[stream]
	names := dg.Naming.For(stream)
	deadline := time.Now().Add(dg.Drain)
	behind, err := waitGroupCaughtUp(ctx, dg.Brokers, dg.Naming.Group(stream), names.In, dg.Drain)
	if err != nil {
		return err
	}
	if behind > 0 {
		sr.note("the processors were still %d records behind %s after %s", behind, names.In, dg.Drain)
	}

	// <stream>.in: every accepted event id there.
	inputs := map[int32]map[int64]*input{}
	inIDs := map[string]int{}
	if _, err := readTopic(ctx, dg.Brokers, names.In, func(rec *kgo.Record) {
		id := header(rec, record.HeaderEventID)
		if inputs[rec.Partition] == nil {
			inputs[rec.Partition] = map[int64]*input{}
		}
		inputs[rec.Partition][rec.Offset] = &input{eventID: id}
		inIDs[id]++
		sr.InLog++
	}, nil); err != nil {
		return err
	}
	lostAt := map[string]bool{}
	for _, d := range sent {
		if d.Stream == stream && d.Accepted() && inIDs[d.EventID] == 0 && !lostAt[d.EventID] {
			lostAt[d.EventID] = true
			sr.Lost++
			sr.note("lost at ingest: %s acknowledged with %d, not in %s", d.EventID, d.Status, names.In)
		}
	}

	// <stream>.outcomes: every input decided, each decision once, each
	// event applied at most once.
	decisions := map[string]int{}
	applied := map[string]int{}
	var o record.Outcome
	var commits commitTimes
	lastOutcome, err := readTopic(ctx, dg.Brokers, names.Outcomes, func(rec *kgo.Record) {
		if _, err := record.DecodeOutcome(rec.Value, &o); err != nil {
			sr.note("an outcome record at %d/%d does not decode: %v", rec.Partition, rec.Offset, err)
			return
		}
		sr.Decisions++
		sr.Outcomes[string(o.Outcome)]++
		id := strings.Clone(o.DecisionID)
		decisions[id]++
		if decisions[id] == 2 {
			sr.Doubled++
			sr.note("doubled: decision %s (%s of %s) twice in %s", id, o.Outcome, o.EventID, names.Outcomes)
		}
		first := false
		if in := inputs[o.InputPartition][o.InputOffset]; in != nil && in.eventID == o.EventID {
			first = !in.decided
			in.decided = true
		}
		if o.Outcome == record.Applied || o.Outcome == record.Reconciled {
			applied[o.EventID]++
			if applied[o.EventID] == 2 {
				sr.Doubled++
				sr.note("doubled: %s applied twice", o.EventID)
			}
		}
		r.Timings = append(r.Timings, Timing{Stream: stream, EventID: strings.Clone(o.EventID), ReceivedAtMs: o.ReceivedAtMs,
			DecidedAtMs: o.ProcessedAtMs, First: first, OutcomePart: rec.Partition, OutcomeOffset: rec.Offset})
		i := len(r.Timings) - 1
		commits.wrote(rec, func(atMs int64) { r.Timings[i].CommittedAtMs = atMs })
	}, commits.marker)
	if err != nil {
		return err
	}
	for p, offsets := range inputs {
		for off, in := range offsets {
			if !in.decided && !lostAt[in.eventID] {
				lostAt[in.eventID] = true
				sr.Lost++
				sr.note("lost in the processors: %s at %s %d/%d has no decision", in.eventID, names.In, p, off)
			}
		}
	}

	// ClickHouse: every decision a row, once.
	lastState, err := readTopic(ctx, dg.Brokers, names.State, func(*kgo.Record) {}, nil)
	if err != nil {
		return err
	}
	if err := waitSink(ctx, conn, dg.ClickHouse.Database, map[string]map[int32]int64{"events": lastOutcome, "entity_state": lastState},
		names, deadline); err != nil {
		sr.note("%v", err)
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT decision_id, event_id, outcome, event_type, entity_key, toInt32(partition), offset
		FROM %s.events WHERE stream = ?`, dg.ClickHouse.Database), stream)
	if err != nil {
		return err
	}
	rowsAt := map[[2]int64]bool{}
	inRows := map[string]int{}
	orders := map[string]model.Order{}
	for rows.Next() {
		var id, eventID, outcome, typ, key string
		var part int32
		var off int64
		if err := rows.Scan(&id, &eventID, &outcome, &typ, &key, &part, &off); err != nil {
			rows.Close()
			return err
		}
		sr.Rows++
		inRows[id]++
		if inRows[id] == 2 {
			sr.Doubled++
			sr.note("doubled: decision %s (%s of %s) has two rows in events", id, outcome, eventID)
		}
		rowsAt[[2]int64{int64(part), off}] = true
		if stream == "orders" && (outcome == string(record.Applied) || outcome == string(record.Reconciled)) {
			od := orders[key]
			if typ == "order.created" {
				od.Created = true
			} else {
				od.Children = append(od.Children, eventID)
			}
			orders[key] = od
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for id := range decisions {
		if inRows[id] == 0 {
			sr.Lost++
			sr.note("lost in the sink: decision %s has no row in events", id)
		}
	}
	for i := range r.Timings {
		t := &r.Timings[i]
		if t.Stream == stream && rowsAt[[2]int64{int64(t.OutcomePart), t.OutcomeOffset}] {
			t.HasRow = true
		}
	}
	return dg.state(ctx, conn, stream, orders, got)
}

// state reads the final state of stream from ClickHouse into got.
func (dg Driftguard) state(ctx context.Context, conn driver.Conn, stream string, orders map[string]model.Order, got *model.State) error {
	if stream == "orders" {
		for k, o := range orders {
			slices.Sort(o.Children)
			orders[k] = o
		}
		got.Orders = orders
		return nil
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT entity_key, state FROM %s.entity_state FINAL WHERE stream = ?`,
		dg.ClickHouse.Database), stream)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var key, state string
		if err := rows.Scan(&key, &state); err != nil {
			return err
		}
		if err := decodeState(stream, key, state, got); err != nil {
			return fmt.Errorf("entity_state of %s: %w", key, err)
		}
	}
	return rows.Err()
}

func decodeState(stream, key, state string, got *model.State) error {
	switch stream {
	case "presence":
		return decodeInto(state, key, &got.Presence, nil)
	case "workflow":
		return decodeInto(state, key, &got.Workflow, nil)
	case "chat":
		return decodeInto(state, key, &got.Chat, func(c *model.Conversation) { slices.Sort(c.Members) })
	}
	return fmt.Errorf("no state reader for stream %q", stream)
}

// decodeInto decodes one entity's state JSON into (*m)[key], after fix.
func decodeInto[V any](state, key string, m *map[string]V, fix func(*V)) error {
	var v V
	if err := json.Unmarshal([]byte(state), &v); err != nil {
		return err
	}
	if fix != nil {
		fix(&v)
	}
	if *m == nil {
		*m = map[string]V{}
	}
	(*m)[key] = v
	return nil
}

// waitSink waits until ClickHouse holds, per table, the rows up to the
// last offset of each partition of its source topic, or the deadline.
func waitSink(ctx context.Context, conn driver.Conn, db string, last map[string]map[int32]int64, names naming.Topics, deadline time.Time) error {
	sources := map[string]string{"events": names.Outcomes, "entity_state": names.State}
	for {
		held, err := SinkPositions(ctx, conn, db)
		if err != nil {
			return err
		}
		short := 0
		for table, parts := range last {
			for p, off := range parts {
				if off >= 0 && held[Position{Table: table, Topic: sources[table], Partition: p}] < off {
					short++
				}
			}
		}
		if short == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sink had not written %d partitions to their end by the deadline", short)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Position names a table's rows from one source partition.
type Position struct {
	Table     string
	Topic     string
	Partition int32
}

// SinkPositions returns the highest source offset each table holds, per
// source topic and partition: what the sink keeps in sink_positions,
// a handful of rows, cheap to read while it writes.
func SinkPositions(ctx context.Context, conn driver.Conn, db string) (map[Position]int64, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT table_name, topic, partition, max(max_offset) FROM %s.sink_positions
		GROUP BY table_name, topic, partition`, db))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[Position]int64{}
	for rows.Next() {
		var p Position
		var off int64
		if err := rows.Scan(&p.Table, &p.Topic, &p.Partition, &off); err != nil {
			return nil, err
		}
		out[p] = off
	}
	return out, rows.Err()
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
