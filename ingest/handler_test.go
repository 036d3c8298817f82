package ingest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/partition"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
)

// TestHandlerStatuses sends one delivery per row and checks the status and
// body of the reply; then it reads presence.in to its end and checks that it
// holds exactly the accepted deliveries, each byte for byte where the 202
// said it is. Rejections are only proven harmless by that second part.
func TestHandlerStatuses(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	brokers := testenv.Fake(t)
	cfg, presence := presenceConfig(t, specSecret, nextSecret)
	testenv.Topics(t, ctx, cfg, brokers).Close()
	edge := serveEdge(t, brokers, presence, Options{})

	// A second edge on the same topic whose body limit is exactly the size
	// of one delivery, so both sides of the limit are tested to the byte.
	atLimit := testenv.Presence{EventID: "evt-at-limit", User: "frank", Version: 1}.Body()
	_, small := presenceConfig(t, specSecret)
	small.Limits.MaxBodyBytes = int64(len(atLimit))
	smallEdge := serveEdge(t, brokers, small, Options{})
	overLimit := append(slices.Clone(atLimit), ' ')

	ts := func(offset int64) string { return strconv.FormatInt(testNow.Unix()+offset, 10) }
	valid := func(eventID, user string) delivery {
		return signedDelivery(t, specSecret, "msg_"+eventID, testenv.Presence{EventID: eventID, User: user, Version: 1}.Body())
	}
	signedBody := func(eventID, body string) delivery {
		return signedDelivery(t, specSecret, "msg_"+eventID, []byte(body))
	}
	zeroMAC := "v1," + base64.StdEncoding.EncodeToString(make([]byte, 32))

	cases := []struct {
		name   string
		edge   *httptest.Server // nil is the default edge
		d      delivery
		status int
		// header are response headers the reply must carry.
		header map[string]string
		// field is, for a 422, the body field the problem must name.
		field string
	}{
		{name: "signed with the current secret", d: valid("evt-current", "alice"), status: 202},
		{name: "signed with the next secret during a rotation", d: signedDelivery(t, nextSecret, "msg_evt-next", testenv.Presence{EventID: "evt-next", User: "alice", Version: 2}.Body()), status: 202},
		{name: "only the second signature of the list is valid", d: valid("evt-second-sig", "bob").mapSignature(func(s string) string { return zeroMAC + " " + s }), status: 202},
		{name: "a signature of an unknown version before a valid one", d: valid("evt-v2-first", "bob").mapSignature(func(s string) string { return "v2,c2lnbmF0dXJl " + s }), status: 202},
		{name: "timestamp 300s in the past", d: signedDeliveryAt(t, specSecret, "msg_evt-past-300", ts(-300), testenv.Presence{EventID: "evt-past-300", User: "carol", Version: 1}.Body()), status: 202},
		{name: "timestamp 300s in the future", d: signedDeliveryAt(t, specSecret, "msg_evt-future-300", ts(300), testenv.Presence{EventID: "evt-future-300", User: "carol", Version: 2}.Body()), status: 202},
		{name: "content type with a charset", d: valid("evt-charset", "dave").with(func(d *delivery) { d.contentType = "application/json; charset=utf-8" }), status: 202},
		{name: "whitespace, key order and extra fields are kept byte for byte", d: signedBody("evt-spacing", "\n{ \"timestamp\" : 1700000000,\t\"sequence_number\":7,\n \"presence\":\"AWAY\", \"user_id\":\"erin\", \"event_id\":\"evt-spacing\", \"device_id\":\"d1\" }\n"), status: 202},
		{name: "body exactly at the limit", edge: smallEdge, d: signedDelivery(t, specSecret, "msg_evt-at-limit", atLimit), status: 202},
		// The same event again: a retry is accepted too, and judged downstream.
		{name: "body exactly at the limit without Content-Length", edge: smallEdge, d: signedDelivery(t, specSecret, "msg_evt-at-limit-retry", atLimit).with(func(d *delivery) { d.chunked = true }), status: 202},

		{name: "not JSON", d: signedBody("evt-not-json", "user_id=alice&presence=ONLINE"), status: 400},
		{name: "empty body", d: signedBody("evt-empty", ""), status: 400},
		{name: "truncated JSON", d: signedBody("evt-truncated", `{"event_id":"evt-truncated","user_id":"alice"`), status: 400},
		{name: "data after the object", d: signedBody("evt-trailing", string(testenv.Presence{EventID: "evt-trailing", User: "alice", Version: 1}.Body())+"{}"), status: 400},
		{name: "nesting deeper than the decoder allows", d: signedBody("evt-deep", strings.Repeat("[", 10001)+strings.Repeat("]", 10001)), status: 400},
		{name: "nesting deeper than MaxDepth", d: signedBody("evt-deep-65", `{"event_id":"evt-deep-65","x":`+strings.Repeat("[", envelope.MaxDepth)+strings.Repeat("]", envelope.MaxDepth)+`}`), status: 400},
		// Readers disagree on which of two equal keys wins: the edge refuses.
		{name: "duplicate key", d: signedBody("evt-dup", `{"event_id":"evt-dup","user_id":"alice","user_id":"mallory","presence":"ONLINE","sequence_number":1,"timestamp":1}`), status: 400},
		{name: "invalid UTF-8 in a string", d: signedBody("evt-utf8", "{\"event_id\":\"evt-utf8\",\"user_id\":\"al\xffice\",\"presence\":\"ONLINE\",\"sequence_number\":1,\"timestamp\":1}"), status: 400},

		{name: "no webhook-signature", d: valid("evt-no-sig", "alice").withoutHeader(webhook.HeaderWebhookSignature), status: 401},
		{name: "no webhook-id", d: valid("evt-no-id", "alice").withoutHeader(webhook.HeaderWebhookID), status: 401},
		{name: "no webhook-timestamp", d: valid("evt-no-ts", "alice").withoutHeader(webhook.HeaderWebhookTimestamp), status: 401},
		{name: "empty webhook-signature", d: valid("evt-empty-sig", "alice").withHeader(webhook.HeaderWebhookSignature, ""), status: 401},
		{name: "blank webhook-signature", d: valid("evt-blank-sig", "alice").withHeader(webhook.HeaderWebhookSignature, "   "), status: 401},
		{name: "v1, with no signature", d: valid("evt-v1-alone", "alice").withHeader(webhook.HeaderWebhookSignature, "v1,"), status: 401},
		{name: "base64 cut mid-quantum", d: valid("evt-cut-1", "alice").mapSignature(func(s string) string { return s[:len(s)-1] }), status: 401},
		{name: "base64 cut to a shorter MAC", d: valid("evt-cut-4", "alice").mapSignature(func(s string) string { return s[:len(s)-4] }), status: 401},
		{name: "one bit flipped in the signature", d: valid("evt-bit", "alice").mapSignature(func(s string) string { return flipFirstBit(t, s) }), status: 401},
		{name: "signed with a secret the stream does not have", d: signedDelivery(t, strangerSecret, "msg_evt-stranger", testenv.Presence{EventID: "evt-stranger", User: "alice", Version: 1}.Body()), status: 401},
		{name: "only unknown signature versions", d: valid("evt-v2", "alice").mapSignature(func(s string) string { return "v2," + strings.TrimPrefix(s, "v1,") }), status: 401},
		{name: "signature without its version", d: valid("evt-no-version", "alice").mapSignature(func(s string) string { return strings.TrimPrefix(s, "v1,") }), status: 401},
		{name: "more signatures than are read", d: valid("evt-many", "alice").mapSignature(func(s string) string { return strings.Repeat(zeroMAC+" ", maxSignatures) + s }), status: 401},
		{name: "timestamp 301s in the past", d: signedDeliveryAt(t, specSecret, "msg_evt-past-301", ts(-301), testenv.Presence{EventID: "evt-past-301", User: "alice", Version: 1}.Body()), status: 401},
		{name: "timestamp 301s in the future", d: signedDeliveryAt(t, specSecret, "msg_evt-future-301", ts(301), testenv.Presence{EventID: "evt-future-301", User: "alice", Version: 1}.Body()), status: 401},
		{name: "timestamp in milliseconds", d: signedDeliveryAt(t, specSecret, "msg_evt-ms", strconv.FormatInt(testNow.UnixMilli(), 10), testenv.Presence{EventID: "evt-ms", User: "alice", Version: 1}.Body()), status: 401},
		{name: "timestamp with a leading zero", d: signedDeliveryAt(t, specSecret, "msg_evt-zero", "0"+ts(0), testenv.Presence{EventID: "evt-zero", User: "alice", Version: 1}.Body()), status: 401},
		{name: "timestamp with a plus sign", d: signedDeliveryAt(t, specSecret, "msg_evt-plus", "+"+ts(0), testenv.Presence{EventID: "evt-plus", User: "alice", Version: 1}.Body()), status: 401},
		{name: "timestamp with a fraction", d: signedDeliveryAt(t, specSecret, "msg_evt-fraction", ts(0)+".5", testenv.Presence{EventID: "evt-fraction", User: "alice", Version: 1}.Body()), status: 401},
		{name: "webhook-id containing a dot", d: signedDelivery(t, specSecret, "msg.evt-dot", testenv.Presence{EventID: "evt-dot", User: "alice", Version: 1}.Body()), status: 401},
		{name: "webhook-id over 256 bytes", d: signedDelivery(t, specSecret, strings.Repeat("i", 257), testenv.Presence{EventID: "evt-long-id", User: "alice", Version: 1}.Body()), status: 401},
		{name: "signature made for a different body", d: valid("evt-other-body", "alice").withBody(testenv.Presence{EventID: "evt-other-body", User: "mallory", Version: 1}.Body()), status: 401},
		{name: "signature made for a different webhook-id", d: valid("evt-other-id", "alice").withHeader(webhook.HeaderWebhookID, "msg_forged"), status: 401},

		{name: "unknown stream", d: valid("evt-unknown-stream", "alice").with(func(d *delivery) { d.stream = "no_such_stream" }), status: 404},
		{name: "GET", d: valid("evt-get", "alice").with(func(d *delivery) { d.method = http.MethodGet; d.body = nil }), status: 405, header: map[string]string{"Allow": http.MethodPost}},
		{name: "text/plain", d: valid("evt-text", "alice").with(func(d *delivery) { d.contentType = "text/plain" }), status: 415},
		{name: "no content type", d: valid("evt-no-ct", "alice").with(func(d *delivery) { d.contentType = "" }), status: 415},
		{name: "one byte over the limit", edge: smallEdge, d: signedDelivery(t, specSecret, "msg_evt-over", overLimit), status: 413},
		{name: "one byte over the limit without Content-Length", edge: smallEdge, d: signedDelivery(t, specSecret, "msg_evt-over-chunked", overLimit).with(func(d *delivery) { d.chunked = true }), status: 413},

		{name: "no user_id", d: signedBody("evt-no-user", `{"event_id":"evt-no-user","presence":"ONLINE","sequence_number":1,"timestamp":1700000000}`), status: 422, field: "user_id"},
		{name: "unknown presence", d: signedBody("evt-sleeping", `{"event_id":"evt-sleeping","user_id":"alice","presence":"SLEEPING","sequence_number":1,"timestamp":1700000000}`), status: 422, field: "presence"},
		{name: "sequence_number as a string", d: signedBody("evt-seq-string", `{"event_id":"evt-seq-string","user_id":"alice","presence":"ONLINE","sequence_number":"1","timestamp":1700000000}`), status: 422, field: "sequence_number"},
		{name: "negative sequence_number", d: signedBody("evt-seq-negative", `{"event_id":"evt-seq-negative","user_id":"alice","presence":"ONLINE","sequence_number":-1,"timestamp":1700000000}`), status: 422, field: "sequence_number"},
		{name: "empty user_id", d: signedBody("evt-empty-user", `{"event_id":"evt-empty-user","user_id":"","presence":"ONLINE","sequence_number":1,"timestamp":1700000000}`), status: 422, field: "user_id"},
	}

	var accepted []acceptedDelivery
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := edge
			if tc.edge != nil {
				srv = tc.edge
			}
			r := tc.d.send(t, ctx, srv.URL)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tc.status, r.body)
			}
			for name, want := range tc.header {
				if got := r.header.Get(name); got != want {
					t.Errorf("header %s = %q, want %q", name, got, want)
				}
			}
			for _, secret := range []string{specSecret, nextSecret, strangerSecret} {
				if bytes.Contains(r.body, []byte(strings.TrimPrefix(secret, "whsec_"))) {
					t.Errorf("the reply contains a secret: %s", r.body)
				}
			}
			if tc.status == http.StatusAccepted {
				accepted = append(accepted, checkAccepted(t, r, tc.d.body))
				return
			}
			p := checkProblem(t, r)
			if tc.field != "" && !namesField(p.Errors, tc.field) {
				t.Errorf("no problem names %s: %+v", tc.field, p.Errors)
			}
		})
	}

	// Read after every request has been answered: each 202 came after the
	// broker's ack, so every accepted record is below the end offsets.
	records := testenv.ReadTopic(t, brokers, presenceIn)
	var gotIDs, wantIDs []string
	at := map[[2]int64]*kgo.Record{}
	for _, r := range records {
		gotIDs = append(gotIDs, headerMap(t, r)[record.HeaderEventID])
		at[[2]int64{int64(r.Partition), r.Offset}] = r
	}
	for _, a := range accepted {
		wantIDs = append(wantIDs, a.reply.EventID)
	}
	slices.Sort(gotIDs)
	slices.Sort(wantIDs)
	if !slices.Equal(gotIDs, wantIDs) {
		t.Fatalf("%s holds event ids %q, want exactly the accepted %q", presenceIn, gotIDs, wantIDs)
	}
	for _, a := range accepted {
		rec := at[[2]int64{int64(a.reply.Partition), a.reply.Offset}]
		if rec == nil {
			t.Errorf("event %s: no record at partition %d offset %d", a.reply.EventID, a.reply.Partition, a.reply.Offset)
			continue
		}
		checkRecord(t, rec, a, presence)
	}
}

// acceptedDelivery is a 202 and what was sent to get it.
type acceptedDelivery struct {
	reply  Accepted
	body   []byte
	userID string
}

func checkAccepted(t *testing.T, r reply, body []byte) acceptedDelivery {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var got Accepted
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("202 body %s: %v", r.body, err)
	}
	var sent struct {
		EventID string `json:"event_id"`
		UserID  string `json:"user_id"`
	}
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	if got.Status != "accepted" || got.Stream != "presence" || got.EventID != sent.EventID {
		t.Errorf("202 body %+v, want status accepted, stream presence, event_id %s", got, sent.EventID)
	}
	if got.Partition < 0 || got.Offset < 0 {
		t.Errorf("202 body %+v has no position in the log", got)
	}
	return acceptedDelivery{reply: got, body: body, userID: sent.UserID}
}

func checkRecord(t *testing.T, rec *kgo.Record, a acceptedDelivery, stream *config.Stream) {
	t.Helper()
	if string(rec.Key) != a.userID {
		t.Errorf("event %s: key %q, want the user_id %q", a.reply.EventID, rec.Key, a.userID)
	}
	if !bytes.Equal(rec.Value, a.body) {
		t.Errorf("event %s: value %q, want the body as signed %q", a.reply.EventID, rec.Value, a.body)
	}
	// The processor keeps a key's state on the partition Kafka's murmur2
	// puts it on; a record elsewhere would be decided without its history.
	if want := partition.For(rec.Key, int32(stream.Limits.Partitions)); rec.Partition != want {
		t.Errorf("event %s: partition %d, want %d for key %q", a.reply.EventID, rec.Partition, want, rec.Key)
	}
	want := map[string]string{
		record.HeaderStream:     "presence",
		record.HeaderEventID:    a.reply.EventID,
		record.HeaderType:       "presence.changed",
		record.HeaderReceivedAt: strconv.FormatInt(testNow.UnixMilli(), 10),
		record.HeaderScheme:     config.SchemeStandardWebhooks,
	}
	if got := headerMap(t, rec); !maps.Equal(got, want) {
		t.Errorf("event %s: headers %v, want %v", a.reply.EventID, got, want)
	}
}

// checkProblem checks the RFC 9457 body every rejection carries.
func checkProblem(t *testing.T, r reply) problem.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p problem.Problem
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != r.status {
		t.Errorf("problem status %d, reply status %d", p.Status, r.status)
	}
	if p.Title != http.StatusText(r.status) || !strings.HasPrefix(p.Type, problem.TypeBase) || p.Detail == "" {
		t.Errorf("problem %+v lacks a type, title or detail", p)
	}
	return p
}

// namesField reports whether a problem points at field; a missing property
// too is located where it should be.
func namesField(problems []FieldProblem, field string) bool {
	for _, p := range problems {
		if p.Pointer == "/"+field {
			return true
		}
	}
	return false
}

// flipFirstBit flips the first bit of the MAC in a "v1,<base64>" signature.
func flipFirstBit(t *testing.T, sig string) string {
	t.Helper()
	mac, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, "v1,"))
	if err != nil {
		t.Fatal(err)
	}
	mac[0] ^= 1
	return "v1," + base64.StdEncoding.EncodeToString(mac)
}

// When the broker does not ack within the produce timeout, the edge answers
// 503 with Retry-After, so the publisher keeps the event and retries.
func TestBrokerWithoutAckIs503(t *testing.T) {
	cases := []struct {
		name string
		// warm sends one delivery, which must be accepted, before the
		// failure, so the edge's client is connected when the broker fails.
		warm bool
		// fail makes the cluster unable to ack. restore, when not nil, makes
		// it readable again so the test can check what the log holds.
		fail func(t *testing.T, c *kfake.Cluster) (restore func())
	}{
		{name: "broker gone before the first delivery", fail: func(t *testing.T, c *kfake.Cluster) func() {
			c.Close()
			return nil
		}},
		{name: "broker gone after a delivery was accepted", warm: true, fail: func(t *testing.T, c *kfake.Cluster) func() {
			c.Close()
			return nil
		}},
		{name: "broker refuses every write", warm: true, fail: func(t *testing.T, c *kfake.Cluster) func() {
			f := c.Fault(kfake.Fault{Topic: presenceIn, Err: kerr.NotEnoughReplicas, Count: -1})
			return func() {
				if f.Hits() == 0 {
					t.Error("the broker was never asked, so the 503 proves nothing about acks")
				}
				f.Remove()
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cluster, ctx, edge := edgeOnFakeBroker(t, Options{ProduceTimeout: 300 * time.Millisecond})
			brokers := cluster.ListenAddrs()

			var want []string
			if tc.warm {
				before := signedDelivery(t, specSecret, "msg_evt-before", testenv.Presence{EventID: "evt-before", User: "alice", Version: 1}.Body())
				if r := before.send(t, ctx, edge.URL); r.status != http.StatusAccepted {
					t.Fatalf("before the failure: status %d, body %s", r.status, r.body)
				}
				want = append(want, "evt-before")
			}
			restore := tc.fail(t, cluster)

			during := signedDelivery(t, specSecret, "msg_evt-during", testenv.Presence{EventID: "evt-during", User: "alice", Version: 2}.Body())
			r := during.send(t, ctx, edge.URL)
			if r.status != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503; body %s", r.status, r.body)
			}
			// Nothing acked for about the produce timeout, 300 ms: the
			// least Retry-After, a second.
			if got := r.header.Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After %q, want 1", got)
			}
			checkProblem(t, r)

			if restore == nil {
				return // the broker is gone, and with it anything to read
			}
			restore()
			var ids []string
			for _, rec := range testenv.ReadTopic(t, brokers, presenceIn) {
				ids = append(ids, headerMap(t, rec)[record.HeaderEventID])
			}
			if !slices.Equal(ids, want) {
				t.Errorf("%s holds %q, want only %q, accepted before the failure", presenceIn, ids, want)
			}
		})
	}
}

// Retry-After is a wait in whole seconds, rounded up, at least one.
func TestRetryAfterRoundsUpToWholeSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "1", time.Millisecond: "1", time.Second: "1", 5 * time.Second: "5", 5*time.Second + time.Millisecond: "6", 90 * time.Second: "90",
	} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("wait %s: Retry-After %s, want %s", d, got, want)
		}
	}
}

// recordingProducer acks every record in memory, numbering offsets per
// partition, so the fuzzer can run the handler without a broker.
type recordingProducer struct {
	mu      sync.Mutex
	records []*kgo.Record
	next    map[int32]int64
}

func (p *recordingProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	r.Partition = partition.For(r.Key, 6)
	r.Offset = p.next[r.Partition]
	p.next[r.Partition]++
	p.records = append(p.records, r)
	p.mu.Unlock()
	promise(r, nil)
}

func (p *recordingProducer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.records)
}

func (p *recordingProducer) last() *kgo.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.records[len(p.records)-1]
}

// recordingMux serves stream's webhook route at the fixed clock, its
// records given to a recordingProducer: the edge without a broker, for
// fuzzing.
func recordingMux(t testing.TB, stream *config.Stream) (*http.ServeMux, *recordingProducer) {
	t.Helper()
	producer := &recordingProducer{next: map[int32]int64{}}
	h, err := NewHandler([]*config.Stream{stream}, producer, Options{Now: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Register(mux)
	return mux, producer
}

// FuzzHandlerSignedBody sends arbitrary bodies, correctly signed, through the
// whole handler: past the signature only the body decides, so the answer must
// be 202, 400 or 422 (413 only over the limit), 400 exactly when the body is
// not JSON, and a record is produced, as sent, exactly on 202.
func FuzzHandlerSignedBody(f *testing.F) {
	f.Add(testenv.Presence{EventID: "evt-1", User: "alice", Version: 1}.Body())
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"BUSY","sequence_number":9007199254740991,"timestamp":0,"expires_at":1}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1.0,"timestamp":1e3}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":99999999999999999999}`))
	f.Add([]byte(`{"event_id":7,"user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":1}`))
	f.Add([]byte(`{"user_id":"u"}`))
	f.Add([]byte(`{"a":{"b":[1,2,{"c":null}]}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`"presence"`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(`{`))
	f.Add([]byte("\xef\xbb\xbf{}"))
	f.Add([]byte{})

	_, presence := presenceConfig(f, specSecret)
	mux, producer := recordingMux(f, presence)
	key, err := config.DecodeStandardSecret(specSecret)
	if err != nil {
		f.Fatal(err)
	}
	ts := strconv.FormatInt(testNow.Unix(), 10)

	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/v1/webhooks/presence", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(webhook.HeaderWebhookID, "msg_fuzz")
		req.Header.Set(webhook.HeaderWebhookTimestamp, ts)
		req.Header.Set(webhook.HeaderWebhookSignature, "v1,"+base64.StdEncoding.EncodeToString(standardMAC(key, "msg_fuzz", ts, body)))
		w := httptest.NewRecorder()
		before := producer.count()
		mux.ServeHTTP(w, req)
		produced := producer.count() - before

		status := w.Code
		if int64(len(body)) > presence.Limits.MaxBodyBytes {
			if status != http.StatusRequestEntityTooLarge {
				t.Fatalf("body of %d bytes: status %d, want 413", len(body), status)
			}
			return
		}
		switch status {
		case http.StatusAccepted, http.StatusBadRequest, http.StatusUnprocessableEntity:
		default:
			t.Fatalf("status %d for a signed body %q; reply %s", status, body, w.Body)
		}
		// 400 exactly when the body is not strict JSON: not JSON at all, or
		// invalid UTF-8, a duplicate key, or nesting beyond MaxDepth.
		doc, strictErr := envelope.Parse(body)
		if strictErr == nil {
			doc.Release()
		}
		if !json.Valid(body) && status != http.StatusBadRequest {
			t.Fatalf("status %d for invalid JSON %q", status, body)
		}
		if (status == http.StatusBadRequest) != (strictErr != nil) {
			t.Fatalf("status %d but the strict decoder says %v for %q", status, strictErr, body)
		}
		if status == http.StatusAccepted && !utf8.Valid(body) {
			t.Fatalf("202 for invalid UTF-8 %q", body)
		}
		switch {
		case status != http.StatusAccepted && produced != 0:
			t.Fatalf("status %d but %d records were produced", status, produced)
		case status == http.StatusAccepted && produced != 1:
			t.Fatalf("202 with %d records produced", produced)
		case status == http.StatusAccepted && !bytes.Equal(producer.last().Value, body):
			t.Fatalf("produced %q, want the body as signed %q", producer.last().Value, body)
		}
	})
}

// Every path under /v1/webhooks/ is counted, so names that are not streams
// share one label value: a scanner must not create a series per guess.
func TestRequestMetricFoldsUnknownStreams(t *testing.T) {
	_, reg, srv := memoryEdge(t)
	ctx := testenv.Context(t, time.Minute)

	valid := signedDelivery(t, specSecret, "msg_evt-metric", testenv.Presence{EventID: "evt-metric", User: "alice", Version: 1}.Body())
	valid.send(t, ctx, srv.URL)
	for _, name := range []string{"wp-admin", "presence2", "Presence"} {
		valid.with(func(d *delivery) { d.stream = name }).send(t, ctx, srv.URL)
	}

	got := map[string]float64{}
	for _, series := range testenv.Gathered(t, reg, "driftguard_ingest_requests_total") {
		got[series.Labels["stream"]+" "+series.Labels["status"]] = series.GetCounter().GetValue()
	}
	// The 503 series of a served stream exists from the start, at 0.
	want := map[string]float64{"presence 202": 1, "presence 503": 0, "unknown 404": 3}
	if !maps.Equal(got, want) {
		t.Errorf("request series %v, want %v", got, want)
	}
}

// memoryEdge serves the presence edge with an in-memory producer and its
// own metrics registry.
func memoryEdge(t *testing.T) (*Handler, *prometheus.Registry, *httptest.Server) {
	t.Helper()
	_, presence := presenceConfig(t, specSecret)
	reg := prometheus.NewRegistry()
	h, err := NewHandler([]*config.Stream{presence}, &recordingProducer{next: map[int32]int64{}}, Options{Now: fixedClock, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return h, reg, serveHandler(t, h)
}
