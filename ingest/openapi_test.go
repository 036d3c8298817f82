package ingest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// openAPIDocument is the contract publishers and operators read.
const openAPIDocument = "../docs/openapi.yaml"

// loadOpenAPI loads and validates the document and returns a router that
// finds the operation a request is for.
func loadOpenAPI(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	loader := openapi3.NewLoader()
	loader.Context = ctx
	doc, err := loader.LoadFromFile(openAPIDocument)
	if err != nil {
		t.Fatalf("loading %s: %v", openAPIDocument, err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("%s is OpenAPI %s; the checks below assume 3.1's JSON Schema", openAPIDocument, doc.OpenAPI)
	}
	if err := doc.Validate(ctx, openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", openAPIDocument, err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, router
}

// strictResponses makes a status the document does not list an error;
// openapi3filter lets it pass by default.
var strictResponses = &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}

// exchange is one HTTP request to the edge.
type exchange struct {
	method string
	path   string
	header http.Header
	body   []byte
}

func webhookExchange(d delivery) exchange {
	h := d.header.Clone()
	if d.contentType != "" {
		h.Set("Content-Type", d.contentType)
	}
	return exchange{method: d.method, path: "/v1/webhooks/" + d.stream, header: h, body: d.body}
}

func getExchange(path string) exchange {
	return exchange{method: http.MethodGet, path: path, header: http.Header{}}
}

func (e exchange) request(t *testing.T, ctx context.Context, baseURL string) *http.Request {
	t.Helper()
	var body io.Reader
	if e.body != nil {
		body = bytes.NewReader(e.body)
	}
	req, err := http.NewRequestWithContext(ctx, e.method, baseURL+e.path, body)
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range e.header {
		req.Header[name] = values
	}
	return req
}

// send makes the exchange with a real server.
func (e exchange) send(t *testing.T, ctx context.Context, baseURL string) reply {
	t.Helper()
	return do(t, e.request(t, ctx, baseURL))
}

// documented finds the operation of the document an exchange is for. The
// request is addressed to the document's server, where the router looks for
// it; it is only validated, never sent.
func documented(t *testing.T, ctx context.Context, doc *openapi3.T, router routers.Router, e exchange) *openapi3filter.RequestValidationInput {
	t.Helper()
	if len(doc.Servers) == 0 {
		t.Fatalf("%s names no server", openAPIDocument)
	}
	req := e.request(t, ctx, doc.Servers[0].URL)
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatalf("the document has no operation for %s %s: %v", e.method, e.path, err)
	}
	return &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: strictResponses}
}

// checkDocumentedResponse fails unless the document describes r, as the
// answer to the request in input, status, headers and body.
func checkDocumentedResponse(t *testing.T, ctx context.Context, input *openapi3filter.RequestValidationInput, r reply) {
	t.Helper()
	err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: input,
		Status:                 r.status,
		Header:                 r.header,
		Body:                   io.NopCloser(bytes.NewReader(r.body)),
		Options:                strictResponses,
	})
	if err != nil {
		t.Errorf("the document does not describe this %d reply (Content-Type %q, body %s): %v",
			r.status, r.header.Get("Content-Type"), r.body, err)
	}
}

// unreachableBroker returns a loopback address nothing listens on: the
// port was free a moment ago and is closed again, so a dial is refused.
func unreachableBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestEdgeConformsToOpenAPI makes one real exchange per status of design §3,
// plus the operational endpoints, and checks each reply against
// docs/openapi.yaml: a status, content type, header or body the document does
// not describe fails. Requests are checked too, both ways: the document must
// accept what the edge takes past its content checks, and refuse what the
// edge refuses for its shape (not JSON, wrong content type), so the document
// neither forbids what works nor promises what does not.
func TestEdgeConformsToOpenAPI(t *testing.T) {
	doc, router := loadOpenAPI(t)
	ctx := testenv.Context(t, time.Minute)

	cfg, presence := presenceConfig(t, specSecret)
	// A small body limit lets the 413 request stay small enough for the
	// server to drain, so the reply is read like any other.
	presence.Limits.MaxBodyBytes = 1 << 10
	brokers := testenv.Fake(t)
	testenv.Topics(t, ctx, cfg, brokers).Close()
	healthyRoutes, _ := edgeRoutes(t, brokers, []*config.Stream{presence}, Options{Now: fixedClock})
	healthy := serveProduction(t, healthyRoutes)
	downRoutes, _ := edgeRoutes(t, []string{unreachableBroker(t)}, []*config.Stream{presence}, Options{Now: fixedClock, ProduceTimeout: 300 * time.Millisecond})
	brokerDown := serveProduction(t, downRoutes)

	valid := func(eventID string) delivery {
		return signedDelivery(t, specSecret, "msg_"+eventID, testenv.Presence{EventID: eventID, User: "alice", Version: 1}.Body())
	}
	signedBody := func(eventID, body string) delivery {
		return signedDelivery(t, specSecret, "msg_"+eventID, []byte(body))
	}
	oversized := `{"event_id":"evt-oa-413","padding":"` + strings.Repeat("x", int(presence.Limits.MaxBodyBytes)) + `"}`

	cases := []struct {
		name    string
		baseURL string
		e       exchange
		status  int
		// requestConforms is whether the document accepts the request.
		requestConforms bool
	}{
		{"accepted", healthy, webhookExchange(valid("evt-oa-202")), 202, true},
		{"not JSON", healthy, webhookExchange(signedBody("evt-oa-400", "user_id=alice")), 400, false},
		{"wrong signature", healthy, webhookExchange(signedDelivery(t, strangerSecret, "msg_evt-oa-401", testenv.Presence{EventID: "evt-oa-401", User: "alice", Version: 1}.Body())), 401, true},
		{"unknown stream", healthy, webhookExchange(valid("evt-oa-404").with(func(d *delivery) { d.stream = "no_such_stream" })), 404, true},
		{"unknown stream with GET", healthy, webhookExchange(valid("evt-oa-404-get").with(func(d *delivery) { d.stream = "no_such_stream"; d.method = http.MethodGet; d.body = nil })), 404, true},
		{"GET", healthy, webhookExchange(valid("evt-oa-405").with(func(d *delivery) { d.method = http.MethodGet; d.body = nil })), 405, true},
		{"DELETE", healthy, webhookExchange(valid("evt-oa-405-delete").with(func(d *delivery) { d.method = http.MethodDelete; d.body = nil })), 405, true},
		{"over the body limit", healthy, webhookExchange(signedBody("evt-oa-413", oversized)), 413, true},
		{"text/plain", healthy, webhookExchange(valid("evt-oa-415").with(func(d *delivery) { d.contentType = "text/plain" })), 415, false},
		{"fails the schema", healthy, webhookExchange(signedBody("evt-oa-422", `{"event_id":"evt-oa-422","presence":"ONLINE","sequence_number":1,"timestamp":1700000000}`)), 422, true},
		{"broker down", brokerDown, webhookExchange(valid("evt-oa-503")), 503, true},
		{"healthz", healthy, getExchange("/healthz"), 200, true},
		{"readyz", healthy, getExchange("/readyz"), 200, true},
		{"readyz with the broker down", brokerDown, getExchange("/readyz"), 200, true},
		{"metrics", healthy, getExchange("/metrics"), 200, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.e.send(t, ctx, tc.baseURL)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tc.status, r.body)
			}
			input := documented(t, ctx, doc, router, tc.e)
			err := openapi3filter.ValidateRequest(ctx, input)
			switch {
			case tc.requestConforms && err != nil:
				t.Errorf("the document refuses a request the edge takes: %v", err)
			case !tc.requestConforms && err == nil:
				t.Errorf("the document accepts a request the edge refuses with %d", r.status)
			}
			checkDocumentedResponse(t, ctx, input, r)
		})
	}

	// The checks above only mean something if the validator refuses what
	// the document does not describe; these replies were never sent.
	t.Run("undescribed replies are refused", func(t *testing.T) {
		webhook := webhookExchange(valid("evt-oa-undescribed"))
		problem := http.Header{"Content-Type": {"application/problem+json"}}
		problemBody := []byte(`{"type":"https://driftguard.dev/problems/unavailable","title":"Service Unavailable","status":503,"detail":"retry later"}`)
		undescribed := []struct {
			name string
			r    reply
		}{
			{"503 without Retry-After", reply{status: 503, header: problem, body: problemBody}},
			{"503 with an HTTP-date Retry-After", reply{status: 503, header: http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"Wed, 21 Oct 2026 07:28:00 GMT"}}, body: problemBody}},
			{"a status the operation does not list", reply{status: 500, header: problem, body: problemBody}},
			{"202 as problem+json", reply{status: 202, header: problem, body: problemBody}},
			{"202 with a field the document does not have", reply{status: 202, header: http.Header{"Content-Type": {"application/json"}},
				body: []byte(`{"status":"accepted","stream":"presence","event_id":"e","partition":0,"offset":0,"extra":1}`)}},
			{"202 with another status word", reply{status: 202, header: http.Header{"Content-Type": {"application/json"}},
				body: []byte(`{"status":"queued","stream":"presence","event_id":"e","partition":0,"offset":0}`)}},
		}
		for _, u := range undescribed {
			input := documented(t, ctx, doc, router, webhook)
			err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
				RequestValidationInput: input, Status: u.r.status, Header: u.r.header,
				Body: io.NopCloser(bytes.NewReader(u.r.body)), Options: strictResponses,
			})
			if err == nil {
				t.Errorf("%s: the validator accepted it", u.name)
			}
		}
	})
}
