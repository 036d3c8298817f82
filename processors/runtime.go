package processors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
)

// Runtime decides a stream exactly once, on Kafka transactions: what goka
// gives at least once. Everything one input or one timer visit causes (its
// outcomes, state record, dead letters, replay request and table write)
// and the input offsets decided so far are committed in one transaction,
// every RuntimeOptions.CommitEvery; a crash or a rebalance aborts what was
// not committed, and read_committed readers (the sink, the bridge, the
// table's own restore) never see it. So an input is decided again only
// when nothing of its first decision survived, a timer fires once, and a
// processor that stalled past its session while another took its
// partitions (a zombie) cannot commit: the group coordinator refuses its
// offsets (KIP-447) and its transaction aborts.
//
// Two rules make that hold for every write, not only for those of an
// input. A transaction that wrote to a partition always commits that
// partition's offset, even unchanged (a timer visit consumes nothing):
// franz-go would otherwise commit it with no offsets and so with no check
// of the group at all, and a woken zombie's timer visit would overwrite
// the new owner's state. And a newly assigned partition's table is
// restored only once the group's offset of that partition is stable: a
// transaction of the previous owner still open (it stalled between its
// offset commit and its end) has committed or aborted by then, so the
// restore sees its table writes or none of them.
//
// goka's processor commits offsets apart from the writes they caused and
// in no particular order, which no wrapper around it can fix; the rules,
// the table codec and goka's storage interface stay, only the loop that
// consumes, decides and commits is this one. Table writes of the running
// transaction wait in memory (ownedPartition.pending) and reach the local
// storage only once it commits, so the storage never holds a value Kafka
// did not accept.
type Runtime struct {
	h     *handler
	conn  kafka.Conn
	opts  RuntimeOptions
	table string
	group string

	// mu serializes the transaction loop and the group's partition
	// callbacks, which franz-go runs on its own goroutine between
	// transactions (rebalances are blocked while one runs).
	mu    sync.Mutex
	parts map[int32]*ownedPartition
	sess  *kgo.GroupTransactSession
	// failed is a callback's error, which ends the session.
	failed error
	// restoring counts partitions being restored; joined is set once the
	// group assigned this instance its first partitions (or none).
	restoring atomic.Int32
	joined    atomic.Bool
	// produceErr is the first failed write of the running transaction.
	produceErr atomic.Pointer[error]
	// receivedAt are the received_at (unix ms) of the decisions of the
	// running transaction, whose latency is observed once it commits: a
	// decision of an aborted transaction is never seen by readers, and is
	// observed only when decided again and committed. r.mu guards it.
	receivedAt []int64
	// marks keep the table and state topics readable by goka's view
	// (viewmark.go).
	marks *viewMarks
}

// RuntimeOptions configure the transactional runtime. Zero values mean
// defaults.
type RuntimeOptions struct {
	// TransactionalID names this instance's transactions: stable across
	// restarts of one instance, so that a restarted instance fences its
	// predecessor's open transaction at once, and unique among the live
	// instances of a group. Required.
	TransactionalID string
	// Storage builds a table partition's local storage; nil keeps tables
	// in memory, rebuilt from the changelog at every assignment.
	Storage storage.Builder
	// CommitEvery is how long one transaction gathers decisions: the
	// latency a read_committed reader adds, against the cost of a commit.
	// Default 100ms.
	CommitEvery time.Duration
	// TimerTick is how often timers are visited. Default 1s.
	TimerTick time.Duration
	// FetchMinBytes and FetchMaxWait: a fetch answers once the broker has
	// this many bytes of input, or after this long. Zero: franz-go's
	// (one byte, 5s).
	FetchMinBytes int
	FetchMaxWait  time.Duration
	// Client adds franz-go options (tests inject faults with them).
	Client []kgo.Opt
}

// Defaults of RuntimeOptions.
const (
	defaultCommitEvery = 100 * time.Millisecond
	defaultTimerTick   = time.Second
	// transactionTimeout bounds how long an instance that died mid
	// transaction holds back read_committed readers of its partitions when
	// no instance with its transactional id comes back to fence it.
	transactionTimeout = 30 * time.Second
	// pollRecords bounds the records one poll hands the loop.
	pollRecords = 10_000
	// stableOffsetsBackoff is how often an assignment asks again whether a
	// previous owner's transaction has ended.
	stableOffsetsBackoff = 100 * time.Millisecond
	// sessionBackoffMin and sessionBackoffMax bound the wait before a new
	// Kafka session after one failed: doubling while sessions fail without
	// committing, so an outage is not hammered.
	sessionBackoffMin = 500 * time.Millisecond
	sessionBackoffMax = 30 * time.Second
)

// ownedPartition is a partition of the input this instance holds, with its
// table partition.
type ownedPartition struct {
	partition int32
	store     storage.Storage
	// pending are the table values of the running transaction, by key:
	// each key's last, written to the changelog once, when it commits.
	pending map[string]pendingValue
	// lastChangelog is the offset of the latest table record of the running
	// transaction, -1 for none; written by produce callbacks.
	lastChangelog atomic.Int64
	// wrote is whether the running transaction wrote to the partition.
	wrote bool
}

// pendingValue is a key's table value in the running transaction (nil:
// deleted) and, once the transaction is about to commit, its encoding.
type pendingValue struct {
	value *tableValue
	data  []byte
}

// NewRuntime builds the transactional runtime of stream s.
func NewRuntime(conn kafka.Conn, s *config.Stream, opts Options, ropts RuntimeOptions) (*Runtime, error) {
	if ropts.TransactionalID == "" {
		return nil, errors.New("processor runtime: a transactional id is required")
	}
	if ropts.CommitEvery <= 0 {
		ropts.CommitEvery = defaultCommitEvery
	}
	if ropts.TimerTick <= 0 {
		ropts.TimerTick = defaultTimerTick
	}
	if ropts.Storage == nil {
		ropts.Storage = storage.MemoryBuilder()
	}
	h := newHandler(s, opts)
	// Inputs are decided again only when their first decision aborted with
	// its table write: there is nothing to remember.
	h.noRedelivery = true
	r := &Runtime{h: h, conn: conn, opts: ropts, table: h.names.Table,
		group: h.group, parts: map[int32]*ownedPartition{}}
	r.marks = newViewMarks(conn, s.Name, []string{h.names.Table, h.names.State}, h.opts.Logger,
		h.opts.Metrics.clientOpts("process-"+s.Name+"-marks"))
	// Decisions are made under r.mu, in gather.
	h.onDecided = func(ms int64) { r.receivedAt = append(r.receivedAt, ms) }
	return r, nil
}

// Recovered reports whether the instance has joined its group and holds
// every table partition it was given. franz-go calls the assignment
// callback on joining even with no partition, so an instance the group
// gives none (more instances than partitions) is ready too.
func (r *Runtime) Recovered() bool { return r.joined.Load() && r.restoring.Load() == 0 }

// ClientOptions are the franz-go options of the runtime's group transact
// session: internal/kafka's (acks=all, idempotence) and the consumer's
// (read_committed, stable offsets, the oldest offset for a new group).
func (r *Runtime) ClientOptions() []kgo.Opt {
	names := r.h.names
	return kafka.Options(r.conn, append([]kgo.Opt{
		kgo.ConsumerGroup(r.group),
		// A static member: an instance restarted after a crash gets its
		// partitions back at once instead of after the session timeout
		// (its transactional id has fenced what it left open by then).
		kgo.InstanceID(r.opts.TransactionalID),
		kgo.ConsumeTopics(names.In),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.TransactionalID(r.opts.TransactionalID),
		kgo.TransactionTimeout(transactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kafka.FetchMinBytes(r.opts.FetchMinBytes),
		kgo.FetchMaxWait(cmp.Or(r.opts.FetchMaxWait, 5*time.Second)),
		kgo.RequireStableFetchOffsets(),
		// Rebalances wait between transactions, so the partition
		// callbacks never meet a transaction's pending table writes.
		kgo.BlockRebalanceOnPoll(),
		// Every output of an input goes to the input's partition of its
		// topic: the topics are co-partitioned (checked at start).
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MaxBufferedRecords(producerBufferedRecords), kgo.MaxBufferedBytes(producerBufferedBytes),
		kgo.ProducerLinger(producerLinger),
		kgo.OnPartitionsAssigned(r.assigned),
		kgo.OnPartitionsRevoked(r.dropped),
		kgo.OnPartitionsLost(r.dropped),
	}, append(r.h.opts.Metrics.clientOpts("process-"+r.h.stream.Name), r.opts.Client...)...)...)
}

// Run consumes, decides and commits until ctx ends, then commits what it
// decided and leaves the group.
//
// A Kafka session that fails is closed and a new one begun, with the same
// transactional id and instance id, after a backoff: a transaction the
// broker would not end (a coordinator that moved while a broker stalled
// can refuse it with INVALID_TXN_STATE and fail the producer id for good),
// a producer id it no longer accepts, a table restore cut by a broker
// outage. The new producer id fences whatever the old one left open, the
// group gives the static member its partitions back, and the inputs of
// the transaction that did not commit are decided again. Only what a new
// session cannot mend ends Run: an authorization the cluster refuses, a
// first session that cannot start, a failure while deciding.
func (r *Runtime) Run(ctx context.Context) error {
	began := false
	defer func() {
		if began {
			r.leave()
		}
	}()
	// The lag is read by a client of its own, beside the sessions: it
	// keeps moving while a session stalls or is begun anew.
	lagClient, err := kafka.NewClient(r.conn, r.h.opts.Metrics.clientOpts("process-"+r.h.stream.Name+"-lag")...)
	if err != nil {
		return fmt.Errorf("processor %s: %w", r.h.stream.Name, err)
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() { defer close(watching); r.h.watchLag(watchCtx, kadm.NewClient(lagClient), r.opts.TimerTick) }()
	defer func() {
		stopWatching()
		<-watching
		lagClient.Close()
	}()
	stopMarks, err := r.marks.start()
	if err != nil {
		return err
	}
	defer stopMarks()
	backoff := sessionBackoffMin
	for {
		committed, err := r.session(ctx, &began)
		var lost *lostSession
		if ctx.Err() != nil || !errors.As(err, &lost) {
			return err
		}
		if committed {
			backoff = sessionBackoffMin
		}
		if m := r.h.opts.Metrics; m != nil {
			m.sessionRestarts.WithLabelValues(r.h.stream.Name).Inc()
		}
		r.h.opts.Logger.Warn("the Kafka session failed; a new one begins, and what its open transaction decided is decided again",
			"stream", r.h.stream.Name, "err", lost.err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, sessionBackoffMax)
	}
}

// lostSession is an error of the Kafka session that a new session mends.
type lostSession struct{ err error }

func (e *lostSession) Error() string { return e.err.Error() }
func (e *lostSession) Unwrap() error { return e.err }

// sessionLost marks err, an error of the Kafka session, as mended by a new
// one, unless the cluster refused an authorization, which no new session
// gets.
func sessionLost(err error) error {
	for _, refused := range []error{kerr.TransactionalIDAuthorizationFailed, kerr.GroupAuthorizationFailed,
		kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed} {
		if errors.Is(err, refused) {
			return err
		}
	}
	return &lostSession{err}
}

// session runs one Kafka session until ctx ends or it fails, and reports
// whether it committed a transaction; it sets began once its producer id
// is loaded (the group may know the instance from then on). The first
// session, which cannot load its producer id before began is set, fails
// Run: the cluster is unreachable or refuses it.
func (r *Runtime) session(ctx context.Context, began *bool) (committed bool, err error) {
	r.mu.Lock()
	r.failed = nil
	r.mu.Unlock()
	r.produceErr.Store(nil)
	r.joined.Store(false)
	sess, err := kgo.NewGroupTransactSession(r.ClientOptions()...)
	if err != nil {
		return false, fmt.Errorf("processor %s: %w", r.h.stream.Name, err)
	}
	r.sess = sess
	defer func() {
		sess.AllowRebalance()
		sess.Close()
		r.closeAll()
	}()
	// Loading the producer id fences a predecessor with this transactional
	// id (this instance before a crash, or its failed session) now: its
	// open transaction aborts, so the group's offsets are stable when the
	// partitions are assigned.
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		err = fmt.Errorf("processor %s: initializing the transactional producer: %w", r.h.stream.Name, err)
		if !*began {
			return false, err
		}
		return false, sessionLost(err)
	}
	*began = true
	adm := kadm.NewClient(sess.Client())
	w := &watermark{adm: adm, topic: r.h.names.In, group: r.group, committed: &r.h.committed}
	lastTick := time.Now()
	for {
		if err := sess.Begin(); err != nil {
			return committed, sessionLost(fmt.Errorf("processor %s: beginning a transaction: %w", r.h.stream.Name, err))
		}
		decideErr := r.gather(ctx, w, &lastTick)
		stopping := ctx.Err() != nil
		if decideErr == nil {
			decideErr = r.writeTables()
		}
		fence, fenceErr := r.fence()
		if fenceErr != nil {
			r.h.opts.Logger.Warn("a transaction is aborted: it cannot be fenced; its inputs are decided again", "stream", r.h.stream.Name, "err", fenceErr)
		}
		ended, err := r.end(decideErr == nil && fenceErr == nil, fence)
		if err != nil {
			return committed, sessionLost(err)
		}
		committed = committed || ended
		sess.AllowRebalance()
		if decideErr != nil {
			return committed, decideErr
		}
		if stopping {
			return committed, nil
		}
	}
}

// leave takes this instance out of its group once it stopped, so that its
// partitions move to the others now: a static member's client does not
// leave on closing (a crashed instance that never stops keeps them until
// its session times out, or it restarts).
func (r *Runtime) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), producerCloseTimeout)
	defer cancel()
	cl, err := kafka.NewClient(r.conn, r.h.opts.Metrics.clientOpts("process-"+r.h.stream.Name+"-leave")...)
	if err == nil {
		defer cl.Close()
		var left kadm.LeaveGroupResponses
		left, err = kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(r.group).InstanceIDs(r.opts.TransactionalID).Reason("stopping"))
		if err == nil {
			err = left.Error()
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		r.h.opts.Logger.Warn("leaving the group; its partitions move after the session timeout", "stream", r.h.stream.Name, "err", err)
	}
}

// gather decides what arrives for one transaction's time, and the timers
// when due.
func (r *Runtime) gather(ctx context.Context, w *watermark, lastTick *time.Time) error {
	deadline := time.Now().Add(r.opts.CommitEvery)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		pollCtx, cancel := context.WithDeadline(ctx, deadline)
		fetches := r.sess.PollRecords(pollCtx, pollRecords)
		cancel()
		if fetches.IsClientClosed() {
			return errors.New("the Kafka client closed")
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				r.h.opts.Logger.Warn("fetch failed; retried", "stream", r.h.stream.Name, "topic", topic, "partition", partition, "err", err)
			}
		})
		r.mu.Lock()
		err := r.failed
		if err == nil {
			err = r.decideFetched(fetches)
		}
		if err == nil && time.Since(*lastTick) >= r.opts.TimerTick {
			*lastTick = time.Now()
			err = r.visitTimers(ctx, w)
		}
		r.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// decideFetched decides each fetched record, in log order per partition.
func (r *Runtime) decideFetched(fetches kgo.Fetches) error {
	var err error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		part := r.parts[fp.Partition]
		for _, rec := range fp.Records {
			if err != nil {
				return
			}
			if part == nil {
				err = fmt.Errorf("processor %s: a record of partition %d, which this instance does not hold", r.h.stream.Name, fp.Partition)
				return
			}
			c := &runtimeContext{r: r, part: part, key: string(rec.Key), rec: rec}
			err = c.run(func() { r.h.process(c, rec.Value) })
		}
	})
	return err
}

// visitTimers runs the timer visit over every key of the partitions held,
// at the input watermark. A partition is visited only while the group
// knows its offset, which the transaction's commit then carries as its
// fence (fence): one just assigned waits for its offsets, and one whose
// revocation franz-go did not report (its session reports one revocation
// per transaction) is no longer in the group's offsets at all.
func (r *Runtime) visitTimers(ctx context.Context, w *watermark) error {
	return r.h.timerTick(ctx, w, func(safeMs int64) error {
		positions := r.positions()
		for _, p := range slices.Sorted(maps.Keys(r.parts)) {
			if _, known := positions[p]; !known {
				continue
			}
			part := r.parts[p]
			keys, err := part.keys()
			if err != nil {
				return err
			}
			for _, key := range keys {
				c := &runtimeContext{r: r, part: part, key: key}
				if err := c.run(func() { r.h.tick(c, safeMs) }); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// positions are the input partitions this instance holds whose offset the
// group knows: committed, or decided in the running transaction.
func (r *Runtime) positions() map[int32]kgo.EpochOffset {
	cl := r.sess.Client()
	positions := map[int32]kgo.EpochOffset{}
	maps.Copy(positions, cl.CommittedOffsets()[r.h.names.In])
	for p := range cl.UncommittedOffsets()[r.h.names.In] {
		positions[p] = kgo.EpochOffset{Offset: -1} // the transaction commits it anyway
	}
	return positions
}

// writeTables writes each table value the transaction changed to the
// changelog, once per key however many of its events it decided: a key's
// value holds its dedup memory and more, and rewriting it per event was
// the largest part of the processor's and the broker's work per event.
// Readers of the changelog see only committed values anyway, the last of
// each transaction. Before fence, which must see these writes.
func (r *Runtime) writeTables() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, part := range r.parts {
		for k, v := range part.pending {
			var data []byte
			if v.value != nil {
				var err error
				if data, err = (entityCodec{}).Encode(v.value); err != nil {
					return fmt.Errorf("processor %s: encoding the table value of %s: %w", r.h.stream.Name, k, err)
				}
			}
			part.pending[k] = pendingValue{value: v.value, data: data}
			r.produce(part, &kgo.Record{Topic: r.table, Key: []byte(k), Value: data})
		}
	}
	return nil
}

// fence is what the transaction's offset commit must add so that it
// covers every partition the transaction wrote to: the committed offset
// of each one whose offset the transaction does not move. The coordinator
// then checks the group generation for them too, so a zombie's writes
// abort. A partition written with no offset to commit is an error (the
// transaction aborts): it cannot be fenced.
func (r *Runtime) fence() (map[int32]kgo.EpochOffset, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	positions := r.positions()
	fence := map[int32]kgo.EpochOffset{}
	for p, part := range r.parts {
		if !part.wrote {
			continue
		}
		eo, known := positions[p]
		switch {
		case !known:
			return nil, fmt.Errorf("partition %d was written but the group has no offset of it", p)
		case eo.Offset >= 0:
			fence[p] = eo
		}
	}
	return fence, nil
}

// withFence adds the fence's offsets to the transaction's offset commit.
func (r *Runtime) withFence(ctx context.Context, fence map[int32]kgo.EpochOffset) context.Context {
	if len(fence) == 0 {
		return ctx
	}
	return kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		i := slices.IndexFunc(req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) bool { return t.Topic == r.h.names.In })
		if i < 0 {
			t := kmsg.NewTxnOffsetCommitRequestTopic()
			t.Topic = r.h.names.In
			req.Topics = append(req.Topics, t)
			i = len(req.Topics) - 1
		}
		t := &req.Topics[i]
		for _, p := range slices.Sorted(maps.Keys(fence)) {
			if slices.ContainsFunc(t.Partitions, func(tp kmsg.TxnOffsetCommitRequestTopicPartition) bool { return tp.Partition == p }) {
				continue
			}
			tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			tp.Partition, tp.Offset, tp.LeaderEpoch = p, fence[p].Offset, fence[p].Epoch
			tp.Metadata = &req.MemberID
			t.Partitions = append(t.Partitions, tp)
		}
		return nil
	})
}

// end commits the transaction (or aborts it), with the fence's offsets,
// then moves its table writes to the local storage or drops them; it
// reports whether the transaction committed.
func (r *Runtime) end(commit bool, fence map[int32]kgo.EpochOffset) (bool, error) {
	if p := r.produceErr.Swap(nil); p != nil {
		r.h.opts.Logger.Warn("a write of the transaction failed; aborted, its inputs are decided again", "stream", r.h.stream.Name, "err", *p)
		commit = false
	}
	ctx, cancel := context.WithTimeout(context.Background(), producerCloseTimeout)
	defer cancel()
	if commit {
		ctx = r.withFence(ctx, fence)
	}
	try := kgo.TryAbort
	if commit {
		try = kgo.TryCommit
	}
	committed, err := r.sess.End(ctx, try)
	r.mu.Lock()
	defer r.mu.Unlock()
	if committed {
		now := r.h.opts.Now()
		r.h.observeLatency(now, r.receivedAt...)
		if m := r.h.opts.Metrics; m != nil {
			m.lastCommit.WithLabelValues(r.h.stream.Name).Set(float64(now.UnixMilli()) / 1000)
		}
	}
	r.receivedAt = r.receivedAt[:0]
	for _, part := range r.parts {
		if committed {
			if serr := part.apply(); serr != nil && err == nil {
				err = serr
			}
		}
		if part.wrote {
			r.marks.owe(part.partition) // committed or aborted, its marker ends the partition
		}
		part.reset()
	}
	if err != nil {
		return false, fmt.Errorf("processor %s: ending a transaction: %w", r.h.stream.Name, err)
	}
	if commit && !committed {
		r.h.opts.Logger.Info("transaction aborted by a rebalance; its inputs are decided again", "stream", r.h.stream.Name)
	}
	return committed, nil
}

// assigned restores the table partitions of newly assigned input
// partitions before any of their records is decided, once their offsets
// are stable.
func (r *Runtime) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.joined.Store(true)
	ps := assigned[r.h.names.In]
	if len(ps) == 0 {
		return
	}
	r.restoring.Add(int32(len(ps)))
	defer r.restoring.Add(-int32(len(ps)))
	if err := r.awaitStableOffsets(ctx, cl, ps); err != nil {
		r.failed = sessionLost(fmt.Errorf("processor %s: awaiting the offsets of partitions %v: %w", r.h.stream.Name, ps, err))
		return
	}
	// The table's last stable offsets, once for every partition: the
	// offsets are stable, so nothing another instance writes to these
	// partitions from now on can commit.
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, r.table)
	if err != nil {
		r.failed = sessionLost(fmt.Errorf("processor %s: the last stable offsets of %s: %w", r.h.stream.Name, r.table, err))
		return
	}
	for _, p := range ps {
		if part := r.parts[p]; part != nil {
			// Held still: its revocation was not reported (see
			// visitTimers). Another instance may have written it since.
			r.h.opts.Logger.Info("partition assigned again; restored anew", "stream", r.h.stream.Name, "partition", p)
			r.drop(p)
		}
		part, err := r.restore(ctx, p, ends)
		if err != nil {
			r.failed = sessionLost(fmt.Errorf("processor %s: restoring table partition %d: %w", r.h.stream.Name, p, err))
			return
		}
		r.parts[p] = part
	}
	// A previous owner's last transaction ended in a marker.
	r.marks.owe(ps...)
}

// awaitStableOffsets returns once the group has no transaction pending
// on the offsets of partitions ps of the input (KIP-447: the coordinator
// answers UNSTABLE_OFFSET_COMMIT until it ends), that is once every
// transaction of a previous owner that wrote them has committed or
// aborted, at the latest after its transaction timeout.
func (r *Runtime) awaitStableOffsets(ctx context.Context, cl *kgo.Client, ps []int32) error {
	adm := kadm.NewClient(cl)
	for {
		offsets, err := adm.FetchOffsetsForTopics(kadm.RequireStable(ctx), r.group, r.h.names.In)
		unstable := errors.Is(err, kerr.UnstableOffsetCommit)
		if err != nil && !unstable {
			return err
		}
		for _, p := range ps {
			if o, ok := offsets.Lookup(r.h.names.In, p); ok && errors.Is(o.Err, kerr.UnstableOffsetCommit) {
				unstable = true
			} else if ok && o.Err != nil {
				return o.Err
			}
		}
		if !unstable {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(stableOffsetsBackoff):
		}
	}
}

// dropped closes the table partitions of revoked or lost partitions.
func (r *Runtime) dropped(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range revoked[r.h.names.In] {
		r.drop(p)
	}
}

// drop closes partition p's table storage and forgets it; r.mu is held.
func (r *Runtime) drop(p int32) {
	part := r.parts[p]
	if part == nil {
		return
	}
	if err := part.store.Close(); err != nil {
		r.h.opts.Logger.Warn("closing table storage", "stream", r.h.stream.Name, "partition", p, "err", err)
	}
	delete(r.parts, p)
}

func (r *Runtime) closeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.parts {
		r.drop(p)
	}
}

// restore opens a table partition's storage and reads its changelog, as
// committed, from where the storage stands to its last stable offset in
// ends.
func (r *Runtime) restore(ctx context.Context, p int32, ends kadm.ListedOffsets) (*ownedPartition, error) {
	st, err := r.opts.Storage(r.table, p)
	if err != nil {
		return nil, err
	}
	if err := st.Open(); err != nil {
		return nil, err
	}
	part := &ownedPartition{partition: p, store: st, pending: map[string]pendingValue{}}
	part.lastChangelog.Store(-1)
	stored, err := st.GetOffset(-1)
	if err != nil {
		return nil, err
	}
	end, ok := ends.Lookup(r.table, p)
	if !ok || end.Err != nil {
		return nil, fmt.Errorf("no last stable offset of %s/%d: %v", r.table, p, end.Err)
	}
	if stored+1 < end.Offset {
		if err := r.readChangelog(ctx, st, p, stored+1, end.Offset); err != nil {
			return nil, err
		}
	}
	return part, st.MarkRecovered()
}

// ChangelogReaderOptions are the franz-go options of the client that
// restores table partition p from offset from: committed records only,
// with the transaction markers that tell where the end is.
func (r *Runtime) ChangelogReaderOptions(p int32, from int64) []kgo.Opt {
	return kafka.Options(r.conn, append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.table: {p: kgo.NewOffset().At(from)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, r.h.opts.Metrics.clientOpts("process-"+r.h.stream.Name+"-restore")...)...)
}

// readChangelog applies the committed table records of partition p in
// [from, end) to st. Transaction markers take offsets too: they are read
// (and skipped) so that the end is known to be reached.
func (r *Runtime) readChangelog(ctx context.Context, st storage.Storage, p int32, from, end int64) error {
	rd, err := kafka.New(r.ChangelogReaderOptions(p, from))
	if err != nil {
		return err
	}
	defer rd.Close()
	last := from - 1
	for last < end-1 {
		fetches := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fetches.Err0(); err != nil {
			return err
		}
		var serr error
		fetches.EachRecord(func(rec *kgo.Record) {
			last = max(last, rec.Offset)
			if serr != nil || rec.Attrs.IsControl() || isViewMark(rec) {
				return
			}
			if rec.Value == nil {
				serr = st.Delete(string(rec.Key))
			} else {
				serr = st.Set(string(rec.Key), rec.Value)
			}
		})
		if serr != nil {
			return serr
		}
	}
	return st.SetOffset(last)
}

// keys are the partition's keys with a table value: stored, and written in
// the running transaction.
func (part *ownedPartition) keys() ([]string, error) {
	it, err := part.store.Iterator()
	if err != nil {
		return nil, err
	}
	defer it.Release()
	var keys []string
	for it.Next() {
		if k := string(it.Key()); k != offsetKey {
			if _, written := part.pending[k]; !written {
				keys = append(keys, k)
			}
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	for k, v := range part.pending {
		if v.value != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// apply moves the committed transaction's table writes to the storage.
func (part *ownedPartition) apply() error {
	for k, v := range part.pending {
		var err error
		if v.value == nil {
			err = part.store.Delete(k)
		} else {
			err = part.store.Set(k, v.data)
		}
		if err != nil {
			return err
		}
	}
	if last := part.lastChangelog.Load(); last >= 0 {
		return part.store.SetOffset(last)
	}
	return nil
}

func (part *ownedPartition) reset() {
	clear(part.pending)
	part.lastChangelog.Store(-1)
	part.wrote = false
}

// value is the key's table value as of the running transaction, nil when
// it has none.
func (part *ownedPartition) value(key string) (*tableValue, error) {
	if v, ok := part.pending[key]; ok {
		return v.value, nil
	}
	data, err := part.store.Get(key)
	if err != nil || data == nil {
		return nil, err
	}
	v, err := entityCodec{}.Decode(data)
	if err != nil {
		return nil, err
	}
	tv, _ := v.(*tableValue)
	return tv, nil
}

// produce writes rec to the input's partition of its topic, in the running
// transaction.
func (r *Runtime) produce(part *ownedPartition, rec *kgo.Record) {
	rec.Partition = part.partition
	part.wrote = true
	changelog := rec.Topic == r.table
	r.sess.Produce(context.Background(), rec, func(rec *kgo.Record, err error) {
		if err != nil {
			r.produceErr.CompareAndSwap(nil, &err)
			return
		}
		if changelog {
			for {
				last := part.lastChangelog.Load()
				if rec.Offset <= last || part.lastChangelog.CompareAndSwap(last, rec.Offset) {
					break
				}
			}
		}
	})
}

// runtimeContext is the decisionContext of one input record, or of one
// key's timer visit (rec nil).
type runtimeContext struct {
	r    *Runtime
	part *ownedPartition
	key  string
	rec  *kgo.Record
}

// failure carries Fail's error out of the rules.
type failure struct{ err error }

// run runs fn, turning a Fail into its error.
func (c *runtimeContext) run(fn func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			f, ok := v.(failure)
			if !ok {
				panic(v)
			}
			err = f.err
		}
	}()
	fn()
	return nil
}

func (c *runtimeContext) Key() string { return c.key }

func (c *runtimeContext) Value() any {
	v, err := c.part.value(c.key)
	if err != nil {
		c.Fail(fmt.Errorf("reading the table value of %s: %w", c.key, err))
	}
	if v == nil {
		return nil
	}
	return v
}

func (c *runtimeContext) SetValue(value any, _ ...goka.ContextOption) {
	tv, _ := value.(*tableValue)
	c.part.pending[c.key] = pendingValue{value: tv}
}

func (c *runtimeContext) Emit(topic goka.Stream, key string, value any, _ ...goka.ContextOption) {
	data, ok := value.([]byte)
	if !ok {
		c.Fail(fmt.Errorf("emit to %s: a %T, not bytes", topic, value))
	}
	c.r.produce(c.part, &kgo.Record{Topic: string(topic), Key: []byte(key), Value: data})
}

func (c *runtimeContext) Partition() int32 { return c.part.partition }

func (c *runtimeContext) Offset() int64 {
	if c.rec == nil {
		return -1
	}
	return c.rec.Offset
}

func (c *runtimeContext) Headers() goka.Headers {
	if c.rec == nil || len(c.rec.Headers) == 0 {
		return nil
	}
	h := make(goka.Headers, len(c.rec.Headers))
	for _, kv := range c.rec.Headers {
		h[kv.Key] = kv.Value
	}
	return h
}

func (c *runtimeContext) Timestamp() time.Time {
	if c.rec == nil {
		return time.Time{}
	}
	return c.rec.Timestamp
}

func (c *runtimeContext) Fail(err error) { panic(failure{err}) }

var _ decisionContext = (*runtimeContext)(nil)
