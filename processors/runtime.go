package processors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/processors/eos"
)

// Runtime is a stream's processor as `driftguard process` runs it: the
// stream's goka group graph (Graph) run exactly once by package eos, its
// timers visited every TimerTick at the input watermark, and its consumer
// lag read beside, apart from the loop.
type Runtime struct {
	h    *handler
	proc *eos.Processor
	conn kafka.Conn
	opts RuntimeOptions
	// mu is held by each callback and at each transaction's end: the
	// running transaction's decisions (h.counts) are counted once it
	// commits, and a test stalls the loop by holding it.
	mu sync.Mutex
}

// RuntimeOptions configure the runtime. Zero values mean defaults.
type RuntimeOptions struct {
	// TransactionalID names this instance's transactions and is its static
	// group member id: stable across restarts of one instance, unique
	// among the live instances of a group. Required.
	TransactionalID string
	// Storage builds a table partition's local storage; nil keeps tables
	// in memory, rebuilt from the changelog at every assignment.
	Storage storage.Builder
	// CommitEvery is how long one transaction gathers decisions. Default
	// 100ms.
	CommitEvery time.Duration
	// TimerTick is how often timers are visited. Default 1s.
	TimerTick time.Duration
	// FetchMinBytes and FetchMaxWait: a fetch answers once the broker has
	// this many bytes of input, or after this long. Zero: one byte, 5s.
	FetchMinBytes int
	FetchMaxWait  time.Duration
	// Client adds franz-go options (tests inject faults with them).
	Client []kgo.Opt
}

// Defaults of RuntimeOptions, and the producer's buffers, measured with
// BenchmarkProcessorAgainstRawConsumer: it buffers at most this many
// records and bytes. A transaction's writes linger until its end
// (eos.Processor.ClientOptions).
const (
	producerBufferedRecords = 100_000
	producerBufferedBytes   = 16 << 20
	defaultTimerTick        = time.Second
	// transactionTimeout bounds how long an instance that died mid
	// transaction holds back read_committed readers of its partitions when
	// no instance with its transactional id comes back to fence it.
	transactionTimeout = 30 * time.Second
)

// graph is the stream's processor as a goka group graph: the input
// `<stream>.in` decided by process, the timer visitor tick, the group
// table `<stream>-table` of entityCodec values, and the outputs it emits
// to. Its group is the table's name less goka's "-table" suffix; the
// consumer group, under kafka.group_prefix, is the runtime's.
func (h *handler) graph(process, tick goka.ProcessCallback) *goka.GroupGraph {
	edges := []goka.Edge{
		goka.Input(goka.Stream(h.names.In), new(codec.Bytes), process),
		goka.Visitor(tickVisitor, tick),
		goka.Persist(entityCodec{}),
		goka.Output(goka.Stream(h.names.Outcomes), new(codec.Bytes)),
		goka.Output(goka.Stream(h.names.State), new(codec.Bytes)),
		goka.Output(goka.Stream(h.names.DLQ), new(codec.Bytes)),
	}
	if h.stream.Policy == config.PolicyGapless {
		edges = append(edges, goka.Output(goka.Stream(h.names.Replay), new(codec.Bytes)))
	}
	return goka.DefineGroup(goka.Group(strings.TrimSuffix(h.names.Table, "-table")), edges...)
}

// NewRuntime builds the runtime of stream s.
func NewRuntime(conn kafka.Conn, s *config.Stream, opts Options, ropts RuntimeOptions) (*Runtime, error) {
	if ropts.TransactionalID == "" {
		return nil, errors.New("processor runtime: a transactional id is required")
	}
	if ropts.TimerTick <= 0 {
		ropts.TimerTick = defaultTimerTick
	}
	h := newHandler(s, opts)
	h.holdCounts = true
	r := &Runtime{h: h, conn: conn, opts: ropts}
	graph := h.graph(func(ctx goka.Context, msg any) {
		r.mu.Lock()
		defer r.mu.Unlock()
		h.process(ctx, msg)
	}, func(ctx goka.Context, meta any) {
		r.mu.Lock()
		defer r.mu.Unlock()
		h.tick(ctx, meta)
	})
	proc, err := eos.New(graph, eos.Options{
		ClientFor:          r.clientOptions,
		TransactionalID:    ropts.TransactionalID,
		Group:              h.group,
		Storage:            ropts.Storage,
		CommitEvery:        ropts.CommitEvery,
		TransactionTimeout: transactionTimeout,
		Logger:             h.opts.Logger,
		ViewTopics:         []string{h.names.State},
		OnEnd:              r.ended,
		OnSessionRestart: func(error) {
			if m := h.opts.Metrics; m != nil {
				m.sessionRestarts.WithLabelValues(s.Name).Inc()
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("processor %s: %w", s.Name, err)
	}
	r.proc = proc
	return r, nil
}

// clientOptions are the franz-go options of the runtime's client of role:
// internal/kafka's (the connection, acks=all, idempotence), the fetch and
// batching settings, and its own client id (the session's is
// driftguard-process-<stream>) and metrics, one kprom per client.
func (r *Runtime) clientOptions(role string) []kgo.Opt {
	id := "process-" + r.h.stream.Name
	if role != "session" {
		id += "-" + role
	}
	return kafka.Options(r.conn, append([]kgo.Opt{
		kafka.FetchMinBytes(r.opts.FetchMinBytes),
		kgo.FetchMaxWait(cmp.Or(r.opts.FetchMaxWait, 5*time.Second)),
		kgo.MaxBufferedRecords(producerBufferedRecords), kgo.MaxBufferedBytes(producerBufferedBytes),
	}, append(r.h.opts.Metrics.clientOpts(id), r.opts.Client...)...)...)
}

// ClientOptions are the franz-go options of the runtime's group transact
// session.
func (r *Runtime) ClientOptions() []kgo.Opt { return r.proc.ClientOptions() }

// ChangelogReaderOptions are the franz-go options of the client that
// restores table partition p from offset from.
func (r *Runtime) ChangelogReaderOptions(p int32, from int64) []kgo.Opt {
	return r.proc.ChangelogReaderOptions(p, from)
}

// Recovered reports whether the instance has joined its group and holds
// every table partition it was given.
func (r *Runtime) Recovered() bool { return r.proc.Recovered() }

// ended counts, after a transaction, its decisions once it committed at
// at, their latency to then, and the time of the commit. An aborted
// transaction's are not counted: readers never see them, and its inputs
// are decided, and counted, again.
func (r *Runtime) ended(committed bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !committed {
		r.h.counts.reset()
		return
	}
	m := r.h.opts.Metrics
	m.add(r.h.stream.Name, &r.h.counts, at)
	if m != nil {
		m.lastCommit.WithLabelValues(r.h.stream.Name).Set(float64(at.UnixMilli()) / 1000)
	}
}

// Run decides the stream until ctx ends. Beside the processor, a client
// of its own reads the input's offsets every TimerTick: the consumer lag,
// and the watermark the timers are visited at. Both keep moving while a
// session stalls or is begun anew.
func (r *Runtime) Run(ctx context.Context) error {
	cl, err := kafka.NewClient(r.conn, r.h.opts.Metrics.clientOpts("process-"+r.h.stream.Name+"-lag")...)
	if err != nil {
		return fmt.Errorf("processor %s: %w", r.h.stream.Name, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.h.watchLag(runCtx, adm, r.opts.TimerTick) }()
	go func() {
		defer wg.Done()
		r.visitTimers(runCtx, &watermark{adm: adm, topic: r.h.names.In, group: r.h.group}, r.opts.TimerTick)
	}()
	defer func() {
		stop()
		wg.Wait()
	}()
	return r.proc.Run(ctx)
}

// visitTimers visits every key's timers each tick at watermark w, until
// ctx ends. A visit cut short is simply repeated at the next tick:
// deadlines live in the table.
func (r *Runtime) visitTimers(ctx context.Context, w *watermark, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.h.timerTick(ctx, w, func(safeMs int64) error { return r.proc.VisitAll(ctx, tickVisitor, safeMs) })
		if err != nil && ctx.Err() == nil {
			r.h.opts.Logger.Debug("timer visit not completed; repeated at the next tick", "stream", r.h.stream.Name, "err", err)
		}
	}
}
