package peertest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/webhook"
)

// Secrets the tests sign with, one per scheme family, and others that a
// peer must refuse.
const (
	StandardSecret      = "whsec_cGVlci10ZXN0LXNlY3JldC1vZi1hdC1sZWFzdC0yNC1ieXRlcw=="
	BodySecret          = "peer-test-secret-of-at-least-24-bytes"
	OtherStandardSecret = "whsec_b3RoZXItc2VjcmV0LW9mLWF0LWxlYXN0LTI0LWJ5dGVz"
	OtherBodySecret     = "another-secret-of-at-least-24-bytes"
)

// Edge is a peer's edge for the catalogue stream, under scheme ("" the
// stream's own), with the test secret of that scheme's family, and a
// client that signs for it (its URL unset: see Serve).
func Edge(tb testing.TB, stream, scheme string) (*peer.Edge, *Client) {
	tb.Helper()
	secret := StandardSecret
	if scheme != "" && scheme != config.SchemeStandardWebhooks {
		secret = BodySecret
	}
	s, err := peer.CatalogueStream(stream)
	if err != nil {
		tb.Fatal(err)
	}
	edge, err := peer.NewEdge(s, scheme, []string{secret}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return edge, &Client{Scheme: edge.Stream().Signature.Scheme, Secret: secret}
}

// Serve serves handler behind edge on a test server until the test's end,
// and returns a client of it signing as c does.
func Serve(tb testing.TB, edge *peer.Edge, handler http.Handler, c *Client) *Client {
	tb.Helper()
	srv := httptest.NewServer(peer.Mux(edge, handler))
	tb.Cleanup(srv.Close)
	served := *c
	served.URL = srv.URL + edge.Path()
	return &served
}

// keepAlive keeps a connection per concurrent sender, where
// http.DefaultClient keeps two and would redial for every other request.
var keepAlive = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// Client signs webhooks under one scheme and POSTs them to a peer.
type Client struct {
	// URL is http://host:port/v1/webhooks/{stream}.
	URL    string
	Scheme string
	Secret string
	// HTTP defaults to a client that keeps its connections alive.
	HTTP *http.Client
}

// Response is a peer's answer.
type Response struct {
	Status   int
	Accepted peer.Accepted // for a 202
	Body     string
}

// Post signs the JSON of v, delivery id id, and sends it; it fails the
// test when the request does.
func (c *Client) Post(t testing.TB, id string, v any) Response {
	t.Helper()
	resp, err := c.Send(id, v)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Send is Post for goroutines other than the test's.
func (c *Client) Send(id string, v any) (Response, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Response{}, err
	}
	h, err := c.Sign(id, body)
	if err != nil {
		return Response{}, err
	}
	return c.SendRaw(h, body)
}

// Sign returns the headers that sign body under the client's scheme.
func (c *Client) Sign(id string, body []byte) (http.Header, error) {
	s, err := webhook.NewSigner(c.Scheme, c.Secret)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	s.Sign(h, id, body, time.Now())
	return h, nil
}

// SendRaw sends body with headers h (and the JSON content type).
func (c *Client) SendRaw(h http.Header, body []byte) (Response, error) {
	req, err := http.NewRequest(http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	req.Header = h.Clone()
	req.Header.Set("Content-Type", "application/json")
	client := c.HTTP
	if client == nil {
		client = keepAlive
	}
	resp, err := client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	out := Response{Status: resp.StatusCode, Body: string(data)}
	if resp.StatusCode == http.StatusAccepted {
		if err := json.Unmarshal(data, &out.Accepted); err != nil {
			return out, fmt.Errorf("202 body %q: %v", data, err)
		}
	}
	return out, nil
}

// SendAccepted sends event as delivery id, and fails unless it is
// answered 202.
func (c *Client) SendAccepted(id string, event any) error {
	resp, err := c.Send(id, event)
	if err == nil && resp.Status != http.StatusAccepted {
		err = fmt.Errorf("%s: %d %s", id, resp.Status, resp.Body)
	}
	return err
}

// SendAll sends every event, one after the other or each from a goroutine
// of its own, and returns the first failure: an error, or an answer other
// than 202. id names an event's delivery.
func SendAll[E any](c *Client, events []E, id func(E) string, concurrent bool) error {
	send := func(ev E) error { return c.SendAccepted(id(ev), ev) }
	if !concurrent {
		for _, ev := range events {
			if err := send(ev); err != nil {
				return err
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, len(events))
	for i, ev := range events {
		wg.Go(func() { errs[i] = send(ev) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
