package ingest

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
)

// bodySecret is a body-HMAC scheme's secret, used as is.
const bodySecret = "body-hmac-secret-of-enough-bytes"

// bodySigned is a POST of body to stream, signed under a body-HMAC scheme
// with bodySecret; github's delivery id is id.
func bodySigned(t testing.TB, scheme, stream, id string, body []byte) delivery {
	t.Helper()
	signer, err := webhook.NewSigner(scheme, bodySecret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	signer.Sign(h, id, body, testNow)
	return delivery{method: http.MethodPost, stream: stream, contentType: "application/json", header: h, body: body}
}

// bodyStream is the shipped presence stream named name, verified by a
// body-HMAC scheme with bodySecret.
func bodyStream(t testing.TB, name, scheme string) *config.Stream {
	t.Helper()
	s := testenv.Shipped(t, "presence")
	s.Name = name
	s.Signature.Scheme, s.Signature.Secrets = scheme, []string{bodySecret}
	return s
}

// checkRefusal fails unless r is a 401 signature problem for reason.
func checkRefusal(t *testing.T, r reply, reason string) string {
	t.Helper()
	if r.status != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401 (%s): %s", r.status, reason, r.body)
	}
	p := checkProblem(t, r)
	if !strings.HasSuffix(p.Type, "/signature") || !strings.Contains(p.Detail, "("+reason+")") {
		t.Fatalf("problem %s: %q, want a signature problem for %s", p.Type, p.Detail, reason)
	}
	return p.Detail
}

// The digest GitHub's body is known by is SHA-256 of its bytes, whatever
// delivery id comes with it: GitHub's documented example again.
func TestGitHubEventIDIsTheBodyDigest(t *testing.T) {
	s, err := newBodyHMACScheme(config.SchemeGitHub, []string{"It's a Secret to Everybody"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const digestOfHelloWorld = "sha256:dffd6021bb2bd5b0af676290809ec3a53191dd81c7f70a4b28688a362182986f"
	for _, delivery := range []string{"72d3162e-cc78-11e3-81ab-4c9367dc0958", "forged-1", "forged-2"} {
		h := http.Header{}
		h.Set(webhook.HeaderHubSignature256, "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
		h.Set(webhook.HeaderGitHubDelivery, delivery)
		id, err := s.Verify(h, []byte("Hello, World!"))
		if err != nil || id != digestOfHelloWorld {
			t.Fatalf("delivery %s: id %q err %v, want %s", delivery, id, err, digestOfHelloWorld)
		}
	}
}

// A body-HMAC stream that names its bodies' time refuses, with 401 and
// before producing anything, a body dated further than signature.tolerance
// from now in either direction, and one whose time is missing or not in
// the stream's unit; at the window's edges it accepts.
func TestBodyReplayWindow(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	brokers := testenv.Fake(t)
	hexStream := bodyStream(t, "hexwindow", config.SchemeHMACSHA256Hex)
	hexStream.Signature.Timestamp = "/timestamp"
	// The same body field read in milliseconds, under github.
	msStream := bodyStream(t, "mswindow", config.SchemeGitHub)
	msStream.Signature.Timestamp, msStream.OccurredAtUnit = "/timestamp", "ms"
	msStream.Signature.Tolerance = 2 * time.Second
	// No window: what the other two refuse for their time, it accepts.
	openStream := bodyStream(t, "nowindow", config.SchemeGitHub)
	cfg := testenv.OnlyStream(t, hexStream)
	cfg.Streams[msStream.Name], cfg.Streams[openStream.Name] = msStream, openStream
	cl := testenv.Topics(t, ctx, cfg, brokers)
	t.Cleanup(cl.Close)
	h, err := NewHandler([]*config.Stream{hexStream, msStream, openStream}, cl, Options{Now: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	edge := serveHandler(t, h)

	now := testNow.Unix()
	at := func(stream string, n int, timestamp string) delivery {
		body := fmt.Appendf(nil, `{"event_id":"e%d","user_id":"u%d","presence":"ONLINE","sequence_number":1`, n, n)
		if timestamp != "" {
			body = fmt.Appendf(body, `,"timestamp":%s`, timestamp)
		}
		body = append(body, '}')
		return bodySigned(t, cfg.Streams[stream].Signature.Scheme, stream, fmt.Sprintf("d-%d", n), body)
	}
	secs := func(offset int64) string { return strconv.FormatInt(now+offset, 10) }
	millis := func(offset int64) string { return strconv.FormatInt(testNow.UnixMilli()+offset, 10) }
	cases := []struct {
		name   string
		d      delivery
		reason string // "" for a 202
	}{
		{"300s ago, the window's edge", at("hexwindow", 1, secs(-300)), ""},
		{"300s ahead, the window's edge", at("hexwindow", 2, secs(300)), ""},
		{"now", at("hexwindow", 3, secs(0)), ""},
		{"301s ago", at("hexwindow", 4, secs(-301)), "timestamp_window"},
		{"301s ahead", at("hexwindow", 5, secs(301)), "timestamp_window"},
		{"a day ago", at("hexwindow", 6, secs(-86400)), "timestamp_window"},
		{"milliseconds where seconds are read", at("hexwindow", 7, millis(0)), "timestamp_window"},
		{"no time", at("hexwindow", 8, ""), "missing_timestamp"},
		{"a null time", at("hexwindow", 9, "null"), "missing_timestamp"},
		{"a time that is text", at("hexwindow", 10, `"yesterday"`), "bad_timestamp"},
		{"a time with a fraction", at("hexwindow", 11, secs(0)+".5"), "bad_timestamp"},
		{"an old body with a wrong signature is a mismatch first", at("hexwindow", 12, secs(-3600)).withHeader(webhook.HeaderXSignature, strings.Repeat("0", 64)), "mismatch"},
		{"2000ms ago, in milliseconds", at("mswindow", 13, millis(-2000)), ""},
		{"2000ms ahead, in milliseconds", at("mswindow", 14, millis(2000)), ""},
		{"2001ms ago, in milliseconds", at("mswindow", 15, millis(-2001)), "timestamp_window"},
		{"2001ms ahead, in milliseconds", at("mswindow", 16, millis(2001)), "timestamp_window"},
		{"seconds where milliseconds are read", at("mswindow", 17, secs(0)), "timestamp_window"},
		{"a day ago, without a window", at("nowindow", 18, secs(-86400)), ""},
	}
	accepted := map[string]int{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.d.send(t, ctx, edge.URL)
			if tc.reason == "" {
				if r.status != http.StatusAccepted {
					t.Fatalf("status %d, want 202: %s", r.status, r.body)
				}
				accepted[tc.d.stream]++
				return
			}
			detail := checkRefusal(t, r, tc.reason)
			if tc.reason != "mismatch" && !strings.Contains(detail, "/timestamp") {
				t.Fatalf("the refusal does not name the field: %s", detail)
			}
		})
	}
	// Refusals never reach Kafka.
	for _, s := range []*config.Stream{hexStream, msStream, openStream} {
		if n := len(testenv.ReadTopic(t, brokers, naming.Prefixes{}.For(s.Name).In)); n != accepted[s.Name] {
			t.Errorf("%s.in holds %d records, want the %d accepted", s.Name, n, accepted[s.Name])
		}
	}
}

// Any signed body on a stream with a replay window: a 202 only for a body
// whose time is an integer within the window, a 401 only for its time,
// and nothing produced but for a 202.
func FuzzBodyReplayWindow(f *testing.F) {
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":1700000000}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":1699999700}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":1700000301}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":-1700000000}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":1.7e9}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":9007199254740991}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":"1700000000"}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"Timestamp":1700000000,"timestamp":1700000000}`))
	f.Add([]byte(`{"timestamp":1700000000}`))
	f.Add([]byte(`{"timestamp":null}`))
	f.Add([]byte(`{"timestamp":[1700000000]}`))
	f.Add([]byte(`[]`))

	s := bodyStream(f, "presence", config.SchemeHMACSHA256Hex)
	s.Signature.Timestamp = "/timestamp"
	mux, producer := recordingMux(f, s)
	signer, err := webhook.NewSigner(config.SchemeHMACSHA256Hex, bodySecret)
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		if int64(len(body)) > s.Limits.MaxBodyBytes {
			return
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/webhooks/presence", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		signer.Sign(req.Header, "", body, testNow)
		w := httptest.NewRecorder()
		before := producer.count()
		mux.ServeHTTP(w, req)
		produced := producer.count() - before

		var inWindow bool
		if doc, err := envelope.Parse(body); err == nil {
			v, err := doc.Lookup("/timestamp")
			if sec, ok := v.Int(); err == nil && ok {
				inWindow = sec >= testNow.Unix()-300 && sec <= testNow.Unix()+300
			}
			doc.Release()
		}
		switch w.Code {
		case http.StatusAccepted:
			if !inWindow || produced != 1 {
				t.Fatalf("202 for %q (in the window: %v), %d records produced", body, inWindow, produced)
			}
		case http.StatusUnauthorized:
			if inWindow || !strings.Contains(w.Body.String(), "timestamp") {
				t.Fatalf("401 for %q, whose time is in the window (%v) or not the reason: %s", body, inWindow, w.Body)
			}
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
		if w.Code != http.StatusAccepted && produced != 0 {
			t.Fatalf("status %d but %d records produced", w.Code, produced)
		}
	})
}

// BenchmarkBodyDigestID is what every github request pays for the id its
// body goes by when it holds none: a SHA-256 pass over the body and the
// id's allocation.
func BenchmarkBodyDigestID(b *testing.B) {
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		_ = bodyDigestID(benchBody)
	}
}
