package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/webhook"
)

// maxSignatures caps the signature list so a forged header cannot make us
// compare thousands of candidates.
const maxSignatures = 16

// signatureLength is the length of a v1 signature's base64 text; that
// many characters decode to at most sha256.Size+1 bytes.
var signatureLength = base64.StdEncoding.EncodedLen(sha256.Size)

// The header names in canonical form, read with headerValue.
var (
	canonicalWebhookID        = http.CanonicalHeaderKey(webhook.HeaderWebhookID)
	canonicalWebhookTimestamp = http.CanonicalHeaderKey(webhook.HeaderWebhookTimestamp)
	canonicalWebhookSignature = http.CanonicalHeaderKey(webhook.HeaderWebhookSignature)
)

// plainUnixSeconds refuses signs, leading zeros, fractions and milliseconds
// (13 digits would be year 33658): 1 to 11 digits, the first not 0.
func plainUnixSeconds(ts string) bool {
	if len(ts) == 0 || len(ts) > 11 || ts[0] == '0' {
		return false
	}
	for i := 0; i < len(ts); i++ {
		if ts[i] < '0' || ts[i] > '9' {
			return false
		}
	}
	return true
}

// standardScheme implements Standard Webhooks v1: HMAC-SHA256 over
// "id.timestamp.body" with a whsec_ secret, base64 signatures.
type standardScheme struct {
	keys      []*webhook.Key
	tolerance time.Duration
}

func newStandardScheme(secrets []string, tolerance time.Duration) (*standardScheme, error) {
	s := &standardScheme{tolerance: tolerance}
	for i, secret := range secrets {
		key, err := config.DecodeStandardSecret(secret)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i, err)
		}
		s.keys = append(s.keys, webhook.NewKey(key))
	}
	return s, nil
}

func (s *standardScheme) Name() string { return config.SchemeStandardWebhooks }

func (s *standardScheme) CheckHeaders(h http.Header, now time.Time) error {
	id, ts, sig := headerValue(h, canonicalWebhookID), headerValue(h, canonicalWebhookTimestamp), headerValue(h, canonicalWebhookSignature)
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
	case !plainUnixSeconds(ts):
		return &SignatureError{Reason: "bad_timestamp", Detail: "webhook-timestamp must be plain unix seconds"}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return &SignatureError{Reason: "bad_timestamp", Detail: "webhook-timestamp must be plain unix seconds"}
	}
	return checkWindow("webhook-timestamp", time.Unix(sec, 0), now, s.tolerance)
}

// CheckBody has nothing to check: the signed time is the header's, which
// CheckHeaders checked.
func (s *standardScheme) CheckBody(*envelope.Document, time.Time) error { return nil }

func (s *standardScheme) Verify(h http.Header, body []byte) (string, error) {
	id, ts := headerValue(h, canonicalWebhookID), headerValue(h, canonicalWebhookTimestamp)
	candidates := headerValue(h, canonicalWebhookSignature)
	count := 0
	for range strings.FieldsSeq(candidates) {
		count++
	}
	if count > maxSignatures {
		return "", &SignatureError{Reason: "too_many_signatures", Detail: fmt.Sprintf("at most %d signatures are read", maxSignatures)}
	}
	// Each key's signature is computed once, when the first well-formed
	// candidate needs it; streams rotate through a few secrets, whose
	// signatures fit on the stack.
	var room [4][sha256.Size]byte
	var wants [][sha256.Size]byte
	wellFormed := false
	for c := range strings.FieldsSeq(candidates) {
		version, value, ok := strings.Cut(c, ",")
		if !ok || version != "v1" {
			continue // other versions may come from a newer signer
		}
		// A padded base64 HMAC-SHA256 is exactly signatureLength long;
		// checking first also keeps Decode within sig, which has room for
		// the most that many characters can decode to.
		var sig [sha256.Size + 1]byte
		if len(value) != signatureLength {
			continue
		}
		if n, err := base64.StdEncoding.Strict().Decode(sig[:], []byte(value)); err != nil || n != sha256.Size {
			continue
		}
		wellFormed = true
		if wants == nil {
			wants = room[:0]
			if len(s.keys) > len(room) {
				wants = make([][sha256.Size]byte, 0, len(s.keys))
			}
			wants = wants[:len(s.keys)]
			for i, key := range s.keys {
				key.SignStandard(wants[i][:0], id, ts, body)
			}
		}
		for i := range wants {
			if hmac.Equal(sig[:sha256.Size], wants[i][:]) {
				return id, nil
			}
		}
	}
	if !wellFormed {
		return "", &SignatureError{Reason: "no_v1_signature", Detail: "webhook-signature holds no well-formed v1 signature"}
	}
	return "", &SignatureError{Reason: "mismatch", Detail: "no signature matches any secret of the stream"}
}
