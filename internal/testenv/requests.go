package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// KafkaRequests reads from g the requests the Kafka client clientID wrote,
// by kind (driftguard_kafka_requests_total, which internal/kafka's
// ClientMetrics registers): nothing for a client that has none.
func KafkaRequests(tb testing.TB, g prometheus.Gatherer, clientID string) map[string]float64 {
	tb.Helper()
	families, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	sent := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "driftguard_kafka_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["client_id"] == clientID {
				sent[labels["request"]] += m.GetCounter().GetValue()
			}
		}
	}
	return sent
}
