package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/driftguard/driftguard/benchmarks/model"
)

// The runner reads the requests by kind and the produce batches,
// records and bytes of each process, summed over its clients, and nothing else;
// growth is per 1,000 events.
func TestKafkaCounts(t *testing.T) {
	page := `# HELP driftguard_kafka_requests_total Requests.
driftguard_kafka_requests_total{client_id="driftguard-ingest",request="Produce"} 120
driftguard_kafka_requests_total{client_id="driftguard-ingest-2",request="Produce"} 30
driftguard_kafka_requests_total{client_id="driftguard-ingest",request="Metadata"} 2
driftguard_kafka_produce_batches_total{client_id="driftguard-ingest",node_id="1",topic="presence.in"} 600
driftguard_kafka_produce_records_total{client_id="driftguard-ingest",node_id="1",topic="presence.in"} 6000
driftguard_kafka_produce_compressed_bytes_total{client_id="driftguard-ingest",node_id="1",topic="presence.in"} 700
driftguard_kafka_produce_bytes_total{client_id="driftguard-ingest",node_id="1",topic="presence.in"} 2100
driftguard_kafka_fetch_uncompressed_bytes_total{client_id="driftguard-ingest",node_id="1",topic="presence.in"} 99
driftguard_ingest_requests_total{code="202",stream="presence"} 5000
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(page)) }))
	defer srv.Close()
	got := kafkaCounts(t.Context(), map[string]string{"ingest": srv.URL, "gone": "http://127.0.0.1:1/metrics"})
	want := map[string]float64{"ingest/Produce": 150, "ingest/Metadata": 2, "ingest/" + model.KindProduceBatches: 600, "ingest/" + model.KindProduceRecords: 6000,
		"ingest/" + model.KindProduceBytes: 700, "ingest/" + model.KindProduceRawBytes: 2100}
	if len(got) != len(want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	grown := perThousand(map[string]float64{"ingest/Produce": 100}, got, 5000)
	if grown["ingest/Produce"] != 10 || grown["ingest/Metadata"] != 0.4 {
		t.Errorf("per 1,000 of 5,000 events: %v", grown)
	}
}
