package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Series is one series of a metric family gathered from a registry: its
// labels by name, and its sample.
type Series struct {
	Labels map[string]string
	*dto.Metric
}

// Gathered are the series of the metric family name in g: none when g has
// no such family.
func Gathered(tb testing.TB, g prometheus.Gatherer, name string) []Series {
	tb.Helper()
	families, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var out []Series
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, Series{Labels: labels, Metric: m})
		}
	}
	return out
}

// KafkaRequests reads from g the requests the Kafka client clientID wrote,
// by kind (driftguard_kafka_requests_total, which internal/kafka's
// ClientMetrics registers): nothing for a client that has none.
func KafkaRequests(tb testing.TB, g prometheus.Gatherer, clientID string) map[string]float64 {
	tb.Helper()
	sent := map[string]float64{}
	for _, s := range Gathered(tb, g, "driftguard_kafka_requests_total") {
		if s.Labels["client_id"] == clientID {
			sent[s.Labels["request"]] += s.GetCounter().GetValue()
		}
	}
	return sent
}
