package ingest

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests       *prometheus.CounterVec
	rejections     *prometheus.CounterVec
	ephemeral      *prometheus.CounterVec
	inFlight       prometheus.Gauge
	produceLatency prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_ingest_requests_total",
			Help: "Webhook requests by stream and HTTP status.",
		}, []string{"stream", "status"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_ingest_rejections_total",
			Help: "Rejected webhooks by stream and reason (signature_*, json, schema, too_large, unavailable...).",
		}, []string{"stream", "reason"}),
		ephemeral: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_ingest_ephemeral_total",
			Help: "Accepted ephemeral signals (e.g. chat typing) by stream and type: routed to <stream>.ephemeral, never decided or stored, counted here.",
		}, []string{"stream", "type"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "driftguard_ingest_in_flight_requests",
			Help: "Webhook requests being served.",
		}),
		produceLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "driftguard_ingest_produce_seconds",
			Help:    "Time from produce to the broker's ack (or the deadline).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.rejections, m.ephemeral, m.inFlight, m.produceLatency)
	}
	return m
}

// acceptedCounter is the 202 series of a stream the edge serves. It also
// makes the 503 series, and their reason's, exist from the start at 0: the
// alert on 503s and the dashboard's rates then see a stream before its
// first failure. Other statuses appear when first served.
func (m *metrics) acceptedCounter(stream string) prometheus.Counter {
	m.requests.WithLabelValues(stream, strconv.Itoa(http.StatusServiceUnavailable))
	m.rejections.WithLabelValues(stream, "unavailable")
	return m.requests.WithLabelValues(stream, strconv.Itoa(http.StatusAccepted))
}

// observe counts a request but an accepted one of a known stream, which
// its stream's bound counter counts; unknown stream names are folded into
// one label so a scanner cannot blow up the series count.
func (m *metrics) observe(stream string, res result, known bool) {
	if !known {
		stream = "unknown"
	}
	m.requests.WithLabelValues(stream, strconv.Itoa(res.status)).Inc()
	if res.reason != "" {
		m.rejections.WithLabelValues(stream, res.reason).Inc()
	}
}
