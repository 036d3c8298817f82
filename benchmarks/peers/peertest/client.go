package peertest

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/webhook"
)

// Secrets the tests sign with, one per scheme family.
const (
	StandardSecret = "whsec_cGVlci10ZXN0LXNlY3JldC1vZi1hdC1sZWFzdC0yNC1ieXRlcw=="
	BodySecret     = "peer-test-secret-of-at-least-24-bytes"
)

// Client signs webhooks under one scheme and POSTs them to a peer.
type Client struct {
	// URL is http://host:port/v1/webhooks/{stream}.
	URL    string
	Scheme string
	Secret string
	HTTP   *http.Client
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
	h := http.Header{}
	switch c.Scheme {
	case config.SchemeStandardWebhooks, "":
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		sig, err := webhook.SignatureHeader(c.Secret, id, ts, body)
		if err != nil {
			return nil, err
		}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
	case config.SchemeHMACSHA256Hex, config.SchemeGitHub:
		key, err := config.SecretKey(c.Scheme, c.Secret)
		if err != nil {
			return nil, err
		}
		sum := hex.EncodeToString(webhook.NewKey(key).Sign(nil, body))
		if c.Scheme == config.SchemeGitHub {
			h.Set("X-Hub-Signature-256", "sha256="+sum)
			h.Set("X-GitHub-Delivery", id)
		} else {
			h.Set("X-Signature", sum)
		}
	default:
		return nil, fmt.Errorf("no signer for scheme %q", c.Scheme)
	}
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
		client = http.DefaultClient
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
