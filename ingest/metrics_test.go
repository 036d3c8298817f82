package ingest

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
# HELP driftguard_ingest_rejections_total Rejected webhooks by stream and reason (signature_*, json, schema, too_large, read_timeout, overloaded, source_limit, unavailable...).
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
