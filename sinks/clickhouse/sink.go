package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/topics"
)

// ConsumerGroup is the Kafka consumer group of the ClickHouse sink.
const ConsumerGroup = "driftguard-sink-clickhouse"

// maxBackoff caps the wait between inserts while ClickHouse is down.
const maxBackoff = 30 * time.Second

// Sink consumes the outcomes, state and DLQ topics of every stream and
// inserts them into ClickHouse.
type Sink struct {
	cfg     *config.Config
	brokers []string
	conn    driver.Conn
	log     *slog.Logger
	ops     *telemetry.Ops
	rows    *prometheus.CounterVec
	// targets maps a topic to the tables its records feed.
	targets map[string][]*target
	// held is the highest offset per table and source partition already in
	// ClickHouse, read from it the first time a partition is seen.
	heldMu sync.Mutex
	held   map[heldKey]int64
	// failing is set while inserts fail; /readyz reports it.
	failing atomic.Bool
}

type heldKey struct {
	table     string
	topic     string
	partition int32
}

// A target is one table fed by one kind of topic.
type target struct {
	table   string
	columns string
	// source names the columns that hold the source topic, partition and
	// offset of each row: the sink resumes from their maximum.
	source [3]string
	// add appends the record's row, or returns errNotForTable.
	add func(driver.Batch, *kgo.Record) error
}

var (
	eventsTarget = &target{table: "events", columns: eventColumns, source: plainSource, add: appendEvent}
	stateTarget  = &target{table: "entity_state", columns: stateColumns, source: plainSource, add: appendState}
	dlqTarget    = &target{table: "dlq", columns: dlqColumns, source: dlqSource, add: appendDeadLetter}
	orphanTarget = &target{table: "orphans", columns: orphanColumns, source: dlqSource, add: appendOrphan}
)

var (
	plainSource = [3]string{"`topic`", "`partition`", "`offset`"}
	dlqSource   = [3]string{"source_topic", "source_partition", "source_offset"}
)

// errNotForTable marks a record a table does not take (a DLQ record that
// is not an orphan, for the orphans table).
var errNotForTable = errors.New("not for this table")

// New builds the sink. conn must reach a migrated database; ops may be nil.
func New(cfg *config.Config, brokers []string, conn driver.Conn, log *slog.Logger, ops *telemetry.Ops) *Sink {
	s := &Sink{cfg: cfg, brokers: brokers, conn: conn, log: log, ops: ops, targets: map[string][]*target{}, held: map[heldKey]int64{}}
	s.rows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "driftguard_sink_rows_total",
		Help: "Rows inserted into ClickHouse by table.",
	}, []string{"table"})
	if ops != nil {
		ops.Registry.MustRegister(s.rows)
	}
	for _, name := range cfg.StreamNames() {
		n := topics.For(name)
		s.targets[n.Outcomes] = []*target{eventsTarget}
		s.targets[n.State] = []*target{stateTarget}
		s.targets[n.DLQ] = []*target{dlqTarget, orphanTarget}
	}
	return s
}

// Name implements service.Service.
func (s *Sink) Name() string { return "sink" }

// Run consumes until ctx is done. Offsets are committed only after the rows
// of a poll are inserted, so a crash never loses a row; and a poll inserted
// but not committed before a crash is not inserted again, because Insert
// skips offsets at or below the highest one ClickHouse already holds for
// that partition.
func (s *Sink) Run(ctx context.Context) error {
	names := make([]string, 0, len(s.targets))
	for topic := range s.targets {
		names = append(names, topic)
	}
	cl, err := kafka.NewClient(s.brokers,
		kgo.ConsumerGroup(ConsumerGroup),
		kgo.ConsumeTopics(names...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		// No partition moves while a polled batch is being inserted.
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(s.cfg.ClickHouse.BatchPeriod),
		// Another replica may have inserted a partition's rows while it was
		// away: read its watermark again when it comes back.
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { s.forget(lost) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { s.forget(lost) }),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	// Close leaves the group, which waits for a rebalance a poll may block.
	defer cl.AllowRebalance()
	if s.ops != nil {
		s.ops.AddReadiness("clickhouse", func(ctx context.Context) error {
			if s.failing.Load() {
				return errors.New("inserts are failing; consuming paused until they succeed")
			}
			return s.conn.Ping(ctx)
		})
		s.ops.AddReadiness("kafka", cl.Ping)
	}
	s.log.Info("clickhouse sink starting", "database", s.cfg.ClickHouse.Database, "topics", len(names))
	for {
		fetches := cl.PollRecords(ctx, s.cfg.ClickHouse.BatchRows)
		if ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		})
		records := fetches.Records()
		if len(records) > 0 {
			if err := s.insertWithRetry(ctx, records); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if err := cl.CommitRecords(ctx, records...); err != nil && ctx.Err() == nil {
				s.log.Warn("offset commit failed; the batch may be inserted again", "err", err)
			}
		}
		cl.AllowRebalance()
	}
}

// insertWithRetry inserts the poll until it succeeds or ctx ends. While
// ClickHouse is down the sink polls nothing more (back-pressure), reports
// not ready, and keeps the batch; what part of it landed is skipped on the
// next try, so nothing is lost or doubled when ClickHouse returns.
func (s *Sink) insertWithRetry(ctx context.Context, records []*kgo.Record) error {
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := s.Insert(ctx, records)
		if err == nil {
			if s.failing.Swap(false) {
				s.log.Info("clickhouse inserts succeed again", "attempts", attempt)
			}
			return nil
		}
		s.failing.Store(true)
		s.log.Warn("clickhouse insert failed; retrying", "attempt", attempt, "records", len(records), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Insert writes the records' rows, one batch per table, skipping what a
// table already holds.
func (s *Sink) Insert(ctx context.Context, records []*kgo.Record) error {
	byTarget := map[*target][]*kgo.Record{}
	var order []*target
	for _, r := range records {
		targets, ok := s.targets[r.Topic]
		if !ok {
			s.log.Warn("record from an unexpected topic skipped", "topic", r.Topic)
			continue
		}
		for _, t := range targets {
			held, err := s.heldOffset(ctx, t, r.Topic, r.Partition)
			if err != nil {
				return err
			}
			if r.Offset <= held {
				continue // inserted before a crash, never committed
			}
			if _, seen := byTarget[t]; !seen {
				order = append(order, t)
			}
			byTarget[t] = append(byTarget[t], r)
		}
	}
	for _, t := range order {
		if err := s.insertBatch(ctx, t, byTarget[t]); err != nil {
			return err
		}
		s.heldMu.Lock()
		for _, r := range byTarget[t] {
			k := heldKey{t.table, r.Topic, r.Partition}
			s.held[k] = max(s.held[k], r.Offset)
		}
		s.heldMu.Unlock()
	}
	return nil
}

// heldOffset returns the highest offset of the partition that the table
// holds, or -1.
func (s *Sink) heldOffset(ctx context.Context, t *target, topic string, partition int32) (int64, error) {
	k := heldKey{t.table, topic, partition}
	s.heldMu.Lock()
	held, ok := s.held[k]
	s.heldMu.Unlock()
	if ok {
		return held, nil
	}
	var maxOffset int64
	var rows uint64
	err := s.conn.QueryRow(ctx, fmt.Sprintf("SELECT max(%s), count() FROM %s.%s WHERE %s = ? AND %s = ?",
		t.source[2], s.cfg.ClickHouse.Database, t.table, t.source[0], t.source[1]), topic, partition).Scan(&maxOffset, &rows)
	if err != nil {
		return 0, fmt.Errorf("%s: reading what is held of %s/%d: %w", t.table, topic, partition, err)
	}
	if rows == 0 {
		maxOffset = -1
	}
	s.heldMu.Lock()
	s.held[k] = maxOffset
	s.heldMu.Unlock()
	return maxOffset, nil
}

func (s *Sink) forget(partitions map[string][]int32) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for k := range s.held {
		if slices.Contains(partitions[k.topic], k.partition) {
			delete(s.held, k)
		}
	}
}

const eventColumns = "(stream, entity_key, event_id, event_type, version, outcome, reason, gap, buffer_depth, " +
	"occurred_at_ms, received_at_ms, processed_at_ms, processed_at, `topic`, `partition`, `offset`, " +
	"input_partition, input_offset, payload)"

const stateColumns = "(stream, entity_key, version, state, updated_at_ms, expires_at_ms, updated_at, `topic`, `partition`, `offset`)"

func appendEvent(b driver.Batch, r *kgo.Record) error {
	var o envelope.Outcome
	if err := json.Unmarshal(r.Value, &o); err != nil {
		return fmt.Errorf("outcome record %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return b.Append(o.Stream, o.Key, o.EventID, o.EventType, o.Version, o.Outcome, o.Reason, o.Gap, int64(o.BufferDepth),
		o.OccurredAtMs, o.ReceivedAtMs, o.ProcessedAtMs, time.UnixMilli(o.ProcessedAtMs),
		r.Topic, r.Partition, r.Offset, o.InputPartition, o.InputOffset, string(o.Payload))
}

func appendState(b driver.Batch, r *kgo.Record) error {
	var st envelope.State
	if err := json.Unmarshal(r.Value, &st); err != nil {
		return fmt.Errorf("state record %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return b.Append(st.Stream, st.Key, uint64(max(st.Version, 0)), string(st.State), st.UpdatedAtMs, st.ExpiresAtMs,
		time.UnixMilli(st.UpdatedAtMs), r.Topic, r.Partition, r.Offset)
}

// StatusPermanentlyOrphaned is the status of every orphans row.
const StatusPermanentlyOrphaned = "PERMANENTLY_ORPHANED"

// reasonOrphanTTL is the DLQ reason of an expired child (the processors'
// ReasonOrphanTTL; the packages meet only in Kafka).
const reasonOrphanTTL = "orphan_ttl"

const dlqColumns = "(stream, entity_key, event_id, event_type, reason, detail, `topic`, `partition`, `offset`, " +
	"dead_at_ms, dead_at, source_topic, source_partition, source_offset, payload)"

const orphanColumns = "(stream, entity_key, event_id, event_type, received_at_ms, expired_at_ms, expired_at, status, " +
	"source_topic, source_partition, source_offset, payload)"

func decodeDeadLetter(r *kgo.Record) (envelope.DeadLetter, error) {
	var dl envelope.DeadLetter
	if err := json.Unmarshal(r.Value, &dl); err != nil {
		return dl, fmt.Errorf("DLQ record %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return dl, nil
}

func appendDeadLetter(b driver.Batch, r *kgo.Record) error {
	dl, err := decodeDeadLetter(r)
	if err != nil {
		return err
	}
	return b.Append(dl.Stream, dl.Key, dl.EventID, dl.EventType, dl.Reason, dl.Detail, dl.Topic, dl.Partition, dl.Offset,
		dl.AtMs, time.UnixMilli(dl.AtMs), r.Topic, r.Partition, r.Offset, string(dl.Payload))
}

func appendOrphan(b driver.Batch, r *kgo.Record) error {
	dl, err := decodeDeadLetter(r)
	if err != nil {
		return err
	}
	if dl.Reason != reasonOrphanTTL {
		return errNotForTable
	}
	return b.Append(dl.Stream, dl.Key, dl.EventID, dl.EventType, dl.ReceivedAtMs, dl.AtMs, time.UnixMilli(dl.AtMs),
		StatusPermanentlyOrphaned, r.Topic, r.Partition, r.Offset, string(dl.Payload))
}

func (s *Sink) insertBatch(ctx context.Context, t *target, records []*kgo.Record) error {
	table := t.table
	batch, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.cfg.ClickHouse.Database+"."+table+" "+t.columns)
	if err != nil {
		return fmt.Errorf("%s: %w", table, err)
	}
	defer batch.Close()
	rows := 0
	for _, r := range records {
		if err := t.add(batch, r); err != nil {
			if errors.Is(err, errNotForTable) {
				continue
			}
			// A record that can never be decoded is left out rather than
			// blocking its partition forever.
			s.log.Error("record cannot be inserted; skipped", "table", table, "err", err)
			continue
		}
		rows++
	}
	if rows == 0 {
		return nil
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("%s: %w", table, err)
	}
	s.rows.WithLabelValues(table).Add(float64(rows))
	return nil
}
