package clickhouse

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/envelope"
)

// A column holds one column of a block being built, as the typed slice
// clickhouse-go appends in one call (column-wise, no per-row reflection).
type column interface {
	name() string
	send(driver.BatchColumn) error
	// keep drops the rows whose mask entry is false.
	keep(mask []bool)
	reset()
}

type values[T any] struct {
	col string
	v   []T
}

func (c *values[T]) name() string                     { return c.col }
func (c *values[T]) add(x T)                          { c.v = append(c.v, x) }
func (c *values[T]) send(bc driver.BatchColumn) error { return bc.Append(c.v) }

func (c *values[T]) keep(mask []bool) {
	n := 0
	for i, x := range c.v {
		if mask[i] {
			c.v[n] = x
			n++
		}
	}
	clear(c.v[n:]) // release the strings of dropped rows
	c.v = c.v[:n]
}

func (c *values[T]) reset() {
	clear(c.v)
	c.v = c.v[:0]
}

// source is where a row was read: a record of a topic partition.
type source struct {
	topic     string
	partition int32
	offset    int64
}

// A block is the rows of one table waiting for one INSERT: a block is
// written whole or not at all, so views over the table count each row once.
type block struct {
	table string
	cols  []column
	// src is each row's source record, for the positions.
	src []source
}

func newColumn[T any](b *block, name string) *values[T] {
	c := &values[T]{col: name}
	b.cols = append(b.cols, c)
	return c
}

func (b *block) rows() int { return len(b.src) }

func (b *block) insertQuery(database string) string {
	names := make([]string, len(b.cols))
	for i, c := range b.cols {
		names[i] = "`" + c.name() + "`"
	}
	return "INSERT INTO " + database + "." + b.table + " (" + strings.Join(names, ", ") + ")"
}

// send runs one INSERT of the whole block: clickhouse-go sends the block as
// one Data packet, which the server writes as it is (max_insert_block_size
// only splits text formats it parses itself).
func (b *block) send(ctx context.Context, conn driver.Conn, database string) error {
	batch, err := conn.PrepareBatch(ctx, b.insertQuery(database))
	if err != nil {
		return err
	}
	defer batch.Close()
	for i, c := range b.cols {
		if err := c.send(batch.Column(i)); err != nil {
			return fmt.Errorf("column %s: %w", c.name(), err)
		}
	}
	return batch.Send()
}

// highest returns the highest offset per source partition in the block.
func (b *block) highest() map[heldKey]int64 {
	out := map[heldKey]int64{}
	for _, s := range b.src {
		k := heldKey{b.table, s.topic, s.partition}
		if o, ok := out[k]; !ok || s.offset > o {
			out[k] = s.offset
		}
	}
	return out
}

// keepAfter drops the rows at or below held(source), those a table already
// holds.
func (b *block) keepAfter(held func(heldKey) int64) (dropped int) {
	mask := make([]bool, len(b.src))
	for i, s := range b.src {
		mask[i] = s.offset > held(heldKey{b.table, s.topic, s.partition})
		if !mask[i] {
			dropped++
		}
	}
	if dropped == 0 {
		return 0
	}
	for _, c := range b.cols {
		c.keep(mask)
	}
	n := 0
	for i, s := range b.src {
		if mask[i] {
			b.src[n] = s
			n++
		}
	}
	b.src = b.src[:n]
	return dropped
}

func (b *block) reset() {
	for _, c := range b.cols {
		c.reset()
	}
	b.src = b.src[:0]
}

func (b *block) from(r *kgo.Record) {
	b.src = append(b.src, source{r.Topic, r.Partition, r.Offset})
}

// seconds is a unix-ms time as a DateTime (seconds).
func seconds(ms int64) int64 { return time.UnixMilli(ms).Unix() }

// A rowColumn takes its value from a decoded record of type R.
type rowColumn[R any] interface {
	column
	add(r *kgo.Record, row *R)
}

type valuesOf[R, T any] struct {
	values[T]
	get func(*kgo.Record, *R) T
}

func (c *valuesOf[R, T]) add(r *kgo.Record, row *R) { c.v = append(c.v, c.get(r, row)) }

// col is a column named as in the table, with how to get its value.
func col[R, T any](name string, get func(r *kgo.Record, row *R) T) rowColumn[R] {
	return &valuesOf[R, T]{values: values[T]{col: name}, get: get}
}

// The source record's position, under the table's names for it.
func topicCol[R any](name string) rowColumn[R] {
	return col(name, func(r *kgo.Record, _ *R) string { return r.Topic })
}

func partitionCol[R any](name string) rowColumn[R] {
	return col(name, func(r *kgo.Record, _ *R) int32 { return r.Partition })
}

func offsetCol[R any](name string) rowColumn[R] {
	return col(name, func(r *kgo.Record, _ *R) int64 { return r.Offset })
}

// tableBlock is the block of a table whose rows come from records decoded
// as R.
type tableBlock[R any] struct {
	block
	rowCols []rowColumn[R]
}

func newTableBlock[R any](table string, cols ...rowColumn[R]) *tableBlock[R] {
	b := &tableBlock[R]{block: block{table: table}, rowCols: cols}
	for _, c := range cols {
		b.cols = append(b.cols, c)
	}
	return b
}

func (b *tableBlock[R]) add(r *kgo.Record, row *R) {
	for _, c := range b.rowCols {
		c.add(r, row)
	}
	b.from(r)
}

type (
	outcome    = outcomeRow
	state      = envelope.State
	deadLetter = envelope.DeadLetter
)

func newEventsBlock() *tableBlock[outcome] {
	return newTableBlock("events",
		col("stream", func(_ *kgo.Record, o *outcome) string { return o.Stream }),
		col("entity_key", func(_ *kgo.Record, o *outcome) string { return o.Key }),
		col("event_id", func(_ *kgo.Record, o *outcome) string { return o.EventID }),
		col("event_type", func(_ *kgo.Record, o *outcome) string { return o.EventType }),
		col("version", func(_ *kgo.Record, o *outcome) int64 { return o.Version }),
		col("outcome", func(_ *kgo.Record, o *outcome) string { return o.Outcome.Outcome }),
		col("reason", func(_ *kgo.Record, o *outcome) string { return o.Reason }),
		col("gap", func(_ *kgo.Record, o *outcome) int64 { return o.Gap }),
		col("buffer_depth", func(_ *kgo.Record, o *outcome) int64 { return int64(o.BufferDepth) }),
		col("occurred_at_ms", func(_ *kgo.Record, o *outcome) int64 { return o.OccurredAtMs }),
		col("received_at_ms", func(_ *kgo.Record, o *outcome) int64 { return o.ReceivedAtMs }),
		col("processed_at_ms", func(_ *kgo.Record, o *outcome) int64 { return o.ProcessedAtMs }),
		col("processed_at", func(_ *kgo.Record, o *outcome) int64 { return seconds(o.ProcessedAtMs) }),
		topicCol[outcome]("topic"), partitionCol[outcome]("partition"), offsetCol[outcome]("offset"),
		col("input_partition", func(_ *kgo.Record, o *outcome) int32 { return o.InputPartition }),
		col("input_offset", func(_ *kgo.Record, o *outcome) int64 { return o.InputOffset }),
		col("payload", func(_ *kgo.Record, o *outcome) string { return o.payload }),
	)
}

func newStateBlock() *tableBlock[state] {
	return newTableBlock("entity_state",
		col("stream", func(_ *kgo.Record, st *state) string { return st.Stream }),
		col("entity_key", func(_ *kgo.Record, st *state) string { return st.Key }),
		col("version", func(_ *kgo.Record, st *state) uint64 { return uint64(max(st.Version, 0)) }),
		col("state", func(_ *kgo.Record, st *state) string { return string(st.State) }),
		col("updated_at_ms", func(_ *kgo.Record, st *state) int64 { return st.UpdatedAtMs }),
		col("expires_at_ms", func(_ *kgo.Record, st *state) int64 { return st.ExpiresAtMs }),
		col("updated_at", func(_ *kgo.Record, st *state) int64 { return seconds(st.UpdatedAtMs) }),
		topicCol[state]("topic"), partitionCol[state]("partition"), offsetCol[state]("offset"),
	)
}

// In dlq, topic/partition/offset locate the original record in
// <stream>.in; source_* locate the DLQ record the sink read.
func newDLQBlock() *tableBlock[deadLetter] {
	return newTableBlock("dlq",
		col("stream", func(_ *kgo.Record, dl *deadLetter) string { return dl.Stream }),
		col("entity_key", func(_ *kgo.Record, dl *deadLetter) string { return dl.Key }),
		col("event_id", func(_ *kgo.Record, dl *deadLetter) string { return dl.EventID }),
		col("event_type", func(_ *kgo.Record, dl *deadLetter) string { return dl.EventType }),
		col("reason", func(_ *kgo.Record, dl *deadLetter) string { return dl.Reason }),
		col("detail", func(_ *kgo.Record, dl *deadLetter) string { return dl.Detail }),
		col("topic", func(_ *kgo.Record, dl *deadLetter) string { return dl.Topic }),
		col("partition", func(_ *kgo.Record, dl *deadLetter) int32 { return dl.Partition }),
		col("offset", func(_ *kgo.Record, dl *deadLetter) int64 { return dl.Offset }),
		col("dead_at_ms", func(_ *kgo.Record, dl *deadLetter) int64 { return dl.AtMs }),
		col("dead_at", func(_ *kgo.Record, dl *deadLetter) int64 { return seconds(dl.AtMs) }),
		topicCol[deadLetter]("source_topic"), partitionCol[deadLetter]("source_partition"), offsetCol[deadLetter]("source_offset"),
		col("payload", func(_ *kgo.Record, dl *deadLetter) string { return string(dl.Payload) }),
	)
}

func newOrphansBlock() *tableBlock[deadLetter] {
	return newTableBlock("orphans",
		col("stream", func(_ *kgo.Record, dl *deadLetter) string { return dl.Stream }),
		// The missing parent's id.
		col("entity_key", func(_ *kgo.Record, dl *deadLetter) string { return dl.Key }),
		col("event_id", func(_ *kgo.Record, dl *deadLetter) string { return dl.EventID }),
		col("event_type", func(_ *kgo.Record, dl *deadLetter) string { return dl.EventType }),
		col("received_at_ms", func(_ *kgo.Record, dl *deadLetter) int64 { return dl.ReceivedAtMs }),
		col("expired_at_ms", func(_ *kgo.Record, dl *deadLetter) int64 { return dl.AtMs }),
		col("expired_at", func(_ *kgo.Record, dl *deadLetter) int64 { return seconds(dl.AtMs) }),
		col("status", func(_ *kgo.Record, _ *deadLetter) string { return StatusPermanentlyOrphaned }),
		topicCol[deadLetter]("source_topic"), partitionCol[deadLetter]("source_partition"), offsetCol[deadLetter]("source_offset"),
		col("payload", func(_ *kgo.Record, dl *deadLetter) string { return string(dl.Payload) }),
	)
}

// decode reads a record's JSON value, naming the record when it cannot.
func decode[T any](kind string, r *kgo.Record) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(r.Value, v); err != nil {
		return nil, fmt.Errorf("%s record %s/%d/%d: %w", kind, r.Topic, r.Partition, r.Offset, err)
	}
	return v, nil
}
