// Package relay is `driftguard relay`: it reads the replay requests the
// processors of gapless streams write to `<stream>.replay` and POSTs each
// gap's to the stream's publisher (replay.url) as a Standard Webhooks
// delivery, so that a publisher that only speaks HTTP learns of a gap and
// sends the missing steps again.
//
// Each stream has its own loop, consumer group and transactional id, so a
// publisher that is down holds back its own stream only. A loop polls a
// batch and sends the newest request of each key in it (older ones of the
// same key are superseded: the processor asks from its current first
// missing sequence, which covers them) unless the publisher accepted its
// gap, or a later one of the key, within replay.resend_after (gaps.go);
// at most one request per key is in flight. Then, in one Kafka
// transaction, it commits the batch's offsets with a delivery record per
// request (to `<stream>.replay`, marked with record.HeaderReplayDelivery)
// and a dead letter for each request that could not be delivered. A
// request whose delivery is recorded is never sent again; one sent before
// a crash and not yet recorded is sent again. Every request for a gap
// carries the gap's webhook-id (record.ReplayWebhookID), which the
// publisher deduplicates.
package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
)

// Options configure the relay. Zero values mean defaults.
type Options struct {
	// Config is the loaded configuration; required. Streams with a
	// replay.url are relayed.
	Config *config.Config
	// Brokers default to the configured ones.
	Brokers []string
	// Logger; nil discards.
	Logger *slog.Logger
	// Ops receives the metrics; nil skips them.
	Ops *telemetry.Ops
	// Transport carries the POSTs; nil is http.DefaultTransport.
	Transport http.RoundTripper
}

// Relay sends the replay requests of every stream with a replay.url.
type Relay struct {
	loops []*loop
	log   *slog.Logger
	m     *metrics
}

// New builds the relay, reading each stream's signing secret now so that
// a missing secret file stops it at start.
func New(opts Options) (*Relay, error) {
	conn, err := kafka.Connect(opts.Config, opts.Brokers)
	if err != nil {
		return nil, err
	}
	log := telemetry.OrDiscard(opts.Logger)
	m := newMetrics(opts.Ops)
	r := &Relay{log: log, m: m}
	for _, s := range opts.Config.StreamList() {
		if s.Policy == config.PolicyGapless {
			// Every stream that asks for replays has its series, at 0
			// where no replay.url sends them: a dashboard shows it, and
			// an alert on the rate sees it from the start.
			m.init(s.Name)
		}
		if !s.Replay.Enabled() {
			continue
		}
		secret, err := s.Replay.SigningSecret()
		if err != nil {
			return nil, fmt.Errorf("in streams.%s.%w", s.Name, err)
		}
		l, err := newLoop(opts.Config, s, conn, secret, opts.Transport, m, log)
		if err != nil {
			return nil, err
		}
		r.loops = append(r.loops, l)
	}
	return r, nil
}

// Observe registers the relay's metrics in ops, for a relay built
// before its process's telemetry (Options.Ops nil).
func (r *Relay) Observe(ops *telemetry.Ops) { r.m.register(ops) }

// Name implements service.Service.
func (r *Relay) Name() string { return "relay" }

// Run relays until ctx is done; without a stream to relay it waits for
// ctx, so that `dev` may run it whatever the catalogue says.
func (r *Relay) Run(ctx context.Context) error {
	if len(r.loops) == 0 {
		r.log.Info("no stream has a replay.url: nothing to relay")
		<-ctx.Done()
		return nil
	}
	services := make([]service.Service, len(r.loops))
	for i, l := range r.loops {
		services[i] = service.Func{Label: "relay " + l.stream.Name, Fn: l.run}
	}
	return service.RunAll(ctx, services...)
}
