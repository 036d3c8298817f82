package eos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
)

// Options configure a Processor. Zero values mean defaults.
type Options struct {
	// Client are the franz-go options that reach the cluster: seeds, TLS,
	// SASL, client id, hooks, for every client of the processor. Required
	// unless ClientFor is set.
	Client []kgo.Opt
	// ClientFor, when set, gives the options of each client the processor
	// builds, by role ("session" for each Kafka session, "restore",
	// "marks", "leave"), instead of Client: their own client ids, and hooks
	// that serve one client each (franz-go's kprom).
	ClientFor func(role string) []kgo.Opt
	// TransactionalID names this instance's transactions and is its static
	// group member id: stable across restarts of one instance, so that a
	// restarted instance fences what its predecessor left open at once and
	// gets its partitions back without waiting for a session timeout, and
	// unique among the live instances of the group. Required.
	TransactionalID string
	// Group is the consumer group; default the graph's group. The group
	// table's topic is always the graph's, `<graph group>-table`.
	Group string
	// Storage builds a table partition's local storage; nil keeps tables
	// in memory, read back from the changelog at every assignment.
	Storage storage.Builder
	// ValueCacheBytes bounds, per owned partition, the decoded table
	// values kept from one transaction to the next (by encoded size; zero
	// means 4 MiB, negative none). A value given to SetValue must not
	// change after its transaction: the cache keeps the value itself.
	ValueCacheBytes int
	// CommitEvery is how long one transaction gathers: the latency a
	// read_committed reader adds, against the cost of a commit. Default
	// 100ms.
	CommitEvery time.Duration
	// TransactionTimeout bounds how long an instance that died in a
	// transaction holds back read_committed readers when no instance with
	// its transactional id comes back. Default 30s.
	TransactionTimeout time.Duration
	// SessionTimeout is how long the group waits for a member that stopped
	// without leaving (a crash) before it gives its partitions to the
	// others. Lower, a stalled broker or a long pause of the process
	// expels live members more often (each expulsion aborts a
	// transaction, decided again); an instance restarted under its
	// transactional id gets its partitions back at once whatever it is.
	// Default 45s (Kafka's).
	SessionTimeout time.Duration
	// HeartbeatInterval is how often a member asks whether the group
	// rebalances. A busy member hears of it at each commit, an idle one
	// only here: an instance that takes over the partitions of one that
	// stopped, while it has nothing of its own to decide, starts on them
	// up to this much later. Default 1s (franz-go's is 3s).
	HeartbeatInterval time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// ViewTopics are outputs, besides the group table, that goka views
	// read as tables: each partition a transaction decided ends in a view
	// mark (IsViewMark) once the transaction has ended, so a view's
	// recovery, which waits for the record before the high watermark,
	// ends. They must be co-partitioned with the inputs.
	ViewTopics []string
	// OnEnd is called after every transaction, with whether it committed
	// and when it ended (a caller's decision metrics observe the committed
	// ones); it runs on the processing goroutine.
	OnEnd func(committed bool, at time.Time)
	// OnSessionRestart is called when a failed Kafka session is begun anew.
	OnSessionRestart func(err error)
}

// Defaults of Options, and bounds of the loop.
const (
	defaultCommitEvery        = 100 * time.Millisecond
	defaultTransactionTimeout = 30 * time.Second
	defaultSessionTimeout     = 45 * time.Second
	defaultHeartbeatInterval  = time.Second
	// pollRecords bounds the records one poll hands the loop.
	pollRecords = 10_000
	// stableOffsetsBackoffMin and stableOffsetsBackoffMax bound how often
	// an assignment asks again whether a previous owner's transaction has
	// ended, doubling from the first: the markers that end it are written
	// within milliseconds of the commit or the fencing that ends it.
	stableOffsetsBackoffMin = 10 * time.Millisecond
	stableOffsetsBackoffMax = 100 * time.Millisecond
	// sessionBackoffMin and sessionBackoffMax bound the wait before a new
	// Kafka session after one failed: doubling while sessions fail without
	// committing, so an outage is not hammered.
	sessionBackoffMin = 500 * time.Millisecond
	sessionBackoffMax = 30 * time.Second
	// closeTimeout bounds ending a transaction and leaving the group.
	closeTimeout = 10 * time.Second
)

// Processor runs one goka group graph exactly once: see the package
// comment.
type Processor struct {
	plan  *plan
	opts  Options
	group string
	// topics are the consumed topics: the inputs and the loop.
	topics []string

	// mu serializes the transaction loop and the group's partition
	// callbacks, which franz-go runs between transactions (rebalances
	// wait while one runs).
	mu    sync.Mutex
	parts map[int32]*partition
	sess  *kgo.GroupTransactSession
	// failed is a partition callback's error, which ends the session.
	failed error
	// restoring counts partitions being restored; joined is set once the
	// group assigned this instance its first partitions (or none).
	restoring atomic.Int32
	joined    atomic.Bool
	// visits are the visits asked for, run in the next transaction.
	visits chan *visit
	ctx    context.Context
	// recovery logs how a session gets back to deciding (recovery.go).
	recovery recoveryLog
	// marks keep the table and the view topics readable by goka's view
	// (marks.go); nil without either.
	marks *viewMarks
}

// New builds the processor of graph g.
func New(g *goka.GroupGraph, opts Options) (*Processor, error) {
	p, err := planFor(g)
	if err != nil {
		return nil, err
	}
	if opts.TransactionalID == "" {
		return nil, fmt.Errorf("group graph %s: a transactional id is required", p.group)
	}
	opts.CommitEvery = cmp.Or(opts.CommitEvery, defaultCommitEvery)
	opts.TransactionTimeout = cmp.Or(opts.TransactionTimeout, defaultTransactionTimeout)
	opts.SessionTimeout = cmp.Or(opts.SessionTimeout, defaultSessionTimeout)
	opts.HeartbeatInterval = cmp.Or(opts.HeartbeatInterval, defaultHeartbeatInterval)
	if opts.Storage == nil {
		opts.Storage = storage.MemoryBuilder()
	}
	if opts.ValueCacheBytes == 0 {
		opts.ValueCacheBytes = 4 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	topics := slices.Sorted(maps.Keys(p.inputs))
	if p.loop != nil {
		topics = append(topics, p.loop.name)
	}
	group := cmp.Or(opts.Group, p.group)
	proc := &Processor{plan: p, opts: opts, group: group, topics: topics,
		parts: map[int32]*partition{}, visits: make(chan *visit),
		recovery: recoveryLog{log: opts.Logger, group: group, transactionTimeout: opts.TransactionTimeout}}
	marked := slices.Clone(opts.ViewTopics)
	if p.table != nil {
		marked = append([]string{p.table.name}, marked...)
	}
	if len(marked) > 0 {
		proc.marks = newViewMarks(group, marked, opts.Logger, opts.TransactionTimeout, proc.clientFor("marks"))
	}
	return proc, nil
}

// Recovered reports whether the instance has joined its group and holds
// every table partition it was given, restored. franz-go calls the
// assignment callback on joining even with no partition, so an instance
// the group gives none is recovered too.
func (p *Processor) Recovered() bool { return p.joined.Load() && p.restoring.Load() == 0 }

// Group is the processor's consumer group.
func (p *Processor) Group() string { return p.group }

// ClientOptions are the franz-go options of the processor's group
// transact session.
func (p *Processor) ClientOptions() []kgo.Opt {
	// The timeouts and the linger first, so that Options.Client may set
	// them too. A transaction's writes are read by no one before its
	// commit, which flushes them: lingering past the whole transaction
	// (twice its interval, for one that overruns it) sends them in one
	// produce request per broker, or as batches fill or the buffer does,
	// instead of one every few milliseconds. The commit waits for that
	// request's round trip.
	opts := append([]kgo.Opt{kgo.SessionTimeout(p.opts.SessionTimeout), kgo.HeartbeatInterval(p.opts.HeartbeatInterval),
		kgo.ProducerLinger(min(2*p.opts.CommitEvery, time.Minute))}, p.clientFor("session")...)
	opts = append(opts,
		kgo.ConsumerGroup(p.group),
		kgo.InstanceID(p.opts.TransactionalID),
		kgo.ConsumeTopics(p.topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.TransactionalID(p.opts.TransactionalID),
		kgo.TransactionTimeout(p.opts.TransactionTimeout),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		// Rebalances wait between transactions, so the partition callbacks
		// never meet a transaction's pending table values.
		kgo.BlockRebalanceOnPoll(),
		kgo.RecordPartitioner(gokaPlacement{}),
		kgo.OnPartitionsAssigned(p.assigned),
		kgo.OnPartitionsRevoked(p.dropped),
		kgo.OnPartitionsLost(p.dropped),
	)
	return opts
}

// gokaPlacement places records as goka's processor does: a table record
// in the partition of the input it was decided for (Partition set), any
// other by its key, with Kafka's murmur2 hash (franz-go's default for
// keyed records).
type gokaPlacement struct{}

func (gokaPlacement) ForTopic(topic string) kgo.TopicPartitioner {
	return placement{byKey: kgo.StickyKeyPartitioner(nil).ForTopic(topic)}
}

type placement struct{ byKey kgo.TopicPartitioner }

func (pl placement) RequiresConsistency(*kgo.Record) bool { return true }
func (pl placement) Partition(r *kgo.Record, n int) int {
	if r.Partition >= 0 {
		return int(r.Partition)
	}
	return pl.byKey.Partition(r, n)
}

// Run consumes, calls the graph's callbacks and commits until ctx ends,
// then commits what it decided and leaves the group.
//
// A Kafka session that fails is closed and a new one begun, with the same
// transactional id and instance id, after a backoff: the new producer id
// fences whatever the old one left open, the group gives the static member
// its partitions back, and the inputs of the transaction that did not
// commit are decided again. Only what a new session cannot mend ends Run:
// an authorization the cluster refuses, a first session that cannot start,
// a callback's Fail.
func (p *Processor) Run(ctx context.Context) error {
	p.ctx = ctx
	if p.marks != nil {
		stopMarks, err := p.marks.start()
		if err != nil {
			return err
		}
		defer stopMarks()
	}
	began := false
	defer func() {
		if began {
			p.leave()
		}
	}()
	backoff := sessionBackoffMin
	for {
		committed, err := p.session(ctx, &began)
		var lost *lostSession
		if ctx.Err() != nil || !errors.As(err, &lost) {
			return err
		}
		if committed {
			backoff = sessionBackoffMin
		}
		if p.opts.OnSessionRestart != nil {
			p.opts.OnSessionRestart(lost.err)
		}
		p.opts.Logger.Warn("the Kafka session failed; a new one begins, and what its open transaction decided is decided again",
			"group", p.group, "err", lost.err, "in", backoff)
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
// is loaded. The first session, which cannot load its producer id before
// began is set, fails Run: the cluster is unreachable or refuses it.
func (p *Processor) session(ctx context.Context, began *bool) (committed bool, err error) {
	p.mu.Lock()
	p.failed = nil
	p.mu.Unlock()
	p.joined.Store(false)
	p.recovery.begin()
	sess, err := kgo.NewGroupTransactSession(p.ClientOptions()...)
	if err != nil {
		return false, fmt.Errorf("group %s: %w", p.group, err)
	}
	defer p.awaitJoin()()
	p.mu.Lock()
	p.sess = sess
	p.mu.Unlock()
	defer func() {
		sess.AllowRebalance()
		sess.Close()
		p.closeAll()
	}()
	// Loading the producer id fences a predecessor with this transactional
	// id now: its open transaction aborts, so the group's offsets are
	// stable when the partitions are assigned.
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		err = fmt.Errorf("group %s: initializing the transactional producer: %w", p.group, err)
		if !*began {
			return false, err
		}
		return false, sessionLost(err)
	}
	p.recovery.phase(PhaseFenced, "transactional producer ready; what a predecessor with this transactional id left open is aborted")
	*began = true
	for {
		if err := sess.Begin(); err != nil {
			return committed, sessionLost(fmt.Errorf("group %s: beginning a transaction: %w", p.group, err))
		}
		tx := p.newTransaction(ctx)
		ended, stopping, err := tx.run()
		committed = committed || ended
		sess.AllowRebalance()
		if err != nil || stopping {
			return committed, err
		}
	}
}

// leave takes this instance out of its group once it stopped, so that its
// partitions move to the others now: a static member's client does not
// leave on closing.
func (p *Processor) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	cl, err := kgo.NewClient(p.clientFor("leave")...)
	if err == nil {
		defer cl.Close()
		var left kadm.LeaveGroupResponses
		left, err = kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(p.group).InstanceIDs(p.opts.TransactionalID).Reason("stopping"))
		if err == nil {
			err = left.Error()
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		p.opts.Logger.Warn("leaving the group; its partitions move after the session timeout", "group", p.group, "err", err)
	}
}

// Held are the partitions this instance holds, sorted.
func (p *Processor) Held() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.parts))
}

// MemberID is this instance's member id in its group, "" while it has
// not joined.
func (p *Processor) MemberID() string {
	p.mu.Lock()
	sess := p.sess
	p.mu.Unlock()
	if sess == nil {
		return ""
	}
	id, _ := sess.Client().GroupMetadata()
	return id
}

// clientFor are the options of the processor's client of role.
func (p *Processor) clientFor(role string) []kgo.Opt {
	if p.opts.ClientFor != nil {
		return p.opts.ClientFor(role)
	}
	return slices.Clone(p.opts.Client)
}
