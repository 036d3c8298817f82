package ingest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/telemetry"
)

// Service serves the webhook edge. Its /metrics, /healthz and /readyz go
// on the telemetry listener the caller serves Ops on, apart from the
// public one, so the internet sees neither metrics nor dependency errors.
type Service struct {
	cfg *config.Config
	// kc and kcErr are the Kafka connection of kafka.tls and kafka.sasl,
	// or why it could not be made (returned by Run).
	kc      kafka.Conn
	kcErr   error
	log     *slog.Logger
	ops     *telemetry.Ops
	ln      net.Listener
	opsHere bool
	now     func() time.Time
}

// ServiceOptions configure the ingest service. Zero values mean defaults.
type ServiceOptions struct {
	// Config is the loaded configuration; required.
	Config *config.Config
	// Brokers default to the configured ones.
	Brokers []string
	// Logger; nil discards.
	Logger *slog.Logger
	// Ops receives the edge's metrics and readiness checks; nil means ones
	// of its own.
	Ops *telemetry.Ops
	// Listener is used instead of listening on http.addr.
	Listener net.Listener
	// OpsOnListener serves Ops with the webhooks, on one listener (dev,
	// where everything is on loopback).
	OpsOnListener bool
	// Now is the edge's clock (received_at, the signature window); nil
	// means time.Now. Tests move it to show what days later looks like.
	Now func() time.Time
}

// NewService builds the ingest service.
func NewService(opts ServiceOptions) *Service {
	s := &Service{cfg: opts.Config, log: telemetry.OrDiscard(opts.Logger), ops: opts.Ops,
		ln: opts.Listener, opsHere: opts.OpsOnListener, now: opts.Now}
	s.kc, s.kcErr = kafka.Connect(opts.Config, opts.Brokers)
	if s.ops == nil {
		s.ops = telemetry.NewOps()
	}
	// Not ready until the webhook port accepts: a load balancer that sends
	// traffic on /readyz alone must not meet a refused connection.
	s.ops.AddReadiness(readinessCheck, func(context.Context) error { return errNotListening })
	return s
}

// readinessCheck names the edge's readiness check. Ready means this
// process answers webhooks; it does not ask the broker. While the broker
// is away the edge stays in its Service and answers 503 with Retry-After
// itself (counted as driftguard_ingest_requests_total{status="503"} and
// rejections{reason="unavailable"}): were every replica taken out of the
// Service instead, publishers would meet a load balancer's error without
// Retry-After, or no answer at all.
const readinessCheck = "webhooks"

var errNotListening = errors.New("the webhook port is not listening")

// Name implements service.Service.
func (s *Service) Name() string { return "ingest" }

// ProducerOptions are the ingest producer's franz-go options, besides
// internal/kafka's (acks=all, idempotence, murmur2 placement), lingering
// linger (kafka.linger) so that one produce request carries the webhooks
// of that moment, and records that arrive while one is in flight are
// batched anyway. The batch limit is the
// topics' max.message.bytes, so that the producer sends every record the
// broker would take, and the edge refuses the others first (413). The
// buffer needs no byte bound of its own: every record's body stays in the
// edge's in-flight budget until the producer is done with it, so the
// producer holds no more than http.max_in_flight_bytes of bodies; its
// record bound (franz-go's 50,000) is reached first only when bodies
// average under 336 bytes at the default budget, and then a request waits
// for room within its produce deadline.
func ProducerOptions(linger time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.ProducerLinger(linger),
		kgo.ProducerBatchMaxBytes(record.ProducerBatchLimit(record.DefaultMaxMessageBytes)),
	}
}

// Run serves until ctx is done.
func (s *Service) Run(ctx context.Context) error {
	if s.kcErr != nil {
		return s.kcErr
	}
	cl, err := kafka.NewClient(s.kc, append(ProducerOptions(s.cfg.Kafka.Linger), kafka.ClientMetrics(s.ops.Registry, "ingest")...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	// A refused credential or ACL stops the edge at start, with the
	// setting named, instead of answering 503 to every webhook.
	if err := s.kc.Check(ctx, cl, kafka.Needs(kafka.ComponentIngest, s.cfg)); err != nil {
		return err
	}
	trusted, err := s.cfg.HTTP.TrustedPrefixes()
	if err != nil {
		return err
	}
	h, err := NewHandler(s.cfg.StreamList(), cl, Options{
		ProduceTimeout:            s.cfg.Kafka.ProduceTimeout,
		Logger:                    s.log,
		Registerer:                s.ops.Registry,
		Now:                       s.now,
		MaxInFlightBytes:          s.cfg.HTTP.MaxInFlightBytes,
		MaxInFlightBytesPerSource: s.cfg.HTTP.MaxInFlightBytesPerSource,
		MaxPerSource:              s.cfg.HTTP.MaxPerSource,
		TrustedProxies:            trusted,
		MaxConnections:            s.cfg.HTTP.MaxConnections,
		MaxConnectionsPerSource:   s.cfg.HTTP.MaxConnectionsPerSource,
		MinBodyRate:               s.cfg.HTTP.MinBodyRate,
		ReadTimeout:               s.cfg.HTTP.ReadTimeout,
		ExplainKafka:              s.kc.Explain,
		Naming:                    s.cfg.Kafka.Naming(),
		RefusalLogLines:           s.cfg.HTTP.RefusalLogLines,
		RefusalLogInterval:        s.cfg.HTTP.RefusalLogInterval,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	h.Register(mux)
	if s.opsHere {
		s.ops.Register(mux)
	}
	ln := s.ln
	if ln == nil {
		if ln, err = net.Listen("tcp", s.cfg.HTTP.Addr); err != nil {
			return err
		}
	}
	s.ops.AddReadiness(readinessCheck, func(context.Context) error { return nil })
	// Once the listener is closed (shutdown, or a serve error), the port
	// answers nothing: not ready again.
	defer s.ops.AddReadiness(readinessCheck, func(context.Context) error { return errNotListening })
	s.log.Info("ingest listening", "addr", ln.Addr().String(), "streams", s.cfg.StreamNames(),
		"max_in_flight_bytes", s.cfg.HTTP.MaxInFlightBytes, "max_in_flight_bytes_per_source", s.cfg.HTTP.MaxInFlightBytesPerSource,
		"max_per_source", s.cfg.HTTP.MaxPerSource, "max_connections", s.cfg.HTTP.MaxConnections,
		"max_connections_per_source", s.cfg.HTTP.MaxConnectionsPerSource, "idle_timeout", s.cfg.HTTP.IdleTimeout,
		"min_body_rate", s.cfg.HTTP.MinBodyRate)
	return telemetry.ServeListener(ctx, h.Listener(ln), mux, s.log, telemetry.WithReadTimeout(s.cfg.HTTP.ReadTimeout),
		telemetry.WithIdleTimeout(s.cfg.HTTP.IdleTimeout), telemetry.WithConnState(h.ConnState))
}
