package ingest

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/partition"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/internal/webhook"
)

// Every shipped stream is served from its catalogue entry: the key comes
// from the event type's pointer (children by their parent's id), and
// ephemeral types go to their own topic.
func TestEveryCatalogueStream(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	var streams []*config.Stream
	for _, name := range cfg.StreamNames() {
		s := cfg.Streams[name]
		s.Signature.Secrets = []string{specSecret}
		streams = append(streams, s)
	}
	ctx := testenv.Context(t, time.Minute)
	brokers := testenv.Fake(t)
	testenv.Topics(t, ctx, cfg, brokers).Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	reg := prometheus.NewRegistry()
	h, err := NewHandler(streams, cl, Options{Now: fixedClock, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHandler(t, h)

	cases := []struct {
		stream, body string
		status       int
		key, topic   string // for a 202
		pointer      string // for a 422
	}{
		{"workflow", `{"event_id":"w1","operation_id":"op-7","sequence":1,"status":"running","occurred_at":"2026-11-30T10:00:00Z"}`, 202, "op-7", "workflow.in", ""},
		{"workflow", `{"event_id":"w2","operation_id":"op-7","sequence":2,"status":"done","occurred_at":"2026-11-30T10:00:00Z"}`, 422, "", "", "/status"},
		{"workflow", `{"event_id":"w3","operation_id":"op-7","sequence":3,"status":"running","occurred_at":"yesterday"}`, 422, "", "", "/occurred_at"},
		{"chat", `{"event_id":"c1","type":"message.send","conversation_id":"conv-1","sender_id":"u1","sender_device_id":"d1","client_message_id":"m1","body":"hi"}`, 202, "conv-1", "chat.in", ""},
		{"chat", `{"event_id":"c2","type":"member.added","conversation_id":"conv-1","user_id":"u2"}`, 202, "conv-1", "chat.in", ""},
		{"chat", `{"event_id":"c3","type":"receipt.read","conversation_id":"conv-1","user_id":"u2","device_id":"d2","conversation_seq":1}`, 202, "conv-1", "chat.in", ""},
		{"chat", `{"event_id":"c4","type":"typing","conversation_id":"conv-1","user_id":"u2"}`, 202, "conv-1", "chat.ephemeral", ""},
		{"chat", `{"event_id":"c5","type":"message.edit","conversation_id":"conv-1"}`, 422, "", "", "/type"},
		{"chat", `{"event_id":"c6","type":"message.send","conversation_id":"conv-1","sender_id":"u1","client_message_id":"m1","body":"hi"}`, 422, "", "", "/sender_device_id"},
		{"orders", `{"event_id":"o1","event_type":"order.created","order_id":"ord-9","payload":{"total":12}}`, 202, "ord-9", "orders.in", ""},
		{"orders", `{"event_id":"o2","event_type":"order.payment_received","parent_id":"ord-9","payload":{"amount":12}}`, 202, "ord-9", "orders.in", ""},
		{"orders", `{"event_id":"o3","event_type":"order.shipped","payload":{}}`, 422, "", "", "/parent_id"},
	}
	for _, tc := range cases {
		id := tc.body[len(`{"event_id":"`):strings.Index(tc.body, `",`)]
		t.Run(tc.stream+"/"+id, func(t *testing.T) {
			d := signedDelivery(t, specSecret, "msg_"+id, []byte(tc.body))
			d.stream = tc.stream
			r := d.send(t, ctx, srv.URL)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.status == 422 {
				if p := checkProblem(t, r); !namesField(p.Errors, strings.TrimPrefix(tc.pointer, "/")) {
					t.Fatalf("no problem at %s: %+v", tc.pointer, p.Errors)
				}
				return
			}
			var a Accepted
			if err := json.Unmarshal(r.body, &a); err != nil || a.Stream != tc.stream || a.EventID != id {
				t.Fatalf("202 body %s (%v); want stream %s, event_id %s", r.body, err, tc.stream, id)
			}
			rec := findRecord(t, brokers, tc.topic, a.Partition, a.Offset)
			if string(rec.Key) != tc.key || string(rec.Value) != tc.body {
				t.Fatalf("record key %q value %s; want key %q", rec.Key, rec.Value, tc.key)
			}
			if want := partition.For([]byte(tc.key), 6); rec.Partition != want {
				t.Fatalf("partition %d, want murmur2's %d", rec.Partition, want)
			}
		})
	}
	// Typing never reaches the decided log; it is counted.
	for _, rec := range testenv.ReadTopic(t, brokers, naming.Prefixes{}.For("chat").In) {
		if strings.Contains(string(rec.Value), `"typing"`) {
			t.Fatalf("a typing indicator reached chat.in: %s", rec.Value)
		}
	}
	if n := testutil.ToFloat64(h.metrics.ephemeral.WithLabelValues("chat", "typing")); n != 1 {
		t.Fatalf("driftguard_ingest_ephemeral_total{chat,typing} = %v, want 1", n)
	}
	if n := testutil.CollectAndCount(h.metrics.ephemeral); n != 1 {
		t.Fatalf("%d ephemeral series, want only chat/typing", n)
	}
}

// findRecord returns the record at partition/offset of topic.
func findRecord(t *testing.T, brokers []string, topic string, p int32, offset int64) *kgo.Record {
	t.Helper()
	for _, rec := range testenv.ReadTopic(t, brokers, topic) {
		if rec.Partition == p && rec.Offset == offset {
			return rec
		}
	}
	t.Fatalf("no record at %s/%d/%d", topic, p, offset)
	return nil
}

// GitHub's documented example: secret "It's a Secret to Everybody", payload
// "Hello, World!".
func TestGitHubSchemeGoldenVector(t *testing.T) {
	const want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	s, err := newBodyHMACScheme(config.SchemeGitHub, []string{"It's a Secret to Everybody"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderHubSignature256, want)
	h.Set(webhook.HeaderGitHubDelivery, "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	if err := s.CheckHeaders(h, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(h, []byte("Hello, World!")); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if _, err := s.Verify(h, []byte("Hello, World?")); !IsSignatureError(err) {
		t.Fatalf("another body verified: %v", err)
	}
}

func TestBodyHMACSchemes(t *testing.T) {
	const secret = "presence-seed-secret-0123456789"
	body := []byte(`{"event_id":"e1","user_id":"u1","presence":"BUSY","sequence_number":2,"timestamp":1700000000}`)
	sum := hex.EncodeToString(webhook.NewKey([]byte(secret)).Sign(nil, body))
	cases := []struct {
		scheme string
		header http.Header
		ok     bool
		reason string
	}{
		{config.SchemeHMACSHA256Hex, http.Header{"X-Signature": {sum}}, true, ""},
		{config.SchemeHMACSHA256Hex, http.Header{"X-Signature": {strings.ToUpper(sum)}}, true, ""},
		{config.SchemeHMACSHA256Hex, http.Header{}, false, "missing_signature"},
		{config.SchemeHMACSHA256Hex, http.Header{"X-Signature": {sum[:63]}}, false, "malformed_signature"},
		{config.SchemeHMACSHA256Hex, http.Header{"X-Signature": {"0" + sum[1:]}}, sum[0] == '0', "mismatch"},
		{config.SchemeGitHub, http.Header{"X-Hub-Signature-256": {"sha256=" + sum}, "X-Github-Delivery": {"d-1"}}, true, ""},
		{config.SchemeGitHub, http.Header{"X-Hub-Signature-256": {sum}, "X-Github-Delivery": {"d-1"}}, false, "malformed_signature"},
		{config.SchemeGitHub, http.Header{"X-Hub-Signature-256": {"sha256=" + sum}}, false, "missing_id"},
	}
	for i, tc := range cases {
		s, err := newBodyHMACScheme(tc.scheme, []string{"another-secret-of-enough-bytes", secret}, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.CheckHeaders(tc.header, time.Now())
		if err == nil {
			_, err = s.Verify(tc.header, body)
		}
		if tc.ok != (err == nil) {
			t.Errorf("case %d (%s): err %v, want ok=%v", i, tc.scheme, err, tc.ok)
			continue
		}
		var se *SignatureError
		if !tc.ok && (!errors.As(err, &se) || se.Reason != tc.reason) {
			t.Errorf("case %d: err %v, want reason %s", i, err, tc.reason)
		}
	}
	if _, err := newBodyHMACScheme(config.SchemeGitHub, []string{"short"}, nil); err == nil {
		t.Fatal("a short secret was accepted")
	}
}
