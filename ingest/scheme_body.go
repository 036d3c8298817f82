package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/webhook"
)

// hexSHA256SignatureSize is the length of a hex HMAC-SHA256.
const hexSHA256SignatureSize = 2 * sha256.Size

// bodyHMACScheme verifies a hex HMAC-SHA256 of the raw body alone, as the
// presence seed (`X-Signature`) and GitHub (`X-Hub-Signature-256:
// sha256=<hex>`) sign. No header is signed, so a captured request can be
// replayed with any headers. The processors' dedup by event id makes a
// replay a recorded duplicate, not a second change, as long as the event
// id is signed: the body's own, or for github, whose delivery id is a
// header, the body's digest (bodyDigestID), never the delivery id. A stream
// that names a time in its bodies (signature.timestamp) also refuses a body
// dated outside its window, so that an old capture is worthless (window).
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
	// window is the replay window; nil when the stream names no time.
	window *bodyWindow
}

func newBodyHMACScheme(name string, secrets []string, window *bodyWindow) (*bodyHMACScheme, error) {
	s := &bodyHMACScheme{name: name, idMaxSize: 256, window: window}
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
				// The delivery id is not signed: an attacker replaying
				// the body would choose it.
				return bodyDigestID(body), nil
			}
			return "", nil
		}
	}
	return "", &SignatureError{Reason: "mismatch", Detail: "no signature matches any secret of the stream"}
}

// bodyDigestIDPrefix marks an event id derived from the body's bytes.
const bodyDigestIDPrefix = "sha256:"

// bodyDigestID is the event id of a signed body that holds none and whose
// delivery id is unsigned: "sha256:" and the hex SHA-256 of its bytes. The
// same body is the same event, whichever delivery id comes with it.
func bodyDigestID(body []byte) string {
	sum := sha256.Sum256(body)
	var id [len(bodyDigestIDPrefix) + hexSHA256SignatureSize]byte
	copy(id[:], bodyDigestIDPrefix)
	hex.Encode(id[len(bodyDigestIDPrefix):], sum[:])
	return string(id[:])
}

func (s *bodyHMACScheme) CheckBody(doc *envelope.Document, now time.Time) error {
	if s.window == nil {
		return nil
	}
	return s.window.check(doc, now)
}

// bodyWindow is a body-HMAC scheme's replay window: the time at a field of
// the signed body (signature.timestamp), which a replay cannot change,
// must be within signature.tolerance of now.
type bodyWindow struct {
	// stream's occurred_at_unit is the field's unit.
	stream    *config.Stream
	pointer   string
	tolerance time.Duration
}

// newBodyWindow is s's replay window, nil when it names no time field.
func newBodyWindow(s *config.Stream) *bodyWindow {
	if s.Signature.Timestamp == "" {
		return nil
	}
	return &bodyWindow{stream: s, pointer: s.Signature.Timestamp, tolerance: s.Signature.Tolerance}
}

func (w *bodyWindow) check(doc *envelope.Document, now time.Time) error {
	ms, err := doc.Clock(w.stream, w.pointer)
	if envelope.IsMissing(err) {
		return &SignatureError{Reason: "missing_timestamp", Detail: "the signed body has no time at " + w.pointer + " (signature.timestamp), so a replay of it could not be told from a new event"}
	}
	if err != nil {
		why := err.Error()
		if fe := (*envelope.FieldError)(nil); errors.As(err, &fe) {
			why = fe.Problem
		}
		return &SignatureError{Reason: "bad_timestamp", Detail: fmt.Sprintf("the signed body's time at %s (signature.timestamp, in occurred_at_unit %s) %s", w.pointer, w.stream.OccurredAtUnit, why)}
	}
	return checkWindow("the signed body's time at "+w.pointer, time.UnixMilli(ms), now, w.tolerance)
}
