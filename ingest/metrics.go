package ingest

import (
	"net/http"
	"strconv"
	"time"

	"github.com/driftguard/driftguard/internal/connlimit"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests       *prometheus.CounterVec
	rejections     *prometheus.CounterVec
	ephemeral      *prometheus.CounterVec
	inFlight       prometheus.Gauge
	produceLatency prometheus.Histogram
	retryAfter     prometheus.Histogram
	duration       *prometheus.HistogramVec
}

// durationBuckets span a webhook's time at the edge, from a refusal
// answered in a millisecond to a produce that waits out a 5 s
// kafka.produce_timeout and a slow body up to http.read_timeout.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

func newMetrics(reg prometheus.Registerer, b *budget, bl *backlog, conns *connlimit.Limit) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_ingest_requests_total",
			Help: "Webhook requests by stream and HTTP status.",
		}, []string{"stream", "status"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_ingest_rejections_total",
			Help: "Rejected webhooks by stream and reason (signature_*, json, schema, too_large, too_slow, overloaded, source_limit, unavailable...).",
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
		retryAfter: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "driftguard_ingest_retry_after_seconds",
			Help:    "The Retry-After of each 503: how long the oldest record the producer holds had waited for its ack (1 to 60).",
			Buckets: []float64{1, 2, 5, 10, 20, 30, 60},
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "driftguard_ingest_request_duration_seconds",
			Help:    "Time of each webhook request by stream and HTTP status, from its routing to its reply (the body's read included): what publishers wait.",
			Buckets: durationBuckets,
		}, []string{"stream", "code"}),
	}
	if reg != nil {
		// gauge reads a figure the edge keeps at each scrape.
		gauge := func(name, help string, read func() int64) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(read()) })
		}
		reg.MustRegister(m.requests, m.rejections, m.ephemeral, m.inFlight, m.produceLatency, m.retryAfter, m.duration,
			gauge("driftguard_ingest_in_flight_bytes",
				"Bytes of request bodies the edge holds, from the start of their read until the producer is done with their records.", b.inUse),
			gauge("driftguard_ingest_in_flight_bytes_limit",
				"http.max_in_flight_bytes: beyond it, requests are answered 503, before their bodies are read or while they are.", func() int64 { return b.limit }),
			gauge("driftguard_ingest_producer_pending_bytes",
				"Bytes of records handed to the producer and not yet acked or failed.", bl.pendingBytes))
		reg.MustRegister(conns.Collectors("ingest", "http.max_connections")...)
	}
	return m
}

// acceptedSeries are the 202 series of a stream the edge serves: its
// request counter and its duration histogram. It also makes the 503
// series, and their reason's, exist from the start at 0: the alerts on
// 503s and on slow requests and the dashboard's rates then see a stream
// before its first failure. Other statuses appear when first served.
func (m *metrics) acceptedSeries(stream string) (prometheus.Counter, prometheus.Observer) {
	unavailable := strconv.Itoa(http.StatusServiceUnavailable)
	m.requests.WithLabelValues(stream, unavailable)
	m.duration.WithLabelValues(stream, unavailable)
	m.rejections.WithLabelValues(stream, "unavailable")
	m.rejections.WithLabelValues(stream, "overloaded")
	accepted := strconv.Itoa(http.StatusAccepted)
	return m.requests.WithLabelValues(stream, accepted), m.duration.WithLabelValues(stream, accepted)
}

// observe counts a request but an accepted one of a known stream, which
// its stream's bound series count; unknown stream names are folded into
// one label so a scanner cannot blow up the series count.
func (m *metrics) observe(stream string, res result, known bool, took time.Duration) {
	if !known {
		stream = "unknown"
	}
	code := strconv.Itoa(res.status)
	m.requests.WithLabelValues(stream, code).Inc()
	m.duration.WithLabelValues(stream, code).Observe(took.Seconds())
	if res.reason != "" {
		m.rejections.WithLabelValues(stream, res.reason).Inc()
	}
}
