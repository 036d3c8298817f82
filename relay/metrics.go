package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/driftguard/driftguard/internal/telemetry"
)

// metrics are the relay's Prometheus series, each by stream.
type metrics struct {
	sent, refused, giveUps, superseded, duplicates, deadLetters *prometheus.CounterVec
	failures                                                    *prometheus.CounterVec
	inFlight                                                    *prometheus.GaugeVec
}

func newMetrics(ops *telemetry.Ops) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append([]string{"stream"}, labels...))
	}
	m := &metrics{
		sent:        counter("driftguard_replay_requests_sent_total", "Replay requests the publisher accepted (2xx)."),
		failures:    counter("driftguard_replay_failures_total", "Failed POSTs of replay requests by the publisher's status (none: no answer); 5xx, 429 and none are retried.", "status"),
		refused:     counter("driftguard_replay_refused_total", "Replay requests the publisher refused for good (a 4xx other than 429), sent to the DLQ."),
		giveUps:     counter("driftguard_replay_give_ups_total", "Replay requests not delivered within replay.give_up_after, sent to the DLQ."),
		superseded:  counter("driftguard_replay_superseded_total", "Replay requests not sent because a newer one for the same key came in the same batch, or the publisher accepted a later gap of the key within replay.resend_after."),
		duplicates:  counter("driftguard_replay_duplicates_total", "Replay requests not sent because the publisher accepted the same gap within replay.resend_after."),
		deadLetters: counter("driftguard_replay_dead_letters_total", "Replay requests written to the DLQ (refused, given up or undecodable)."),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "driftguard_replay_in_flight",
			Help: "Replay request POSTs waiting for the publisher's answer (at most one per key).",
		}, []string{"stream"}),
	}
	m.register(ops)
	return m
}

// register adds the series to ops; nil skips them.
func (m *metrics) register(ops *telemetry.Ops) {
	if ops != nil {
		ops.Registry.MustRegister(m.sent, m.failures, m.refused, m.giveUps, m.superseded, m.duplicates, m.deadLetters, m.inFlight)
	}
}

// init makes stream's series exist at 0, so that an alert on their rate
// sees them before the first request.
func (m *metrics) init(stream string) {
	for _, c := range []*prometheus.CounterVec{m.sent, m.refused, m.giveUps, m.superseded, m.duplicates, m.deadLetters} {
		c.WithLabelValues(stream)
	}
	m.inFlight.WithLabelValues(stream)
	// Failures are by status; "none" (no answer) stands for them all
	// until one happens.
	m.failures.WithLabelValues(stream, statusLabel(0))
}
