package clickhouse

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unsafe"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// A column holds one column of a block being built, as the typed slice
// clickhouse-go appends in one call (column-wise, no per-row reflection).
type column interface {
	name() string
	// send appends rows [from, to) to the INSERT's column.
	send(bc driver.BatchColumn, from, to int) error
	// size is how many bytes rows [from, to) take.
	size(from, to int) int
	// keep drops the rows whose mask entry is false.
	keep(mask []bool)
	reset()
}

// values is a column of numbers: strings go to texts (see col), so no
// value holds memory that keep or reset would have to release.
type values[T any] struct {
	col string
	v   []T
}

func (c *values[T]) name() string { return c.col }
func (c *values[T]) add(x T)      { c.v = append(c.v, x) }
func (c *values[T]) send(bc driver.BatchColumn, from, to int) error {
	return bc.Append(c.v[from:to])
}

func (c *values[T]) size(from, to int) int {
	var zero T
	return (to - from) * int(unsafe.Sizeof(zero))
}

func (c *values[T]) keep(mask []bool) {
	n := 0
	for i, x := range c.v {
		if mask[i] {
			c.v[n] = x
			n++
		}
	}
	c.v = c.v[:n]
}

func (c *values[T]) reset() { c.v = c.v[:0] }

// texts is a String column as one buffer of its values' bytes and where
// each value ends. A value is copied in right after the scanner read it,
// while its record is still in the CPU's caches, and the column is sent in
// one sequential pass over the buffer, instead of gathering strings from
// tens of MiB of records once per column. The buffers are reused batch
// after batch and hold no pointers for the garbage collector to scan.
type texts struct {
	col  string
	buf  []byte
	ends []int
	// view holds the values as strings over buf while they are sent.
	view []string
}

func (c *texts) name() string { return c.col }

func (c *texts) add(s string) {
	c.buf = append(c.buf, s...)
	c.ends = append(c.ends, len(c.buf))
}

func (c *texts) value(i int) string {
	start := 0
	if i > 0 {
		start = c.ends[i-1]
	}
	return unsafe.String(unsafe.SliceData(c.buf[start:]), c.ends[i]-start)
}

func (c *texts) send(bc driver.BatchColumn, from, to int) error {
	c.view = c.view[:0]
	for i := from; i < to; i++ {
		c.view = append(c.view, c.value(i))
	}
	err := bc.Append(c.view)
	clear(c.view) // no strings over buf outlive the send
	return err
}

func (c *texts) size(from, to int) int {
	if to == from {
		return 0
	}
	start := 0
	if from > 0 {
		start = c.ends[from-1]
	}
	return c.ends[to-1] - start
}

func (c *texts) keep(mask []bool) {
	n, end := 0, 0
	for i := range c.ends {
		if mask[i] {
			v := c.value(i)
			end += copy(c.buf[end:], v) // never ahead of v: rows only drop
			c.ends[n] = end
			n++
		}
	}
	c.buf, c.ends = c.buf[:end], c.ends[:n]
}

func (c *texts) reset() {
	c.buf, c.ends = c.buf[:0], c.ends[:0]
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
	// key names the String columns that lead the table's ORDER BY: landed
	// finds the block's rows in the table by them and pos.
	key []string
	// pos are the columns of each row's source record, whose offsets the
	// positions track.
	pos position
	// prepared, when set, is the block's INSERT with every column
	// appended, built by prepare ahead of send.
	prepared driver.Batch
}

func newColumn[T any](b *block, name string) *values[T] {
	c := &values[T]{col: name}
	b.cols = append(b.cols, c)
	return c
}

func newTexts(b *block, name string) *texts {
	c := &texts{col: name}
	b.cols = append(b.cols, c)
	return c
}

// position is the columns of a row's source topic, partition and offset,
// among a block's columns.
type position struct {
	topic     *texts
	partition *values[int32]
	offset    *values[int64]
}

func (b *block) rows() int { return len(b.pos.offset.v) }

// source is where row i was read; its topic is a view of the column, to
// be copied if kept past the block's next change.
func (b *block) source(i int) source {
	return source{b.pos.topic.value(i), b.pos.partition.v[i], b.pos.offset.v[i]}
}

func (b *block) insertQuery(database string) string {
	names := make([]string, len(b.cols))
	for i, c := range b.cols {
		names[i] = "`" + c.name() + "`"
	}
	return "INSERT INTO " + database + "." + b.table + " (" + strings.Join(names, ", ") + ")"
}

// prepare opens the block's INSERT and streams its rows to the server in
// small Data packets, all but the end of the data, which send adds: the
// writer does it for the next batch while the batch before is being
// written, so the copying and sending overlap the server's work on that
// one. clickhouse-go reuses its column buffers from packet to packet
// instead of growing them anew to the whole block for each INSERT, and the
// server squashes the packets of one INSERT into one block (see oneBlock),
// as it does those of clickhouse-client. On failure nothing is kept and
// send prepares again.
func (b *block) prepare(ctx context.Context, conn driver.Conn, database string) error {
	b.discard()
	batch, err := conn.PrepareBatch(ch.Context(ctx, ch.WithSettings(oneBlock)), b.insertQuery(database))
	if err != nil {
		return err
	}
	for from, to := 0, 0; from < b.rows(); from = to {
		to = b.chunkEnd(from)
		for i, c := range b.cols {
			if err := c.send(batch.Column(i), from, to); err != nil {
				batch.Abort()
				return fmt.Errorf("column %s: %w", c.name(), err)
			}
		}
		if err := batch.Flush(); err != nil {
			batch.Abort()
			return err
		}
	}
	b.prepared = batch
	return nil
}

// A Data packet of an INSERT has chunkRows rows, fewer when they take more
// than chunkBytes (DLQ payloads can be hundreds of KiB each). Small packets
// keep the driver's buffers small and warm.
const (
	chunkRows  = 1024
	chunkBytes = 1 << 20
)

// chunkEnd is where the Data packet that starts at row from ends.
func (b *block) chunkEnd(from int) int {
	to := min(from+chunkRows, b.rows())
	for to-from > 1 && b.size(from, to) > chunkBytes {
		to = from + (to-from)/2
	}
	return to
}

func (b *block) size(from, to int) int {
	n := 0
	for _, c := range b.cols {
		n += c.size(from, to)
	}
	return n
}

// text returns row i of the String column name, one of key.
func (b *block) text(name string, i int) string {
	for _, c := range b.cols {
		if t, ok := c.(interface{ value(int) string }); ok && c.name() == name {
			return t.value(i)
		}
	}
	panic("table " + b.table + " has no String column " + name)
}

// discard drops a prepared INSERT without writing its rows: its
// connection is reset (see Open), and the server drops an INSERT whose
// data did not end. Closing the batch instead would end the data.
func (b *block) discard() {
	if b.prepared != nil {
		b.prepared.Abort()
		b.prepared = nil
	}
}

// oneBlock makes the server squash all the Data packets of an INSERT into
// one block, whatever the user's profile says: a batch has at most
// MaxBatchRows rows, and with no byte threshold nothing else cuts it.
var oneBlock = ch.Settings{
	"min_insert_block_size_rows":  config.MaxBatchRows,
	"min_insert_block_size_bytes": 0,
}

// send ends the block's INSERT, prepared ahead or here, and waits for the
// server to have written it.
func (b *block) send(ctx context.Context, conn driver.Conn, database string) error {
	if b.prepared == nil {
		if err := b.prepare(ctx, conn, database); err != nil {
			return err
		}
	}
	batch := b.prepared
	b.prepared = nil
	return batch.Send()
}

// highest returns the highest offset per source partition in the block.
func (b *block) highest() map[heldKey]int64 {
	out := map[heldKey]int64{}
	// Rows come in runs of one partition, in offset order: one map write
	// per run.
	for i := 0; i < b.rows(); {
		run := b.source(i)
		last := run.offset
		for ; i < b.rows() && b.pos.partition.v[i] == run.partition && b.pos.topic.value(i) == run.topic; i++ {
			last = b.pos.offset.v[i]
		}
		k := heldKey{b.table, run.topic, run.partition}
		if o, ok := out[k]; !ok || last > o {
			out[k] = last
		}
	}
	return out
}

// keepAfter drops the rows at or below held(source), those a table already
// holds.
func (b *block) keepAfter(held func(heldKey) int64) (dropped int) {
	mask := make([]bool, b.rows())
	for i := range mask {
		s := b.source(i)
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
	return dropped
}

func (b *block) reset() {
	b.discard()
	for _, c := range b.cols {
		c.reset()
	}
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

type textsOf[R any] struct {
	texts
	get func(*kgo.Record, *R) string
}

func (c *textsOf[R]) add(r *kgo.Record, row *R) { c.texts.add(c.get(r, row)) }

// col is a column named as in the table, with how to get its value.
func col[R, T any](name string, get func(r *kgo.Record, row *R) T) rowColumn[R] {
	if get, ok := any(get).(func(*kgo.Record, *R) string); ok {
		return &textsOf[R]{texts: texts{col: name}, get: get}
	}
	return &valuesOf[R, T]{values: values[T]{col: name}, get: get}
}

// tableBlock is the block of a table whose rows come from records decoded
// as R.
type tableBlock[R any] struct {
	block
	rowCols []rowColumn[R]
	topicID *texts
}

// newTableBlock makes the block of cols, followed by the source record's
// topic, partition, offset and topic id under the table's names for them,
// at.
func newTableBlock[R any](table string, key []string, at [4]string, cols ...rowColumn[R]) *tableBlock[R] {
	topic := &textsOf[R]{texts{col: at[0]}, func(r *kgo.Record, _ *R) string { return r.Topic }}
	partition := &valuesOf[R, int32]{values[int32]{col: at[1]}, func(r *kgo.Record, _ *R) int32 { return r.Partition }}
	offset := &valuesOf[R, int64]{values[int64]{col: at[2]}, func(r *kgo.Record, _ *R) int64 { return r.Offset }}
	cols = append(cols, topic, partition, offset)
	b := &tableBlock[R]{block: block{table: table, key: key, pos: position{&topic.texts, &partition.values, &offset.values}}, rowCols: cols}
	for _, c := range cols {
		b.cols = append(b.cols, c)
	}
	b.topicID = newTexts(&b.block, at[3])
	return b
}

// add adds the row of r, read from the topic of id topicID.
func (b *tableBlock[R]) add(r *kgo.Record, row *R, topicID string) {
	for _, c := range b.rowCols {
		c.add(r, row)
	}
	b.topicID.add(topicID)
}

type deadLetter = record.DeadLetter

// outcomeRow is a decoded outcome with its payload as the string the
// payload column takes, over the record value's bytes (record.DecodeOutcome).
type outcomeRow struct {
	record.Outcome
	payload string
}

// stateRow is a decoded state with its state as the string the state
// column takes, over the record value's bytes (record.DecodeState).
type stateRow struct {
	record.State
	state string
}

// eventsBlock is the block of events, filled field by field: outcomes are
// most of what the sink writes, and calling a getter per column cost more
// than copying the values.
type eventsBlock struct {
	block
	stream, key, eventID, eventType, outcome, reason, topic, payload     *texts
	decisionID, topicID, action, requestedBy                             *texts
	version, gap, bufferDepth, occurredAtMs, receivedAtMs, processedAtMs *values[int64]
	processedAt, offset, inputOffset                                     *values[int64]
	partition, inputPartition                                            *values[int32]
}

func newEventsBlock() *eventsBlock {
	b := &eventsBlock{block: block{table: "events", key: []string{"stream", "entity_key"}}}
	b.stream, b.key, b.eventID = newTexts(&b.block, "stream"), newTexts(&b.block, "entity_key"), newTexts(&b.block, "event_id")
	b.eventType = newTexts(&b.block, "event_type")
	b.version = newColumn[int64](&b.block, "version")
	b.outcome, b.reason = newTexts(&b.block, "outcome"), newTexts(&b.block, "reason")
	b.gap, b.bufferDepth = newColumn[int64](&b.block, "gap"), newColumn[int64](&b.block, "buffer_depth")
	b.occurredAtMs, b.receivedAtMs = newColumn[int64](&b.block, "occurred_at_ms"), newColumn[int64](&b.block, "received_at_ms")
	b.processedAtMs, b.processedAt = newColumn[int64](&b.block, "processed_at_ms"), newColumn[int64](&b.block, "processed_at")
	b.topic, b.partition, b.offset = newTexts(&b.block, "topic"), newColumn[int32](&b.block, "partition"), newColumn[int64](&b.block, "offset")
	b.inputPartition, b.inputOffset = newColumn[int32](&b.block, "input_partition"), newColumn[int64](&b.block, "input_offset")
	b.payload = newTexts(&b.block, "payload")
	b.decisionID, b.topicID = newTexts(&b.block, "decision_id"), newTexts(&b.block, "topic_id")
	b.action, b.requestedBy = newTexts(&b.block, "action"), newTexts(&b.block, "requested_by")
	b.pos = position{b.topic, b.partition, b.offset}
	return b
}

// add adds the row of r, read from the topic of id topicID.
func (b *eventsBlock) add(r *kgo.Record, o *outcomeRow, topicID string) {
	b.stream.add(o.Stream)
	b.key.add(o.Key)
	b.eventID.add(o.EventID)
	b.eventType.add(o.EventType)
	b.version.add(o.Version)
	b.outcome.add(string(o.Outcome.Outcome))
	b.reason.add(string(o.Reason))
	b.gap.add(o.Gap)
	b.bufferDepth.add(int64(o.BufferDepth))
	b.occurredAtMs.add(o.OccurredAtMs)
	b.receivedAtMs.add(o.ReceivedAtMs)
	b.processedAtMs.add(o.ProcessedAtMs)
	b.processedAt.add(seconds(o.ProcessedAtMs))
	b.topic.add(r.Topic)
	b.partition.add(r.Partition)
	b.offset.add(r.Offset)
	b.inputPartition.add(o.InputPartition)
	b.inputOffset.add(o.InputOffset)
	b.payload.add(o.payload)
	b.decisionID.add(o.DecisionID)
	b.topicID.add(topicID)
	b.action.add(string(o.Action))
	b.requestedBy.add(o.RequestedBy)
}

func newStateBlock() *tableBlock[stateRow] {
	return newTableBlock("entity_state", []string{"stream", "entity_key"}, sourceColumns,
		col("stream", func(_ *kgo.Record, st *stateRow) string { return st.Stream }),
		col("entity_key", func(_ *kgo.Record, st *stateRow) string { return st.Key }),
		col("version", func(_ *kgo.Record, st *stateRow) uint64 { return uint64(max(st.Version, 0)) }),
		col("state", func(_ *kgo.Record, st *stateRow) string { return st.state }),
		col("updated_at_ms", func(_ *kgo.Record, st *stateRow) int64 { return st.UpdatedAtMs }),
		col("expires_at_ms", func(_ *kgo.Record, st *stateRow) int64 { return st.ExpiresAtMs }),
		col("updated_at", func(_ *kgo.Record, st *stateRow) int64 { return seconds(st.UpdatedAtMs) }),
	)
}

// The columns of a row's source record: in entity_state; and in dlq and
// orphans, whose topic/partition/offset name the original event.
var (
	sourceColumns    = [4]string{"topic", "partition", "offset", "topic_id"}
	dlqSourceColumns = [4]string{"source_topic", "source_partition", "source_offset", "source_topic_id"}
)

// In dlq, topic/partition/offset locate the original record in
// <stream>.in; source_* locate the DLQ record the sink read.
func newDLQBlock() *tableBlock[deadLetter] {
	return newTableBlock("dlq", []string{"stream", "reason"}, dlqSourceColumns,
		col("stream", func(_ *kgo.Record, dl *deadLetter) string { return dl.Stream }),
		col("entity_key", func(_ *kgo.Record, dl *deadLetter) string { return dl.Key }),
		col("event_id", func(_ *kgo.Record, dl *deadLetter) string { return dl.EventID }),
		col("event_type", func(_ *kgo.Record, dl *deadLetter) string { return dl.EventType }),
		col("reason", func(_ *kgo.Record, dl *deadLetter) string { return string(dl.Reason) }),
		col("detail", func(_ *kgo.Record, dl *deadLetter) string { return dl.Detail }),
		col("topic", func(_ *kgo.Record, dl *deadLetter) string { return dl.Topic }),
		col("partition", func(_ *kgo.Record, dl *deadLetter) int32 { return dl.Partition }),
		col("offset", func(_ *kgo.Record, dl *deadLetter) int64 { return dl.Offset }),
		col("dead_at_ms", func(_ *kgo.Record, dl *deadLetter) int64 { return dl.AtMs }),
		col("dead_at", func(_ *kgo.Record, dl *deadLetter) int64 { return seconds(dl.AtMs) }),
		col("payload", func(_ *kgo.Record, dl *deadLetter) string { return string(dl.Payload) }),
	)
}

func newOrphansBlock() *tableBlock[deadLetter] {
	return newTableBlock("orphans", []string{"stream", "entity_key"}, dlqSourceColumns,
		col("stream", func(_ *kgo.Record, dl *deadLetter) string { return dl.Stream }),
		// The missing parent's id.
		col("entity_key", func(_ *kgo.Record, dl *deadLetter) string { return dl.Key }),
		col("event_id", func(_ *kgo.Record, dl *deadLetter) string { return dl.EventID }),
		col("event_type", func(_ *kgo.Record, dl *deadLetter) string { return dl.EventType }),
		col("received_at_ms", func(_ *kgo.Record, dl *deadLetter) int64 { return dl.ReceivedAtMs }),
		col("expired_at_ms", func(_ *kgo.Record, dl *deadLetter) int64 { return dl.AtMs }),
		col("expired_at", func(_ *kgo.Record, dl *deadLetter) int64 { return seconds(dl.AtMs) }),
		col("status", func(_ *kgo.Record, _ *deadLetter) string { return StatusPermanentlyOrphaned }),
		col("payload", func(_ *kgo.Record, dl *deadLetter) string { return string(dl.Payload) }),
	)
}

// decode reads a record's JSON value, naming the record when it cannot.
func decode[T any](kind string, r *kgo.Record) (*T, error) {
	v := new(T)
	if err := json.Unmarshal(r.Value, v); err != nil {
		return nil, recordError(kind, r, err)
	}
	return v, nil
}

// recordError names the record of kind that could not be decoded.
func recordError(kind string, r *kgo.Record, err error) error {
	return fmt.Errorf("%s record %s/%d/%d: %w", kind, r.Topic, r.Partition, r.Offset, err)
}
