package ingest

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"

	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
)

// Operators alert on rejections by reason: each kind of refusal is counted
// under its own label, and nothing stays in flight after the replies:
// neither requests nor body bytes.
func TestRejectionsAreCountedByReason(t *testing.T) {
	h, reg, srv := memoryEdge(t)
	ctx := testenv.Context(t, time.Minute)

	valid := signedDelivery(t, specSecret, "msg_evt-ok", testenv.Presence{EventID: "evt-ok", User: "alice", Version: 1}.Body())
	valid.send(t, ctx, srv.URL)
	signedDelivery(t, strangerSecret, "msg_evt-forged", testenv.Presence{EventID: "evt-forged", User: "alice", Version: 2}.Body()).send(t, ctx, srv.URL)
	valid.withoutHeader(webhook.HeaderWebhookSignature).send(t, ctx, srv.URL)
	signedDelivery(t, specSecret, "msg_evt-bad", []byte(`{"event_id":"evt-bad"}`)).send(t, ctx, srv.URL)
	signedDelivery(t, specSecret, "msg_evt-junk", []byte(`{"a":1,"a":2}`)).send(t, ctx, srv.URL)
	valid.with(func(d *delivery) { d.contentType = "text/plain" }).send(t, ctx, srv.URL)

	want := `
# HELP driftguard_ingest_rejections_total Rejected webhooks by stream and reason (signature_*, json, schema, too_large, too_slow, overloaded, source_limit, unavailable...).
# TYPE driftguard_ingest_rejections_total counter
driftguard_ingest_rejections_total{reason="content_type",stream="presence"} 1
driftguard_ingest_rejections_total{reason="json",stream="presence"} 1
driftguard_ingest_rejections_total{reason="overloaded",stream="presence"} 0
driftguard_ingest_rejections_total{reason="schema",stream="presence"} 1
driftguard_ingest_rejections_total{reason="signature_mismatch",stream="presence"} 1
driftguard_ingest_rejections_total{reason="signature_missing_signature",stream="presence"} 1
driftguard_ingest_rejections_total{reason="unavailable",stream="presence"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "driftguard_ingest_rejections_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(h.metrics.inFlight); got != 0 {
		t.Errorf("%v requests still in flight after every reply", got)
	}
	if got := h.budget.inUse(); got != 0 {
		t.Errorf("%d body bytes still held after every reply", got)
	}
	if got := testutil.CollectAndCount(h.metrics.produceLatency); got != 1 {
		t.Errorf("produce latency has %d series, want 1", got)
	}
}

// slowProducer acks every record after a delay: what a broker's ack time
// adds to a publisher's wait.
type slowProducer struct {
	recordingProducer
	delay time.Duration
}

func (p *slowProducer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	time.AfterFunc(p.delay, func() { p.recordingProducer.Produce(ctx, r, promise) })
}

// The request-duration histogram times each reply by stream and status,
// the broker's ack included; a name that is no stream shares one label,
// and a served stream's 202 and 503 series exist from the start.
func TestRequestDurationsByStreamAndCode(t *testing.T) {
	_, presence := presenceConfig(t, specSecret)
	reg := prometheus.NewRegistry()
	const ackDelay = 60 * time.Millisecond
	h, err := NewHandler([]*config.Stream{presence}, &slowProducer{recordingProducer{next: map[int32]int64{}}, ackDelay}, Options{Now: fixedClock, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHandler(t, h)
	ctx := testenv.Context(t, time.Minute)

	if got := histogramCounts(t, reg, "driftguard_ingest_request_duration_seconds", "stream", "code"); !maps.Equal(got, map[string]uint64{"presence 202": 0, "presence 503": 0}) {
		t.Errorf("before any request: %v", got)
	}
	valid := signedDelivery(t, specSecret, "msg_evt-timed", testenv.Presence{EventID: "evt-timed", User: "alice", Version: 1}.Body())
	if r := valid.send(t, ctx, srv.URL); r.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	valid.withoutHeader(webhook.HeaderWebhookSignature).send(t, ctx, srv.URL)
	for _, name := range []string{"wp-admin", "presence2"} {
		valid.with(func(d *delivery) { d.stream = name }).send(t, ctx, srv.URL)
	}
	want := map[string]uint64{"presence 202": 1, "presence 503": 0, "presence 401": 1, "unknown 404": 2}
	if got := histogramCounts(t, reg, "driftguard_ingest_request_duration_seconds", "stream", "code"); !maps.Equal(got, want) {
		t.Errorf("duration samples %v, want %v", got, want)
	}
	accepted := histogramSums(t, reg, "driftguard_ingest_request_duration_seconds", "stream", "code")["presence 202"]
	if accepted < ackDelay.Seconds() || accepted > 10 {
		t.Errorf("the 202 took %.3fs by the histogram, want at least the ack's %s", accepted, ackDelay)
	}
	if refused := histogramSums(t, reg, "driftguard_ingest_request_duration_seconds", "stream", "code")["presence 401"]; refused >= ackDelay.Seconds() {
		t.Errorf("the 401, answered before any produce, took %.3fs by the histogram", refused)
	}
}

// histogramCounts are the sample counts of a histogram's series, by the
// values of labels joined with spaces.
func histogramCounts(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) map[string]uint64 {
	out := map[string]uint64{}
	for key, h := range histograms(t, reg, name, labels...) {
		out[key] = h.GetSampleCount()
	}
	return out
}

// histogramSums are the sums of a histogram's series, keyed as
// histogramCounts.
func histogramSums(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) map[string]float64 {
	out := map[string]float64{}
	for key, h := range histograms(t, reg, name, labels...) {
		out[key] = h.GetSampleSum()
	}
	return out
}

func histograms(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) map[string]*dto.Histogram {
	t.Helper()
	out := map[string]*dto.Histogram{}
	for _, series := range testenv.Gathered(t, reg, name) {
		key := make([]string, len(labels))
		for i, l := range labels {
			key[i] = series.Labels[l]
		}
		out[strings.Join(key, " ")] = series.GetHistogram()
	}
	return out
}
