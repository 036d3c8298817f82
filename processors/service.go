package processors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/topics"
	"github.com/lovoo/goka/storage"
)

// Service runs the processor of every stream in the catalogue.
type Service struct {
	cfg *config.Config
	// kc and kcErr are the Kafka connection of kafka.tls and kafka.sasl,
	// or why it could not be made (returned by Run).
	kc      kafka.Conn
	kcErr   error
	log     *slog.Logger
	ops     *telemetry.Ops
	metrics *Metrics
	// dataDir for table storage; empty keeps tables in memory.
	dataDir string
	// noCreate: check the topics, create none.
	noCreate bool
}

// ServiceOptions configure the processors service. Zero values mean
// defaults.
type ServiceOptions struct {
	// Config is the loaded configuration; required.
	Config *config.Config
	// Brokers default to the configured ones.
	Brokers []string
	// Logger; nil discards.
	Logger *slog.Logger
	// Ops receives the metrics and the readiness check; nil skips them.
	Ops *telemetry.Ops
	// InMemoryTables keeps goka's tables in memory, rebuilt from their
	// changelogs at every start (dev, tests). By default they are in
	// LevelDB under data_dir/tables.
	InMemoryTables bool
	// NoCreate creates no topic: the processors check that every topic
	// they need exists, co-partitioned, and refuse to start naming each
	// one missing (`process --no-create`, where only an admin may create
	// topics).
	NoCreate bool
}

// NewService builds the processors service.
func NewService(opts ServiceOptions) *Service {
	s := &Service{cfg: opts.Config, log: telemetry.OrDiscard(opts.Logger), ops: opts.Ops, noCreate: opts.NoCreate}
	s.kc, s.kcErr = kafka.Connect(opts.Config, opts.Brokers)
	if s.ops != nil {
		s.metrics = NewMetrics(s.ops.Registry)
	}
	if !opts.InMemoryTables {
		s.dataDir = s.cfg.DataDir
	}
	return s
}

// Unsupported says why this release cannot decide the stream's events, or
// returns "" when it can.
func Unsupported(s *config.Stream) string {
	switch {
	case len(s.KeyByType) > 0 && !s.Joined():
		return "child events keyed by another field need a parent join (streams." + s.Name + ".parent)"
	}
	return ""
}

// Name implements service.Service.
func (s *Service) Name() string { return "process" }

// Run creates (unless NoCreate) and checks the topics, refusing to start
// when one is missing or a stream's topics are not co-partitioned, then
// runs one goka group per stream.
func (s *Service) Run(ctx context.Context) error {
	if s.kcErr != nil {
		return s.kcErr
	}
	cl, err := kafka.NewClient(s.kc, s.metrics.clientOpts("process")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	need := kafka.Needs(kafka.ComponentProcess, s.cfg)
	for _, name := range s.cfg.StreamNames() {
		need.TransactionalIDs = append(need.TransactionalIDs, s.cfg.Kafka.Naming().TransactionalID(s.cfg.Processing.InstanceID, name))
	}
	if err := s.kc.Check(ctx, cl, need); err != nil {
		return err
	}
	statuses, err := kafka.EnsureTopics(ctx, cl, s.cfg, !s.noCreate)
	if err != nil {
		return fmt.Errorf("topics: %w", s.kc.Explain(err))
	}
	// Weaker than configured, another retention or configs this principal
	// may not read are said, not refused: an operator may have lowered
	// min.insync.replicas to keep accepting through an outage, and none of
	// them changes a decision.
	if err := errors.Join(topics.Weak(statuses), topics.Drift(statuses), topics.Unchecked(statuses)); err != nil {
		s.log.Warn("topics differ from the catalogue; `driftguard topics --check` lists them", "err", err)
	}
	var procs []*Runtime
	var services []service.Service
	var running []string
	store := storage.MemoryBuilder()
	if s.dataDir != "" {
		store = tableStorageBuilder(filepath.Join(s.dataDir, "tables"))
	}
	names := s.cfg.Kafka.Naming()
	for _, name := range s.cfg.StreamNames() {
		stream := s.cfg.Streams[name]
		if reason := Unsupported(stream); reason != "" {
			// Its webhooks are accepted and kept in <stream>.in; a release
			// that decides them starts from the oldest offset.
			s.log.Warn("stream not processed in this release", "stream", name, "reason", reason)
			continue
		}
		running = append(running, name)
		p, err := NewRuntime(s.kc, stream, Options{Logger: s.log, Metrics: s.metrics, Naming: names}, RuntimeOptions{
			TransactionalID: names.TransactionalID(s.cfg.Processing.InstanceID, name),
			Storage:         store,
			CommitEvery:     s.cfg.Processing.CommitInterval,
			TimerTick:       s.cfg.Processing.TimerTick,
			FetchMinBytes:   s.cfg.Processing.FetchMinBytes,
			FetchMaxWait:    s.cfg.Processing.FetchMaxWait,
		})
		if err != nil {
			return fmt.Errorf("processor %s: %w", name, err)
		}
		procs = append(procs, p)
		// The stream's work carries its name in continuous profiles.
		services = append(services, service.Func{Label: "processor " + name, Fn: func(ctx context.Context) error {
			return telemetry.Labeled(ctx, p.Run, "stream", name)
		}})
	}
	if s.ops != nil {
		s.ops.AddReadiness("processors", func(context.Context) error {
			for i, p := range procs {
				if !p.Recovered() {
					return fmt.Errorf("processor %s has not recovered its table yet", running[i])
				}
			}
			return nil
		})
	}
	s.log.Info("processors starting", "streams", running, "brokers", s.kc.Brokers)
	err = service.RunAll(ctx, services...)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
