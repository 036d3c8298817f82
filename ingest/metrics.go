package ingest

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests       *prometheus.CounterVec
	produceLatency prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "driftguard_ingest_requests_total",
			Help: "Webhook requests by stream and HTTP status.",
		}, []string{"stream", "status"}),
		produceLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "driftguard_ingest_produce_seconds",
			Help:    "Time from produce to the broker's ack (or the deadline).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.produceLatency)
	}
	return m
}

// observe counts a request; unknown stream names are folded into one label
// so a scanner cannot blow up the series count.
func (m *metrics) observe(stream string, status int, known bool) {
	if !known {
		stream = "unknown"
	}
	m.requests.WithLabelValues(stream, strconv.Itoa(status)).Inc()
}
