package clickhouse

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
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

// insertAttempts bounds the retries of one batch before the sink gives up
// and exits; its offsets stay uncommitted, so a restart inserts it again.
const insertAttempts = 5

// Sink consumes the outcomes and state topics of every stream and inserts
// them into ClickHouse.
type Sink struct {
	cfg     *config.Config
	brokers []string
	conn    driver.Conn
	log     *slog.Logger
	ops     *telemetry.Ops
	rows    *prometheus.CounterVec
	// kinds maps a topic to what it carries.
	kinds map[string]topicKind
	// held is the highest offset per source partition already in
	// ClickHouse, read from it the first time a partition is seen.
	heldMu sync.Mutex
	held   map[sourcePartition]int64
}

type sourcePartition struct {
	topic     string
	partition int32
}

type topicKind struct {
	stream string
	state  bool // <stream>.state; otherwise <stream>.outcomes
}

// New builds the sink. conn must reach a migrated database; ops may be nil.
func New(cfg *config.Config, brokers []string, conn driver.Conn, log *slog.Logger, ops *telemetry.Ops) *Sink {
	s := &Sink{cfg: cfg, brokers: brokers, conn: conn, log: log, ops: ops, kinds: map[string]topicKind{}, held: map[sourcePartition]int64{}}
	s.rows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "driftguard_sink_rows_total",
		Help: "Rows inserted into ClickHouse by table.",
	}, []string{"table"})
	if ops != nil {
		ops.Registry.MustRegister(s.rows)
	}
	for _, name := range cfg.StreamNames() {
		n := topics.For(name)
		s.kinds[n.Outcomes] = topicKind{stream: name}
		s.kinds[n.State] = topicKind{stream: name, state: true}
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
	names := make([]string, 0, len(s.kinds))
	for topic := range s.kinds {
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
		s.ops.AddReadiness("clickhouse", s.conn.Ping)
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

func (s *Sink) insertWithRetry(ctx context.Context, records []*kgo.Record) error {
	backoff := 250 * time.Millisecond
	var err error
	for attempt := 1; attempt <= insertAttempts; attempt++ {
		if err = s.Insert(ctx, records); err == nil {
			return nil
		}
		s.log.Warn("clickhouse insert failed", "attempt", attempt, "rows", len(records), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	return fmt.Errorf("clickhouse insert failed %d times: %w", insertAttempts, err)
}

// Insert writes the records' rows, one batch per table.
func (s *Sink) Insert(ctx context.Context, records []*kgo.Record) error {
	db := s.cfg.ClickHouse.Database
	var events, states []*kgo.Record
	for _, r := range records {
		kind, ok := s.kinds[r.Topic]
		if ok {
			held, err := s.heldOffset(ctx, kind, r.Topic, r.Partition)
			if err != nil {
				return err
			}
			if r.Offset <= held {
				continue // inserted before a crash, never committed
			}
		}
		switch {
		case !ok:
			s.log.Warn("record from an unexpected topic skipped", "topic", r.Topic)
		case kind.state:
			states = append(states, r)
		default:
			events = append(events, r)
		}
	}
	if len(events) > 0 {
		if err := s.insertBatch(ctx, "events", "INSERT INTO "+db+".events "+eventColumns, events, appendEvent); err != nil {
			return err
		}
	}
	if len(states) > 0 {
		if err := s.insertBatch(ctx, "entity_state", "INSERT INTO "+db+".entity_state "+stateColumns, states, appendState); err != nil {
			return err
		}
	}
	s.heldMu.Lock()
	for _, r := range append(events, states...) {
		sp := sourcePartition{r.Topic, r.Partition}
		if r.Offset > s.held[sp] {
			s.held[sp] = r.Offset
		}
	}
	s.heldMu.Unlock()
	return nil
}

// heldOffset returns the highest offset of the partition that ClickHouse
// holds, or -1.
func (s *Sink) heldOffset(ctx context.Context, kind topicKind, topic string, partition int32) (int64, error) {
	sp := sourcePartition{topic, partition}
	s.heldMu.Lock()
	held, ok := s.held[sp]
	s.heldMu.Unlock()
	if ok {
		return held, nil
	}
	table := "events"
	if kind.state {
		table = "entity_state"
	}
	var maxOffset int64
	var rows uint64
	err := s.conn.QueryRow(ctx, "SELECT max(`offset`), count() FROM "+s.cfg.ClickHouse.Database+"."+table+
		" WHERE `topic` = ? AND `partition` = ?", topic, partition).Scan(&maxOffset, &rows)
	if err != nil {
		return 0, fmt.Errorf("%s: reading what is held of %s/%d: %w", table, topic, partition, err)
	}
	if rows == 0 {
		maxOffset = -1
	}
	s.heldMu.Lock()
	s.held[sp] = maxOffset
	s.heldMu.Unlock()
	return maxOffset, nil
}

func (s *Sink) forget(partitions map[string][]int32) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for topic, ps := range partitions {
		for _, p := range ps {
			delete(s.held, sourcePartition{topic, p})
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

func (s *Sink) insertBatch(ctx context.Context, table, query string, records []*kgo.Record, add func(driver.Batch, *kgo.Record) error) error {
	batch, err := s.conn.PrepareBatch(ctx, query)
	if err != nil {
		return fmt.Errorf("%s: %w", table, err)
	}
	defer batch.Close()
	rows := 0
	for _, r := range records {
		if err := add(batch, r); err != nil {
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
