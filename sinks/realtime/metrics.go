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

	// Clients' writes (send.go).
	sendAck     *prometheus.HistogramVec
	sendLimited *prometheus.CounterVec
	admission   *admissionMetrics
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
			Name: "driftguard_bridge_auth_failures_total", Help: "Requests refused by status (401 no valid token, 403 not allowed, 400 a token in the query string outside the events endpoint).",
		}, []string{"stream", "status"}),
		history: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_chat_history_reads_total", Help: "Messages older than bridge.chat_window read back from the stream's outcomes for chat catch-up.",
		}, []string{"stream"}),
	}
	m.admission = newAdmissionMetrics(reg)
	if reg != nil {
		reg.MustRegister(m.clients, m.sent, m.resets, m.gone, m.snapshot, m.catchUp, m.entities, m.dropped, m.overLimit, m.forbidden, m.history)
	}
	m.writeMetrics(reg)
	return m
}

// writeMetrics are those of clients' writes: how long a send waits for
// its acknowledgement, by what it became, and the sends refused by
// bridge.send_rate.
func (m *metrics) writeMetrics(reg prometheus.Registerer) {
	m.sendAck = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "driftguard_bridge_send_ack_seconds",
		Help:    "Time from a client's send to the bridge's answer, by outcome: applied (201), duplicate (200, a retry), rejected, pending (202, no decision within bridge.send_wait), error (503, not produced).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"stream", "outcome"})
	m.sendLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "driftguard_bridge_sends_limited_total", Help: "Sends answered 429 by bridge.send_rate (per user or per conversation).",
	}, []string{"stream"})
	if reg != nil {
		reg.MustRegister(m.sendAck, m.sendLimited)
	}
}

// serveWrites makes an assign stream's write series exist from the start.
func (m *metrics) serveWrites(stream string) {
	m.sendLimited.WithLabelValues(stream)
	for _, outcome := range []string{"applied", "duplicate", "rejected", "pending", "error"} {
		m.sendAck.WithLabelValues(stream, outcome)
	}
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
	m.admission.serve(stream)
	for _, status := range []string{"401", "403"} {
		m.forbidden.WithLabelValues(stream, status)
	}
}

// typingMetrics are the typing signals' (typing.go), by stream.
type typingMetrics struct {
	// posts are the members' POSTs by outcome: produced, coalesced (within
	// bridge.typing_rate of the last one), refused (not a member), failed
	// (the produce did not complete).
	posts *prometheus.CounterVec
	// read are the signals read from <stream>.ephemeral by outcome: shown
	// (handed to the clients that may see it), stale (read after its
	// expiry), not_member, coalesced, undecodable.
	read *prometheus.CounterVec
	// readDelay is how long after it was produced each signal was read:
	// the bridge's lag on typing, seen before it reaches the TTL.
	readDelay *prometheus.HistogramVec
	// sent are the typing events written to clients; dropped those a
	// client did not get, by reason: queue_full (a client behind on its
	// writes), expired (its expiry passed before the write).
	sent    *prometheus.CounterVec
	dropped *prometheus.CounterVec
}

// Outcomes and reasons of the typing metrics.
var (
	typingPostOutcomes = []string{"produced", "coalesced", "refused", "failed"}
	typingReadOutcomes = []string{"shown", "stale", "not_member", "coalesced", "undecodable"}
	typingDropReasons  = []string{"queue_full", "expired"}
)

func newTypingMetrics(reg prometheus.Registerer) *typingMetrics {
	m := &typingMetrics{
		posts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_typing_posts_total", Help: "Typing POSTs by outcome: produced to <stream>.ephemeral, coalesced (within bridge.typing_rate), refused (not a member), failed (not acked in time).",
		}, []string{"stream", "outcome"}),
		read: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_typing_read_total", Help: "Typing signals read from <stream>.ephemeral by outcome: shown, stale (past their expiry when read), not_member, coalesced, undecodable.",
		}, []string{"stream", "outcome"}),
		readDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "driftguard_bridge_typing_read_delay_seconds", Help: "Time from a typing signal's production (its dg-received-at, else the record's time) to the bridge reading it from <stream>.ephemeral; a signal read bridge.typing_ttl after it is stale.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10},
		}, []string{"stream"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_typing_sent_total", Help: "SSE typing events written to clients.",
		}, []string{"stream"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_typing_dropped_total", Help: "Typing events a client did not get, by reason: queue_full (the client was behind on its writes; typing is dropped, never a reason to reset), expired (past its expiry before the write).",
		}, []string{"stream", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.posts, m.read, m.readDelay, m.sent, m.dropped)
	}
	return m
}

// serve makes a typing stream's series exist at 0 from the start.
func (m *typingMetrics) serve(stream string) {
	for _, o := range typingPostOutcomes {
		m.posts.WithLabelValues(stream, o)
	}
	for _, o := range typingReadOutcomes {
		m.read.WithLabelValues(stream, o)
	}
	m.readDelay.WithLabelValues(stream)
	m.sent.WithLabelValues(stream)
	for _, r := range typingDropReasons {
		m.dropped.WithLabelValues(stream, r)
	}
}

// admissionMetrics are those of admission and catch-up (admission.go,
// catchup.go).
type admissionMetrics struct {
	reconnects     *prometheus.CounterVec
	liveSeconds    *prometheus.HistogramVec
	refused        *prometheus.CounterVec
	catchupReaders *prometheus.GaugeVec
	catchupWaiting *prometheus.GaugeVec
	sweepClients   *prometheus.HistogramVec
}

func newAdmissionMetrics(reg prometheus.Registerer) *admissionMetrics {
	m := &admissionMetrics{
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_reconnects_total", Help: "Events requests (each resumes from a cursor) by outcome: resumed (caught up and live), gone (410), reset (event: reset before live), refused (503 or 429, to try again later).",
		}, []string{"stream", "outcome"}),
		liveSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "driftguard_bridge_reconnect_live_seconds", Help: "Time from an events request's arrival to the moment it had caught up and was live.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 13),
		}, []string{"stream"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_bridge_admission_refused_total", Help: "SSE streams refused by reason: busy (over bridge.accept_rate), full (at bridge.max_connections), too_many_connections (at bridge.max_connections_per_user), too_many_streams (at bridge.max_streams_per_token).",
		}, []string{"stream", "reason"}),
		catchupReaders: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "driftguard_bridge_catchup_readers", Help: "Kafka readers serving clients that resume from cursors older than the log (at most bridge.catchup_readers a stream).",
		}, []string{"stream"}),
		catchupWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "driftguard_bridge_catchup_waiting", Help: "Clients waiting for a catch-up reader to take them.",
		}, []string{"stream"}),
		sweepClients: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "driftguard_bridge_catchup_sweep_clients", Help: "Clients each catch-up read of the state topic served (its count is the reads, its sum the catch-ups).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}, []string{"stream"}),
	}
	if reg != nil {
		reg.MustRegister(m.reconnects, m.liveSeconds, m.refused, m.catchupReaders, m.catchupWaiting, m.sweepClients)
	}
	return m
}

func (m *admissionMetrics) serve(stream string) {
	for _, o := range []string{outcomeResumed, outcomeGone, outcomeReset, outcomeRefused} {
		m.reconnects.WithLabelValues(stream, o)
	}
	for _, r := range []string{refusedBusy, refusedFull, refusedUser} {
		m.refused.WithLabelValues(stream, r)
	}
	m.liveSeconds.WithLabelValues(stream)
	m.catchupReaders.WithLabelValues(stream)
	m.catchupWaiting.WithLabelValues(stream)
	m.sweepClients.WithLabelValues(stream)
}
