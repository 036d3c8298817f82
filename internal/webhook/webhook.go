// Package webhook is the publisher's side of the Standard Webhooks scheme:
// the signed content and a client that signs and POSTs bodies. The ingest
// edge verifies with the same Sign, and the demo traffic, the tests and the
// load generator publish with Publisher.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/driftguard/driftguard/internal/config"
)

// Sign returns HMAC-SHA256(key, id "." timestamp "." body), the Standard
// Webhooks v1 signed content.
func Sign(key []byte, id, timestamp string, body []byte) []byte {
	return NewKey(key).SignStandard(nil, id, timestamp, body)
}

var dot = []byte{'.'}

// Key is a signing key whose keyed HMAC states are pooled: a verifier
// then pays for hashing the delivery, not for the key schedule and the
// allocations of hmac.New on every request.
type Key struct {
	pool sync.Pool
}

// NewKey returns key ready to sign.
func NewKey(key []byte) *Key {
	k := &Key{}
	k.pool.New = func() any { return hmac.New(sha256.New, key) }
	return k
}

// Sign appends HMAC-SHA256 over the parts, in order, to dst.
func (k *Key) Sign(dst []byte, parts ...[]byte) []byte {
	mac := k.pool.Get().(hash.Hash)
	mac.Reset()
	for _, p := range parts {
		mac.Write(p)
	}
	dst = mac.Sum(dst)
	k.pool.Put(mac)
	return dst
}

// SignStandard appends the Standard Webhooks v1 signature of the delivery,
// HMAC-SHA256(key, id "." timestamp "." body), to dst.
func (k *Key) SignStandard(dst []byte, id, timestamp string, body []byte) []byte {
	return k.Sign(dst, []byte(id), dot, []byte(timestamp), dot, body)
}

// SignatureHeader returns the webhook-signature value for one secret.
func SignatureHeader(secret, id string, timestamp int64, body []byte) (string, error) {
	key, err := config.DecodeStandardSecret(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(Sign(key, id, strconv.FormatInt(timestamp, 10), body)), nil
}

// Publisher signs and POSTs webhooks to one stream's URL.
type Publisher struct {
	// URL is http://host:port/v1/webhooks/{stream}.
	URL    string
	Secret string
	// Client defaults to a client with a 10s timeout.
	Client *http.Client
	// Now defaults to time.Now.
	Now func() time.Time
}

// Response is what ingest answered.
type Response struct {
	Status int
	Body   []byte
}

// Post signs body with delivery id and sends it.
func (p *Publisher) Post(ctx context.Context, id string, body []byte) (Response, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	client := p.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	ts := now().Unix()
	sig, err := SignatureHeader(p.Secret, id, ts, body)
	if err != nil {
		return Response{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := client.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("POST %s: %w", p.URL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return Response{Status: resp.StatusCode, Body: data}, err
}
