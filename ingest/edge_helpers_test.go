package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
)

// specSecret is the secret of the Standard Webhooks specification's test
// vector, so a failure here can be checked against the spec by hand.
const specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// presenceIn is the topic the presence stream's accepted webhooks go to
// (design §3 and §4); spelled out because it is the contract under test.
const presenceIn = "presence.in"

var (
	// nextSecret is the secret a publisher rotates to.
	nextSecret = derivedSecret("next")
	// strangerSecret is configured nowhere.
	strangerSecret = derivedSecret("stranger")
)

// testNow is the edge's clock in the handler tests, and the timestamp
// testenv.Presence bodies carry by default; deliveries are signed at it
// unless a case says otherwise.
var testNow = time.Unix(1_700_000_000, 0)

func fixedClock() time.Time { return testNow }

// derivedSecret returns a valid whsec_ secret with a 32-byte key derived from
// seed, so the tests need no randomness for their secrets.
func derivedSecret(seed string) string {
	key := sha256.Sum256([]byte(seed))
	return "whsec_" + base64.StdEncoding.EncodeToString(key[:])
}

// presenceConfig returns the shipped presence stream with secrets set, and
// the default configuration with it as its only stream.
func presenceConfig(t testing.TB, secrets ...string) (*config.Config, *config.Stream) {
	t.Helper()
	s := testenv.Shipped(t, "presence")
	s.Signature.Secrets = secrets
	return testenv.OnlyStream(t, s), s
}

// delivery is one webhook request as a publisher sends it.
type delivery struct {
	method      string
	stream      string
	contentType string
	header      http.Header
	body        []byte
	// chunked sends the body without a Content-Length, so the edge can only
	// enforce its limit while reading.
	chunked bool
}

// signedDelivery is a POST of body to the presence stream, signed with
// secret at testNow.
func signedDelivery(t testing.TB, secret, id string, body []byte) delivery {
	return signedDeliveryAt(t, secret, id, strconv.FormatInt(testNow.Unix(), 10), body)
}

// signedDeliveryAt is signedDelivery with the webhook-timestamp text given,
// signed as it is, so malformed timestamps can still be signed.
func signedDeliveryAt(t testing.TB, secret, id, ts string, body []byte) delivery {
	t.Helper()
	sig, err := webhook.SignatureHeader(secret, id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(webhook.HeaderWebhookID, id)
	h.Set(webhook.HeaderWebhookTimestamp, ts)
	h.Set(webhook.HeaderWebhookSignature, sig)
	return delivery{method: http.MethodPost, stream: "presence", contentType: "application/json", header: h, body: body}
}

// with returns a copy of d changed by change; the signature is not redone,
// which is the point of most changes.
func (d delivery) with(change func(*delivery)) delivery {
	d.header = d.header.Clone()
	change(&d)
	return d
}

func (d delivery) withHeader(name, value string) delivery {
	return d.with(func(d *delivery) { d.header.Set(name, value) })
}

func (d delivery) withoutHeader(name string) delivery {
	return d.with(func(d *delivery) { d.header.Del(name) })
}

func (d delivery) withBody(body []byte) delivery {
	return d.with(func(d *delivery) { d.body = body })
}

// mapSignature replaces the webhook-signature header with change(old).
func (d delivery) mapSignature(change func(string) string) delivery {
	return d.withHeader(webhook.HeaderWebhookSignature, change(d.header.Get(webhook.HeaderWebhookSignature)))
}

// reply is what the edge answered.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (d delivery) send(t testing.TB, ctx context.Context, baseURL string) reply {
	t.Helper()
	var body io.Reader = bytes.NewReader(d.body)
	if d.chunked {
		// A reader net/http does not know the length of.
		body = io.MultiReader(bytes.NewReader(d.body))
	}
	req, err := http.NewRequestWithContext(ctx, d.method, baseURL+"/v1/webhooks/"+d.stream, body)
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range d.header {
		req.Header[name] = values
	}
	if d.contentType != "" {
		req.Header.Set("Content-Type", d.contentType)
	}
	return do(t, req)
}

// do sends req and reads the whole reply.
func do(t testing.TB, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: data}
}

// serveEdge serves a handler for stream over HTTP, producing with the
// client every driftguard component uses. A nil opts.Now is the fixed clock.
func serveEdge(t testing.TB, brokers []string, stream *config.Stream, opts Options) *httptest.Server {
	t.Helper()
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if opts.Now == nil {
		opts.Now = fixedClock
	}
	h, err := NewHandler([]*config.Stream{stream}, cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	return serveHandler(t, h)
}

// edgeOnFakeBroker serves the presence stream, producing to an embedded
// broker of its own, which a test may fault; the context ends with the
// test or after a minute.
func edgeOnFakeBroker(t *testing.T, opts Options) (*kfake.Cluster, context.Context, *httptest.Server) {
	t.Helper()
	cluster := testenv.FakeCluster(t)
	brokers := cluster.ListenAddrs()
	ctx := testenv.Context(t, time.Minute)
	cfg, presence := presenceConfig(t, specSecret)
	testenv.Topics(t, ctx, cfg, brokers).Close()
	return cluster, ctx, serveEdge(t, brokers, presence, opts)
}

// serveHandler serves h's routes until the test ends.
func serveHandler(t testing.TB, h *Handler) *httptest.Server {
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// headerMap flattens record headers; a repeated header fails the test, since
// consumers read the first and would disagree with one reading the last.
func headerMap(t testing.TB, r *kgo.Record) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, h := range r.Headers {
		if _, dup := out[h.Key]; dup {
			t.Errorf("record %d/%d repeats header %s", r.Partition, r.Offset, h.Key)
		}
		out[h.Key] = string(h.Value)
	}
	return out
}
