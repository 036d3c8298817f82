package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/webhook"
)

// Standard Webhooks header names.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// maxSignatures caps the signature list so a forged header cannot make us
// compare thousands of candidates.
const maxSignatures = 16

// plainUnixSeconds refuses signs, leading zeros, fractions and milliseconds
// (13 digits would be year 33658).
var plainUnixSeconds = regexp.MustCompile(`^[1-9][0-9]{0,10}$`)

// standardScheme implements Standard Webhooks v1: HMAC-SHA256 over
// "id.timestamp.body" with a whsec_ secret, base64 signatures.
type standardScheme struct {
	keys      [][]byte
	tolerance time.Duration
}

func newStandardScheme(secrets []string, tolerance time.Duration) (*standardScheme, error) {
	s := &standardScheme{tolerance: tolerance}
	for i, secret := range secrets {
		key, err := config.DecodeStandardSecret(secret)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i, err)
		}
		s.keys = append(s.keys, key)
	}
	return s, nil
}

func (s *standardScheme) Name() string { return config.SchemeStandardWebhooks }

func (s *standardScheme) CheckHeaders(h http.Header, now time.Time) error {
	id, ts, sig := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	switch {
	case id == "":
		return &SignatureError{Reason: "missing_id", Detail: "the webhook-id header is missing"}
	case ts == "":
		return &SignatureError{Reason: "missing_timestamp", Detail: "the webhook-timestamp header is missing"}
	case strings.TrimSpace(sig) == "":
		return &SignatureError{Reason: "missing_signature", Detail: "the webhook-signature header is missing"}
	case strings.Contains(id, ".") || len(id) > 256:
		// A dot would make "id.timestamp.body" ambiguous.
		return &SignatureError{Reason: "bad_id", Detail: "webhook-id must not contain '.' and must be at most 256 bytes"}
	case !plainUnixSeconds.MatchString(ts):
		return &SignatureError{Reason: "bad_timestamp", Detail: "webhook-timestamp must be plain unix seconds"}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return &SignatureError{Reason: "bad_timestamp", Detail: "webhook-timestamp must be plain unix seconds"}
	}
	if d := now.Sub(time.Unix(sec, 0)); d > s.tolerance || d < -s.tolerance {
		return &SignatureError{Reason: "timestamp_window", Detail: fmt.Sprintf("webhook-timestamp is %s away from now; the window is ±%s", d.Round(time.Second), s.tolerance)}
	}
	return nil
}

func (s *standardScheme) Verify(h http.Header, body []byte) (string, error) {
	id, ts := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp)
	candidates := strings.Fields(h.Get(HeaderWebhookSignature))
	if len(candidates) > maxSignatures {
		return "", &SignatureError{Reason: "too_many_signatures", Detail: fmt.Sprintf("at most %d signatures are read", maxSignatures)}
	}
	var sigs [][]byte
	for _, c := range candidates {
		version, value, ok := strings.Cut(c, ",")
		if !ok || version != "v1" {
			continue // other versions may come from a newer signer
		}
		sig, err := base64.StdEncoding.Strict().DecodeString(value)
		if err != nil || len(sig) != sha256.Size {
			continue
		}
		sigs = append(sigs, sig)
	}
	if len(sigs) == 0 {
		return "", &SignatureError{Reason: "no_v1_signature", Detail: "webhook-signature holds no well-formed v1 signature"}
	}
	for _, key := range s.keys {
		want := webhook.Sign(key, id, ts, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return id, nil
			}
		}
	}
	return "", &SignatureError{Reason: "mismatch", Detail: "no signature matches any secret of the stream"}
}
