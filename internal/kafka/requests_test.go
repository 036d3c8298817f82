package kafka_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A client counts the requests it writes by kind: producing a record is
// at least one Produce request, and the series go when it closes.
func TestRequestsCountedByKind(t *testing.T) {
	reg := prometheus.NewRegistry()
	brokers := testenv.Fake(t)
	cl, err := kafka.New(kafka.Options(kafka.Conn{Brokers: brokers}, kafka.ClientMetrics(reg, "ingest")...))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "requests"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "requests", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	requests := func() map[string]float64 { return testenv.KafkaRequests(t, reg, "driftguard-ingest") }
	got := requests()
	if got["Produce"] < 3 || got["Metadata"] < 1 || got["CreateTopics"] != 1 {
		t.Errorf("requests by kind %v, want at least 3 Produce (one per synchronous record) and a Metadata; CreateTopics too", got)
	}
	cl.Close()
	if got := requests(); len(got) != 0 {
		t.Errorf("a closed client's requests still reported: %v", got)
	}
}
