package realtime

import "github.com/prometheus/client_golang/prometheus"

// metrics of the bridge, by stream.
type metrics struct {
	// delivery is from a change's durable accept to its SSE write.
	delivery *prometheus.HistogramVec

	clients   *prometheus.GaugeVec
	sent      *prometheus.CounterVec
	resets    *prometheus.CounterVec
	gone      *prometheus.CounterVec
	snapshot  *prometheus.HistogramVec
	catchUp   *prometheus.HistogramVec
	entities  *prometheus.GaugeVec
	dropped   *prometheus.CounterVec
	overLimit *prometheus.GaugeVec
	forbidden *prometheus.CounterVec
	history   *prometheus.CounterVec
}

// newDeliveryHistogram is the bridge's delivery latency, the seed's
// target (p99 under a second), registered on reg unless nil.
func newDeliveryHistogram(reg prometheus.Registerer) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "driftguard_bridge_delivery_seconds",
		Help:    "From a change's durable accept (its event's dg-received-at, the state's updated_at_ms) to the SSE write of it to a live client, per client; changes replayed to a client catching up are not counted.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"stream"})
	if reg != nil {
		reg.MustRegister(h)
	}
	return h
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		delivery: newDeliveryHistogram(reg),
		clients: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "driftguard_bridge_clients", Help: "Clients connected to a stream's events.",
		}, []string{"stream"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_messages_total", Help: "State changes sent to clients as SSE messages.",
		}, []string{"stream"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_resets_total", Help: "Clients sent event: reset and disconnected for falling behind (bridge.client_lag).",
		}, []string{"stream"}),
		gone: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_cursor_gone_total", Help: "Requests answered 410 Gone: a cursor that cannot resume (malformed, another epoch or partition count, below the log start, ahead of the log end).",
		}, []string{"stream"}),
		snapshot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "driftguard_bridge_snapshot_entities", Help: "Entities per snapshot page served.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}, []string{"stream"}),
		catchUp: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "driftguard_bridge_catchup_changes", Help: "Changes a client resuming from a cursor was behind, sent before it went live.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}, []string{"stream"}),
		entities: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "driftguard_bridge_entities", Help: "Entities the bridge holds.",
		}, []string{"stream"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_entities_dropped_total", Help: "New entities not held because the stream is at bridge.max_entities.",
		}, []string{"stream"}),
		overLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "driftguard_bridge_entities_over_limit", Help: "1 while the stream has dropped entities over bridge.max_entities since the bridge began reading it (the bridge serves the others and stays ready), else 0.",
		}, []string{"stream"}),
		forbidden: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_auth_failures_total", Help: "Requests refused by status (401 no valid token, 403 not allowed).",
		}, []string{"stream", "status"}),
		history: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_chat_history_reads_total", Help: "Messages older than bridge.chat_window read back from the stream's outcomes for chat catch-up.",
		}, []string{"stream"}),
	}
	if reg != nil {
		reg.MustRegister(m.clients, m.sent, m.resets, m.gone, m.snapshot, m.catchUp, m.entities, m.dropped, m.overLimit, m.forbidden, m.history)
	}
	return m
}

// serve makes a stream's series exist at 0 from the start, so dashboards
// and alerts see the stream before its first client, reset or refusal.
func (m *metrics) serve(stream string) {
	m.delivery.WithLabelValues(stream)
	m.clients.WithLabelValues(stream)
	m.sent.WithLabelValues(stream)
	m.resets.WithLabelValues(stream)
	m.gone.WithLabelValues(stream)
	m.snapshot.WithLabelValues(stream)
	m.catchUp.WithLabelValues(stream)
	m.entities.WithLabelValues(stream)
	m.dropped.WithLabelValues(stream)
	m.overLimit.WithLabelValues(stream)
	m.history.WithLabelValues(stream)
	for _, status := range []string{"401", "403"} {
		m.forbidden.WithLabelValues(stream, status)
	}
}
