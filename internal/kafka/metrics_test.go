package kafka

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Clients of one process share its registry: each reports under its own
// client_id, a second client of an id already open neither panics nor
// takes the first one's series away when it closes, and a closed client's
// series go.
func TestClientMetricsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	open := func(role string) *kgo.Client {
		t.Helper()
		// Never asked for anything, so never connected: the hooks register
		// when the client is built.
		cl, err := New(Options(Conn{Brokers: []string{"127.0.0.1:1"}}, ClientMetrics(reg, role)...))
		if err != nil {
			t.Fatal(err)
		}
		if id := cl.OptValue(kgo.ClientID); id != "driftguard-"+role {
			t.Errorf("client id %v, want driftguard-%s", id, role)
		}
		return cl
	}
	reporting := func() []string {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, f := range families {
			if f.GetName() != "driftguard_kafka_buffered_produce_bytes" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "client_id" {
						ids = append(ids, l.GetValue())
					}
				}
			}
		}
		slices.Sort(ids)
		return ids
	}

	ingest, sink := open("ingest"), open("sink")
	if got := reporting(); !slices.Equal(got, []string{"driftguard-ingest", "driftguard-sink"}) {
		t.Fatalf("clients reporting: %v", got)
	}
	second := open("ingest")
	second.Close()
	if got := reporting(); !slices.Equal(got, []string{"driftguard-ingest", "driftguard-sink"}) {
		t.Errorf("after a second ingest client closed: %v", got)
	}
	ingest.Close()
	if got := reporting(); !slices.Equal(got, []string{"driftguard-sink"}) {
		t.Errorf("after the ingest client closed: %v", got)
	}
	sink.Close()
	// A new client of a closed one's id reports again.
	again := open("ingest")
	defer again.Close()
	if got := reporting(); !slices.Equal(got, []string{"driftguard-ingest"}) {
		t.Errorf("a new ingest client: %v", got)
	}
}
