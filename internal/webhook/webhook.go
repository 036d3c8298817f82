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
	"encoding/hex"
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

// Key is a signing key whose keyed HMAC states are pooled: a verifier
// then pays for hashing the delivery, not for the key schedule and the
// allocations of hmac.New on every request.
type Key struct {
	pool sync.Pool
}

// keyState is a keyed HMAC and a scratch buffer for what is hashed besides
// the body and for the sum: bytes written through the hash.Hash interface
// escape, so a buffer of the caller's own would be a heap allocation on
// every request.
type keyState struct {
	mac     hash.Hash
	scratch []byte
}

// NewKey returns key ready to sign.
func NewKey(key []byte) *Key {
	k := &Key{}
	k.pool.New = func() any { return &keyState{mac: hmac.New(sha256.New, key)} }
	return k
}

func (k *Key) state() *keyState {
	s := k.pool.Get().(*keyState)
	s.mac.Reset()
	return s
}

// finish appends the sum of s to dst and puts s back.
func (k *Key) finish(s *keyState, dst []byte) []byte {
	s.scratch = s.mac.Sum(s.scratch[:0])
	dst = append(dst, s.scratch...)
	k.pool.Put(s)
	return dst
}

// Sign appends HMAC-SHA256 over body to dst.
func (k *Key) Sign(dst, body []byte) []byte {
	s := k.state()
	s.mac.Write(body)
	return k.finish(s, dst)
}

// SignStandard appends the Standard Webhooks v1 signature of the delivery,
// HMAC-SHA256(key, id "." timestamp "." body), to dst.
func (k *Key) SignStandard(dst []byte, id, timestamp string, body []byte) []byte {
	s := k.state()
	s.scratch = append(s.scratch[:0], id...)
	s.scratch = append(s.scratch, '.')
	s.scratch = append(s.scratch, timestamp...)
	s.scratch = append(s.scratch, '.')
	s.mac.Write(s.scratch)
	s.mac.Write(body)
	return k.finish(s, dst)
}

// SignatureHeader returns the webhook-signature value for one secret over
// the webhook-timestamp text as sent: the signature covers that text, not
// the number it spells, so a test can sign a malformed timestamp too.
func SignatureHeader(secret, id, timestamp string, body []byte) (string, error) {
	key, err := config.DecodeStandardSecret(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(Sign(key, id, timestamp, body)), nil
}

// Header names and the signature prefix of the schemes ingest verifies.
const (
	// Standard Webhooks.
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
	// The body-only HMAC schemes: hmac-sha256-hex and github.
	HeaderXSignature      = "X-Signature"
	HeaderHubSignature256 = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	// GitHubSignaturePrefix precedes GitHub's hex signature.
	GitHubSignaturePrefix = "sha256="
)

// Signer signs deliveries under one scheme with one secret, the way
// ingest checks them; the secret is decoded once.
type Signer struct {
	scheme string
	key    *Key
}

// NewSigner is a Signer for scheme ("" is standard-webhooks) and secret.
func NewSigner(scheme, secret string) (*Signer, error) {
	switch scheme {
	case "":
		scheme = config.SchemeStandardWebhooks
	case config.SchemeStandardWebhooks, config.SchemeHMACSHA256Hex, config.SchemeGitHub:
	default:
		return nil, fmt.Errorf("no signer for scheme %q", scheme)
	}
	key, err := config.SecretKey(scheme, secret)
	if err != nil {
		return nil, err
	}
	return &Signer{scheme: scheme, key: NewKey(key)}, nil
}

// Sign sets h's signature headers of delivery id of body, sent at now.
func (s *Signer) Sign(h http.Header, id string, body []byte, now time.Time) {
	switch s.scheme {
	case config.SchemeStandardWebhooks:
		ts := strconv.FormatInt(now.Unix(), 10)
		h.Set(HeaderWebhookID, id)
		h.Set(HeaderWebhookTimestamp, ts)
		h.Set(HeaderWebhookSignature, "v1,"+base64.StdEncoding.EncodeToString(s.key.SignStandard(nil, id, ts, body)))
	case config.SchemeHMACSHA256Hex:
		h.Set(HeaderXSignature, hex.EncodeToString(s.key.Sign(nil, body)))
	case config.SchemeGitHub:
		h.Set(HeaderGitHubDelivery, id)
		h.Set(HeaderHubSignature256, GitHubSignaturePrefix+hex.EncodeToString(s.key.Sign(nil, body)))
	}
}

// Publisher signs and POSTs webhooks to one stream's URL.
type Publisher struct {
	// URL is http://host:port/v1/webhooks/{stream}.
	URL string
	// Secret is read once, at the first Post.
	Secret string
	// Client defaults to a client with a 10s timeout.
	Client *http.Client
	// Now defaults to time.Now.
	Now func() time.Time

	// The signer of Secret, made at the first Post.
	signOnce sync.Once
	signer   *Signer
	signErr  error
}

// Response is what ingest answered.
type Response struct {
	Status int
	Body   []byte
	// RetryAfter is the wait the answer's Retry-After header asks for (in
	// seconds or as an HTTP date), 0 without one.
	RetryAfter time.Duration
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
	p.signOnce.Do(func() { p.signer, p.signErr = NewSigner(config.SchemeStandardWebhooks, p.Secret) })
	if p.signErr != nil {
		return Response{}, p.signErr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	p.signer.Sign(req.Header, id, body, now())
	resp, err := client.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("POST %s: %w", p.URL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return Response{Status: resp.StatusCode, Body: data, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), now())}, err
}

// retryAfter reads a Retry-After header (RFC 9110 §10.2.3): seconds, or
// an HTTP date; 0 when absent, malformed or past.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Attempt is one try of a delivery: ingest's status, or the error of a
// try that got no answer (0 status).
type Attempt struct {
	Status int
	Err    error
}

// Deliver posts body as delivery id until ingest accepts it (2xx) or
// refuses it for good (4xx), as Standard Webhooks senders do: after a 5xx
// or a try that got no answer (refused, reset, timed out) it tries again
// with the same id and body, signed anew, after wait(n) for the n-th
// retry. It returns every attempt, the last one ingest's final word, or
// ctx's error with the attempts made when ctx ends first.
func (p *Publisher) Deliver(ctx context.Context, id string, body []byte, wait func(retry int) time.Duration) ([]Attempt, error) {
	var attempts []Attempt
	for retry := 0; ; retry++ {
		resp, err := p.Post(ctx, id, body)
		if ctx.Err() != nil {
			return attempts, ctx.Err()
		}
		attempts = append(attempts, Attempt{Status: resp.Status, Err: err})
		if err == nil && resp.Status < 500 {
			return attempts, nil
		}
		select {
		case <-ctx.Done():
			return attempts, ctx.Err()
		case <-time.After(wait(retry + 1)):
		}
	}
}
