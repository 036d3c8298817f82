package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/telemetry"
)

// maxBackoff caps the wait between tries while ClickHouse is down: a
// try costs one refused connection, and the sink resumes within 5 s of
// ClickHouse coming back.
const maxBackoff = 5 * time.Second

// Sink consumes the outcomes, state and DLQ topics of every stream and
// inserts them into ClickHouse.
type Sink struct {
	cfg *config.Config
	// kc and kcErr are the Kafka connection of kafka.tls and kafka.sasl,
	// or why it could not be made (returned by Run).
	kc      kafka.Conn
	kcErr   error
	conn    driver.Conn
	log     *slog.Logger
	ops     *telemetry.Ops
	metrics *metrics
	// kinds maps each topic the sink reads to what its records are, and
	// streams to its stream.
	kinds   map[string]topicKind
	streams map[string]string
	// held is the highest offset per table and source partition already in
	// ClickHouse, read from sink_positions for a whole topic the first time
	// one of its partitions is seen (loaded records which topics were read).
	heldMu sync.Mutex
	held   map[heldKey]int64
	loaded map[string]bool
	// ids is the Kafka id of each topic as the consumer reads it, from its
	// fetches; the positions in held are those of that id (see load).
	ids map[string]string
	// failing is set while inserts fail; /readyz reports it.
	failing atomic.Bool
}

type heldKey struct {
	table     string
	topic     string
	partition int32
}

type topicKind int

const (
	outcomesTopic topicKind = iota + 1
	stateTopic
	dlqTopic
	replayTopic
)

// tablesOf names the two tables each kind of topic feeds: a record that
// cannot be decoded goes to dlq (reason sink_undecodable), whatever its
// topic.
var tablesOf = map[topicKind][2]string{
	outcomesTopic: {"events", "dlq"},
	stateTopic:    {"entity_state", "dlq"},
	dlqTopic:      {"dlq", "orphans"},
	replayTopic:   {"replay_requests", "dlq"},
}

// Options configure the sink. Zero values mean defaults.
type Options struct {
	// Config is the loaded configuration; required.
	Config *config.Config
	// Conn reaches a migrated database (Open, Migrate); required.
	Conn driver.Conn
	// Brokers default to the configured ones.
	Brokers []string
	// Logger; nil discards.
	Logger *slog.Logger
	// Ops receives the metrics and the readiness checks; nil skips them.
	Ops *telemetry.Ops
}

// New builds the sink.
func New(opts Options) *Sink {
	s := &Sink{cfg: opts.Config, conn: opts.Conn, log: telemetry.OrDiscard(opts.Logger), ops: opts.Ops, kinds: map[string]topicKind{}, streams: map[string]string{},
		held: map[heldKey]int64{}, loaded: map[string]bool{}, ids: map[string]string{}, metrics: newMetrics(opts.Ops)}
	s.kc, s.kcErr = kafka.Connect(opts.Config, opts.Brokers)
	for _, name := range s.cfg.StreamNames() {
		n := s.cfg.Kafka.Naming().For(name)
		s.kinds[n.Outcomes] = outcomesTopic
		s.kinds[n.State] = stateTopic
		s.kinds[n.DLQ] = dlqTopic
		for _, topic := range []string{n.Outcomes, n.State, n.DLQ} {
			s.streams[topic] = name
			s.metrics.recreated.WithLabelValues(topic)
		}
		// The replay requests of gapless streams and the relay's record
		// of each (replay_requests).
		if s.cfg.Streams[name].Policy == config.PolicyGapless {
			s.kinds[n.Replay] = replayTopic
			s.streams[n.Replay] = name
			s.metrics.recreated.WithLabelValues(n.Replay)
		}
	}
	return s
}

// Name implements service.Service.
func (s *Sink) Name() string { return "sink" }

// ClientOptions are the franz-go options of the sink's consumer:
// internal/kafka's, the sink's group, read_committed, offsets committed by
// the sink after each insert, never on their own.
func (s *Sink) ClientOptions() []kgo.Opt {
	names := make([]string, 0, len(s.kinds))
	for topic := range s.kinds {
		names = append(names, topic)
	}
	ch := s.cfg.ClickHouse
	// No kgo.WithPools: record.DecodeOutcome reads strings over record values
	// until they are copied into the columns, which pooled buffers could
	// overwrite.
	return kafka.Options(s.kc, append([]kgo.Opt{
		kgo.ConsumerGroup(s.cfg.Kafka.Naming().ConsumerGroup(ch.ConsumerGroup)),
		kgo.SessionTimeout(ch.SessionTimeout),
		kgo.ConsumeTopics(names...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// The processors write transactionally: rows of an aborted
		// transaction were never decided, and must never be written.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		// No partition moves while a batch is being gathered or inserted.
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(min(ch.BatchPeriod, 5*time.Second)),
		kafka.FetchMinBytes(ch.FetchMinBytes),
		// What franz-go buffers ahead of the batch stays near one batch.
		kgo.FetchMaxBytes(int32(min(ch.BatchBytes, 1<<30))),
		// Another replica may have inserted a partition's rows while it was
		// away: read its position again when it comes back.
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { s.forget(lost) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { s.forget(lost) }),
	}, kafka.ClientMetrics(s.registry(), "sink")...)...)
}

// registry is where the sink's Kafka client reports; nil without Ops.
func (s *Sink) registry() prometheus.Registerer {
	if s.ops == nil {
		return nil
	}
	return s.ops.Registry
}

// Run consumes until ctx is done. It gathers polls into one batch until the
// batch has batch_rows records or batch_bytes of values, or batch_period
// has passed since its first record; then it inserts each table's block
// with one INSERT (in the background, while the next batch gathers) and
// commits the offsets. A crash never loses a row,
// because offsets are committed after the insert; and a batch inserted but
// not committed before a crash is not inserted again, because the sink
// skips offsets at or below what sink_positions says a table holds.
func (s *Sink) Run(ctx context.Context) error {
	if s.kcErr != nil {
		return s.kcErr
	}
	cl, err := kafka.New(s.ClientOptions())
	if err != nil {
		return err
	}
	defer cl.Close()
	// Close leaves the group, which waits for a rebalance a poll may block.
	defer cl.AllowRebalance()
	if err := s.kc.Check(ctx, cl, kafka.Needs(kafka.ComponentSink, s.cfg)); err != nil {
		return err
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() { defer close(watching); s.metrics.watchLag(watchCtx, kadm.NewClient(cl)) }()
	defer func() { stopWatching(); <-watching }()
	if r := s.cfg.ClickHouse.Retention; r.Every > 0 && r.Any() {
		retaining := make(chan struct{})
		go func() { defer close(retaining); retainEvery(watchCtx, s.conn, s.cfg.ClickHouse, s.log) }()
		defer func() { stopWatching(); <-retaining }()
	}
	ch := s.cfg.ClickHouse
	if s.ops != nil {
		s.ops.AddReadiness("clickhouse", func(ctx context.Context) error {
			if s.failing.Load() {
				return errors.New("inserts are failing; consuming paused until they succeed")
			}
			return s.conn.Ping(ctx)
		})
		s.ops.AddReadiness("kafka", cl.Ping)
	}
	s.log.Info("clickhouse sink starting", "database", ch.Database, "topics", len(s.kinds),
		"batch_rows", ch.BatchRows, "batch_bytes", ch.BatchBytes, "batch_period", ch.BatchPeriod)
	w := s.newWriter(func(records []*kgo.Record) {
		if err := cl.CommitRecords(ctx, records...); err != nil && ctx.Err() == nil {
			s.log.Warn("offset commit failed; the batch will be skipped by position when read again", "err", err)
		}
	})
	defer w.wait()
	for {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if w.cur.records > 0 || w.inflight != nil {
			// Back soon enough to flush on time and to commit the batch in
			// flight when it lands.
			deadline := time.Now().Add(50 * time.Millisecond)
			if w.cur.records > 0 && (w.inflight == nil || w.flushAt.Before(deadline)) {
				deadline = w.flushAt
			}
			pollCtx, cancel = context.WithDeadline(ctx, deadline)
		}
		fetches := cl.PollRecords(pollCtx, max(ch.BatchRows-w.cur.records, 1))
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		var gone []string
		fetches.EachError(func(topic string, p int32, err error) {
			switch {
			case errors.Is(err, kerr.UnknownTopicID):
				if !slices.Contains(gone, topic) {
					gone = append(gone, topic)
				}
			case !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
				s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachTopic(func(t kgo.FetchTopic) { s.observeTopicID(t.Topic, t.TopicID) })
		s.metrics.observeLag(fetches)
		if err := w.add(ctx, fetches.Records()); err != nil {
			return nil // ctx ended
		}
		if len(gone) > 0 {
			if err := s.readAgain(ctx, cl, w, gone); err != nil {
				return nil
			}
		}
		if err := w.settle(false); err != nil {
			return nil
		}
		if w.due() {
			if err := w.flush(ctx); err != nil {
				return nil
			}
		}
		if w.idle() {
			cl.AllowRebalance()
		}
	}
}

// untilDone runs op until it succeeds or ctx ends, backing off between
// tries. While ClickHouse is down the sink polls nothing more
// (back-pressure), reports not ready, and keeps its batch.
func (s *Sink) untilDone(ctx context.Context, what string, op func(retry bool) error) error {
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op(attempt > 1)
		if err == nil {
			if s.failing.Swap(false) {
				s.log.Info("clickhouse works again", "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.failing.Store(true)
		s.metrics.retries.Inc()
		s.log.Warn("clickhouse failed; retrying", "doing", what, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Insert writes the records' rows, one INSERT per table, skipping what a
// table already holds. Run does the same for each batch it gathers.
func (s *Sink) Insert(ctx context.Context, records []*kgo.Record) error {
	b := newBatch()
	if err := s.add(ctx, b, records); err != nil {
		return err
	}
	return s.flush(ctx, b, false)
}

// batch is the rows gathered for the next flush, one block per table.
type batch struct {
	events  *eventsBlock
	state   *tableBlock[stateRow]
	dlq     *tableBlock[deadLetter]
	orphans *tableBlock[deadLetter]
	replay  *tableBlock[replayRow]
	// records and bytes measure what was polled, for the flush thresholds.
	records, bytes int
	// last is the last record per partition, whose offset is committed.
	last map[heldKey]*kgo.Record
}

func newBatch() *batch {
	return &batch{events: newEventsBlock(), state: newStateBlock(), dlq: newDLQBlock(), orphans: newOrphansBlock(),
		replay: newReplayBlock(), last: map[heldKey]*kgo.Record{}}
}

func (b *batch) blocks() []*block {
	return []*block{&b.events.block, &b.state.block, &b.dlq.block, &b.orphans.block, &b.replay.block}
}

func (b *batch) lastRecords() []*kgo.Record {
	out := make([]*kgo.Record, 0, len(b.last))
	for _, r := range b.last {
		out = append(out, r)
	}
	return out
}

func (b *batch) reset() {
	for _, blk := range b.blocks() {
		blk.reset()
	}
	b.records, b.bytes = 0, 0
	clear(b.last)
}

// add decodes each record once into the blocks of its tables. It reads the
// positions it lacks first, so when that fails nothing was added and the
// call can be repeated.
func (s *Sink) add(ctx context.Context, b *batch, records []*kgo.Record) error {
	for i, r := range records {
		if i > 0 && r.Topic == records[i-1].Topic {
			continue
		}
		if err := s.load(ctx, r.Topic); err != nil {
			return err
		}
	}
	// A poll returns each partition's records together: positions are
	// looked up once per run of one partition.
	for len(records) > 0 {
		n := 1
		for n < len(records) && records[n].Topic == records[0].Topic && records[n].Partition == records[0].Partition {
			n++
		}
		s.addRun(b, records[:n])
		records = records[n:]
	}
	return nil
}

// addRun adds records of one partition, in offset order.
func (s *Sink) addRun(b *batch, run []*kgo.Record) {
	first, last := run[0], run[len(run)-1]
	b.last[heldKey{"", first.Topic, first.Partition}] = last
	kind := s.kinds[first.Topic]
	if kind == 0 {
		s.log.Warn("records from an unexpected topic skipped", "topic", first.Topic, "records", len(run))
		return
	}
	tables := tablesOf[kind]
	id := s.topicID(first.Topic)
	var held [2]int64
	for i, table := range tables {
		held[i] = s.heldOffset(heldKey{table, first.Topic, first.Partition})
	}
	var o outcomeRow
	var st stateRow
	for _, r := range run {
		b.records++
		b.bytes += len(r.Key) + len(r.Value)
		// Each record goes to one table (a DLQ record of an orphan to
		// two), which may hold it already: inserted before a crash, never
		// committed.
		if r.Offset <= held[0] && r.Offset <= held[1] {
			continue
		}
		var err error
		switch kind {
		case outcomesTopic:
			if o.payload, err = record.DecodeOutcome(r.Value, &o.Outcome); err != nil {
				err = recordError("outcome", r, err)
			} else if r.Offset > held[0] {
				b.events.add(r, &o, id)
			}
		case stateTopic:
			if record.IsViewMark(r.Key, r.Value) {
				// The processors' mark for goka's view: no entity.
				continue
			}
			if st.state, err = record.DecodeState(r.Value, &st.State); err != nil {
				err = recordError("state", r, err)
			} else if r.Offset > held[0] {
				b.state.add(r, &st, id)
			}
		case dlqTopic:
			var dl *deadLetter
			if dl, err = decode[deadLetter]("DLQ", r); err == nil {
				if r.Offset > held[0] {
					b.dlq.add(r, dl, id)
				}
				if r.Offset > held[1] && record.IsOrphanExpiry(dl.Reason) {
					b.orphans.add(r, dl, id)
				}
			}
		case replayTopic:
			var row *replayRow
			if row, err = decodeReplay(r); err == nil && r.Offset > held[0] {
				b.replay.add(r, row, id)
			}
		}
		if err != nil && r.Offset > held[slices.Index(tables[:], "dlq")] {
			// Kept, and seen, rather than blocking its partition forever or
			// vanishing.
			s.log.Error("record cannot be decoded; written to the dlq table", "reason", record.ReasonSinkUndecodable, "err", err)
			b.dlq.add(r, s.undecodable(r, err), id)
		}
	}
}

// undecodable is the dead letter of a record the sink cannot decode: the
// record itself, located where the sink read it, with the decode error.
func (s *Sink) undecodable(r *kgo.Record, err error) *deadLetter {
	return &deadLetter{Stream: s.streams[r.Topic], Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Key: string(r.Key), Reason: record.ReasonSinkUndecodable, Detail: err.Error(),
		AtMs: time.Now().UnixMilli(), Payload: r.Value}
}

// flush inserts each non-empty block with one INSERT and empties it, so a
// repeated flush after a failure sends only the blocks that did not land.
// On a retry the positions of a block's topics are read again first, and
// the table is asked for the block's last rows (see landed): an INSERT that
// failed on the client may have landed on the server.
func (s *Sink) flush(ctx context.Context, b *batch, retry bool) error {
	for _, blk := range b.blocks() {
		if blk.rows() == 0 {
			continue
		}
		if retry {
			blk.discard()
			if err := s.reload(ctx, blk); err != nil {
				return err
			}
			if err := s.landed(ctx, blk); err != nil {
				return err
			}
			if dropped := blk.keepAfter(s.heldOffset); dropped > 0 {
				s.log.Info("rows of a failed insert were in ClickHouse already; not sent again", "table", blk.table, "rows", dropped)
			}
			if blk.rows() == 0 {
				continue
			}
		}
		start := time.Now()
		if err := blk.send(ctx, s.conn, s.cfg.ClickHouse.Database); err != nil {
			return fmt.Errorf("%s: %w", blk.table, err)
		}
		s.metrics.inserted(blk.table, blk.rows(), time.Since(start))
		for k, offset := range blk.highest() {
			s.raise(k, offset)
		}
		blk.reset()
	}
	return nil
}

// prepare builds each non-empty block's INSERT ahead of flush. A block it
// cannot prepare (ClickHouse down, say) is prepared again by flush, which
// retries.
func (s *Sink) prepare(ctx context.Context, b *batch) {
	for _, blk := range b.blocks() {
		if blk.rows() > 0 {
			if err := blk.prepare(ctx, s.conn, s.cfg.ClickHouse.Database); err != nil {
				s.log.Debug("insert not prepared ahead; flush tries again", "table", blk.table, "err", err)
			}
		}
	}
}

func (s *Sink) heldOffset(k heldKey) int64 {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if held, ok := s.held[k]; ok {
		return held
	}
	return -1
}

// reload reads again the positions of every topic the block has rows of.
func (s *Sink) reload(ctx context.Context, blk *block) error {
	seen := map[string]bool{}
	for i := range blk.rows() {
		if topic := blk.pos.topic.value(i); !seen[topic] {
			topic = strings.Clone(topic) // kept in loaded; the column's buffer is reused
			seen[topic] = true
			s.heldMu.Lock()
			delete(s.loaded, topic)
			s.heldMu.Unlock()
			if err := s.load(ctx, topic); err != nil {
				return err
			}
		}
	}
	return nil
}

// load reads, unless known, the positions every table holds of every
// partition of a topic, in one query (a DLQ topic feeds two tables):
// sink_positions keeps a handful of rows per table and partition (one per
// unmerged part), so this is cheap however large the tables are.
//
// Positions are those of the topic's current id (see adopt): a topic
// deleted and created again starts its offsets at 0 under a new id, and
// the old id's positions would skip every new record.
func (s *Sink) load(ctx context.Context, topic string) error {
	s.heldMu.Lock()
	known, id := s.loaded[topic], s.ids[topic]
	s.heldMu.Unlock()
	if known {
		return nil
	}
	rows, err := s.conn.Query(ctx, "SELECT table_name, `partition`, topic_id, max(max_offset) FROM "+s.cfg.ClickHouse.Database+
		".sink_positions WHERE `topic` = ? GROUP BY table_name, `partition`, topic_id", topic)
	if err != nil {
		return fmt.Errorf("reading the positions of %s: %w", topic, err)
	}
	defer rows.Close()
	byID := map[string][]heldPosition{}
	for rows.Next() {
		var p heldPosition
		var of string
		if err := rows.Scan(&p.key.table, &p.key.partition, &of, &p.offset); err != nil {
			return err
		}
		p.key.topic = topic
		byID[of] = append(byID[of], p)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the positions of %s: %w", topic, err)
	}
	held, err := s.adopt(ctx, topic, id, byID)
	if err != nil {
		return err
	}
	for _, p := range held {
		s.raise(p.key, p.offset)
	}
	s.heldMu.Lock()
	s.loaded[topic] = true
	s.heldMu.Unlock()
	return nil
}

// heldPosition is a row of sink_positions.
type heldPosition struct {
	key    heldKey
	offset int64
}

// adopt chooses, of a topic's positions by topic id, those that apply to
// the topic read under id:
//   - id unknown (records not read by Run's consumer): all of them, the
//     highest of each;
//   - positions of id: those;
//   - none of id but some of another id: the topic was deleted and created
//     again. Said loudly and counted, and nothing is held: the new topic is
//     read from its start. A row of id (table ”, partition -1, offset -1)
//     records that this id was seen, so a restart does not count it again;
//   - none of any id, only of rows written before ids were kept (”): those
//     are taken as id's, and written under it, so that a later recreation
//     does not take them again.
func (s *Sink) adopt(ctx context.Context, topic, id string, byID map[string][]heldPosition) ([]heldPosition, error) {
	if id == "" {
		var all []heldPosition
		for _, ps := range byID {
			all = append(all, ps...)
		}
		return all, nil
	}
	if ps := byID[id]; len(ps) > 0 {
		return ps, nil
	}
	var old []string
	for other := range byID {
		if other != "" {
			old = append(old, other)
		}
	}
	if len(old) == 0 {
		legacy := byID[""]
		if len(legacy) > 0 {
			if err := s.writePositions(ctx, topic, id, legacy); err != nil {
				return nil, err
			}
			s.log.Info("positions written before topic ids were kept taken as the topic's", "topic", topic, "topic_id", id)
		}
		return legacy, nil
	}
	slices.Sort(old)
	if err := s.writePositions(ctx, topic, id, []heldPosition{{key: heldKey{"", topic, -1}, offset: -1}}); err != nil {
		return nil, err
	}
	s.log.Error("topic deleted and created again: the positions of its old id no longer apply; reading the new topic from its start",
		"topic", topic, "old_topic_id", strings.Join(old, ","), "new_topic_id", id)
	s.metrics.recreated.WithLabelValues(topic).Inc()
	return nil, nil
}

// writePositions writes positions of topic under id to sink_positions.
func (s *Sink) writePositions(ctx context.Context, topic, id string, ps []heldPosition) error {
	batch, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.cfg.ClickHouse.Database+
		".sink_positions (table_name, `topic`, `partition`, topic_id, max_offset)")
	if err != nil {
		return fmt.Errorf("writing the positions of %s: %w", topic, err)
	}
	defer batch.Close()
	for _, p := range ps {
		if err := batch.Append(p.key.table, topic, p.key.partition, id, p.offset); err != nil {
			return err
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("writing the positions of %s: %w", topic, err)
	}
	return nil
}

// observeTopicID records the id of a topic as fetched. An id other than
// the one the positions in memory were read under means the topic was read
// again after being created again (readAgain): they are forgotten, and
// load reads those of the new id.
func (s *Sink) observeTopicID(topic string, raw [16]byte) {
	if raw == ([16]byte{}) {
		return // a broker before Kafka 3.1 names no ids
	}
	id := kadm.TopicID(raw).String()
	s.heldMu.Lock()
	old, ok := s.ids[topic]
	s.heldMu.Unlock()
	if ok && old == id {
		return
	}
	if ok {
		s.forgetTopics([]string{topic})
	}
	s.heldMu.Lock()
	s.ids[topic] = id
	s.heldMu.Unlock()
}

// topicID is the id of a topic as last fetched, ” while unknown.
func (s *Sink) topicID(topic string) string {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	return s.ids[topic]
}

// readAgain takes topics the broker no longer knows by the id the client
// reads them under back into the client: franz-go never adopts the new id
// of a topic deleted and created again, and fails its fetches with
// UNKNOWN_TOPIC_ID instead. The batch gathered so far is written and
// committed first: it holds the old topic's records, under the old id.
// Then the topics leave the client (with their uncommitted offsets) and
// come back under their new ids, and load finds them recreated.
func (s *Sink) readAgain(ctx context.Context, cl *kgo.Client, w *writer, topics []string) error {
	if w.cur.records > 0 {
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	if err := w.settle(true); err != nil {
		return err
	}
	s.log.Warn("topics unknown by the id they were read under (deleted, maybe created again): reading them anew", "topics", topics)
	cl.PurgeTopicsFromClient(topics...)
	s.forgetTopics(topics)
	s.heldMu.Lock()
	for _, topic := range topics {
		delete(s.ids, topic)
	}
	s.heldMu.Unlock()
	cl.AddConsumeTopics(topics...)
	return nil
}

// raise records that a table holds a partition's rows up to offset.
// Positions only grow: a background INSERT may have raised one since a
// query read it. k's topic is copied, as it may be a view of a block's
// column, whose buffer is reused.
func (s *Sink) raise(k heldKey, offset int64) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if held, ok := s.held[k]; !ok || offset > held {
		k.topic = strings.Clone(k.topic)
		s.held[k] = offset
	}
}

// landed raises the positions to what the table holds of the block's rows.
// A failed INSERT may have landed with its positions lost: the server writes
// the table's part before the view's part in sink_positions, and dying
// between the two leaves the rows in and the position behind. So the table
// is asked for the first and last rows of each source partition in the
// block, through its ORDER BY. A block lands whole, or, when it spans two
// months, as two parts: finding both rows means the rows between landed
// too; finding one, the rows are sent again (doubled, never lost).
func (s *Sink) landed(ctx context.Context, blk *block) error {
	type topicPartition struct {
		topic     string
		partition int32
	}
	type span struct{ first, last int }
	spans := map[topicPartition]span{}
	offsets := blk.pos.offset.v
	for i := range blk.rows() {
		src := blk.source(i)
		k := topicPartition{src.topic, src.partition}
		sp, ok := spans[k]
		if !ok {
			sp = span{i, i}
		}
		if src.offset < offsets[sp.first] {
			sp.first = i
		}
		if src.offset > offsets[sp.last] {
			sp.last = i
		}
		spans[k] = sp
	}
	keys := make([]ch.GroupSet, len(blk.key)) // each binds as ('a', 'b', …)
	var at []ch.GroupSet
	for _, sp := range spans {
		for _, i := range []int{sp.first, sp.last} {
			for c, name := range blk.key {
				keys[c].Value = append(keys[c].Value, blk.text(name, i))
			}
			src := blk.source(i)
			at = append(at, ch.GroupSet{Value: []any{src.topic, src.partition, src.offset}})
		}
	}
	position := "`" + blk.pos.topic.name() + "`, `" + blk.pos.partition.name() + "`, `" + blk.pos.offset.name() + "`"
	query := "SELECT " + position + " FROM " + s.cfg.ClickHouse.Database + "." + blk.table + " WHERE "
	var args []any
	for c, name := range blk.key {
		query += "`" + name + "` IN ? AND "
		args = append(args, keys[c])
	}
	query += "(" + position + ") IN (?)"
	// The lookup must stay cheap however large the table: the server
	// refuses it rather than read the table whole.
	ctx = ch.Context(ctx, ch.WithSettings(ch.Settings{"force_primary_key": 1}))
	rows, err := s.conn.Query(ctx, query, append(args, at)...)
	if err != nil {
		return fmt.Errorf("%s: looking for the rows of a failed insert: %w", blk.table, err)
	}
	defer rows.Close()
	found := map[source]bool{}
	for rows.Next() {
		var src source
		if err := rows.Scan(&src.topic, &src.partition, &src.offset); err != nil {
			return err
		}
		found[src] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for k, sp := range spans {
		if found[blk.source(sp.first)] && found[blk.source(sp.last)] {
			s.raise(heldKey{blk.table, k.topic, k.partition}, offsets[sp.last])
		}
	}
	return nil
}

func (s *Sink) forget(partitions map[string][]int32) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for k := range s.held {
		if slices.Contains(partitions[k.topic], k.partition) {
			delete(s.held, k)
		}
	}
	for topic := range s.loaded {
		if len(partitions[topic]) > 0 {
			delete(s.loaded, topic)
		}
	}
	s.metrics.forgetLag(partitions)
}

// forgetTopics forgets every position of topics, to be read again.
func (s *Sink) forgetTopics(topics []string) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for k := range s.held {
		if slices.Contains(topics, k.topic) {
			delete(s.held, k)
		}
	}
	for _, topic := range topics {
		delete(s.loaded, topic)
	}
}

// StatusPermanentlyOrphaned is the status of every orphans row.
const StatusPermanentlyOrphaned = "PERMANENTLY_ORPHANED"
