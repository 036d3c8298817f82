package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/webhook"
)

// hexSHA256SignatureSize is the length of a hex HMAC-SHA256.
const hexSHA256SignatureSize = 2 * sha256.Size

// bodyHMACScheme verifies a hex HMAC-SHA256 of the raw body alone, as the
// presence seed (`X-Signature`) and GitHub (`X-Hub-Signature-256:
// sha256=<hex>`) sign. Nothing binds a timestamp, so a captured request can
// be replayed; the processors' dedup by event id makes a replay a recorded
// duplicate, not a second change.
type bodyHMACScheme struct {
	name     string
	header   string
	prefix   string
	idHeader string // the delivery id, when the scheme has one
	// canonicalHeader and canonicalID are the two in canonical form, as
	// headerValue reads them.
	canonicalHeader, canonicalID string
	keys                         []*webhook.Key
	idMaxSize                    int
}

func newBodyHMACScheme(name string, secrets []string) (*bodyHMACScheme, error) {
	s := &bodyHMACScheme{name: name, idMaxSize: 256}
	switch name {
	case config.SchemeHMACSHA256Hex:
		s.header = webhook.HeaderXSignature
	case config.SchemeGitHub:
		s.header, s.prefix, s.idHeader = webhook.HeaderHubSignature256, webhook.GitHubSignaturePrefix, webhook.HeaderGitHubDelivery
	}
	s.canonicalHeader = http.CanonicalHeaderKey(s.header)
	if s.idHeader != "" {
		s.canonicalID = http.CanonicalHeaderKey(s.idHeader)
	}
	for _, secret := range secrets {
		key, err := config.SecretKey(name, secret)
		if err != nil {
			return nil, err
		}
		s.keys = append(s.keys, webhook.NewKey(key))
	}
	return s, nil
}

func (s *bodyHMACScheme) Name() string { return s.name }

func (s *bodyHMACScheme) CheckHeaders(h http.Header, _ time.Time) error {
	value := headerValue(h, s.canonicalHeader)
	if value == "" {
		return &SignatureError{Reason: "missing_signature", Detail: "the " + s.header + " header is missing"}
	}
	if _, ok := s.decode(value); !ok {
		return &SignatureError{Reason: "malformed_signature", Detail: s.header + " must be " + s.prefix + "<64 hex digits>"}
	}
	if s.idHeader != "" {
		if id := headerValue(h, s.canonicalID); id == "" || len(id) > s.idMaxSize {
			return &SignatureError{Reason: "missing_id", Detail: "the " + s.idHeader + " header is missing or over 256 bytes"}
		}
	}
	return nil
}

func (s *bodyHMACScheme) decode(value string) ([]byte, bool) {
	digits, ok := strings.CutPrefix(strings.TrimSpace(value), s.prefix)
	if !ok || len(digits) != hexSHA256SignatureSize {
		return nil, false
	}
	sig, err := hex.DecodeString(digits)
	return sig, err == nil
}

func (s *bodyHMACScheme) Verify(h http.Header, body []byte) (string, error) {
	sig, ok := s.decode(headerValue(h, s.canonicalHeader))
	if !ok {
		return "", &SignatureError{Reason: "malformed_signature", Detail: s.header + " must be " + s.prefix + "<64 hex digits>"}
	}
	var want [sha256.Size]byte
	for _, key := range s.keys {
		if hmac.Equal(sig, key.Sign(want[:0], body)) {
			if s.idHeader != "" {
				return headerValue(h, s.canonicalID), nil
			}
			return "", nil
		}
	}
	return "", &SignatureError{Reason: "mismatch", Detail: "no signature matches any secret of the stream"}
}
