package ingest

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
)

// Scheme verifies a webhook's signature over the raw body bytes.
type Scheme interface {
	// Name is the catalogue's scheme name, carried in the dg-scheme header.
	Name() string
	// CheckHeaders rejects a request on its headers alone, before the body
	// is read, so forged floods cost no body reads or hashing.
	CheckHeaders(h http.Header, now time.Time) error
	// Verify checks the signature over body and returns the id the event
	// goes by when its body holds none: a delivery id the signature
	// covers, or where the scheme's delivery id is unsigned an id derived
	// from the signed body, so that a replay under a new delivery id is
	// the same event; empty when the scheme has neither.
	Verify(h http.Header, body []byte) (fallbackID string, err error)
	// CheckBody rejects a verified request on its parsed body: the time a
	// body-HMAC scheme reads from it for its replay window
	// (signature.timestamp).
	CheckBody(doc *envelope.Document, now time.Time) error
}

// SignatureError is a verification failure; it is always a 401 and its
// Reason labels the rejection metric. The message never contains a secret.
type SignatureError struct {
	Reason string
	Detail string
}

func (e *SignatureError) Error() string {
	return fmt.Sprintf("signature rejected (%s): %s", e.Reason, e.Detail)
}

// IsSignatureError reports whether err is a signature failure.
func IsSignatureError(err error) bool {
	var se *SignatureError
	return errors.As(err, &se)
}

// NewScheme builds the scheme a stream's catalogue entry names. It refuses
// to start without secrets: an unsigned edge on the internet is never a
// default.
func NewScheme(s *config.Stream) (Scheme, error) {
	if len(s.Signature.Secrets) == 0 {
		return nil, fmt.Errorf("in streams.%s.signature.secrets: no secret; set %s", s.Name, config.SecretsVariable(s.Name))
	}
	switch s.Signature.Scheme {
	case config.SchemeStandardWebhooks:
		return newStandardScheme(s.Signature.Secrets, s.Signature.Tolerance)
	case config.SchemeHMACSHA256Hex, config.SchemeGitHub:
		return newBodyHMACScheme(s.Signature.Scheme, s.Signature.Secrets, newBodyWindow(s))
	default:
		return nil, fmt.Errorf("in streams.%s.signature.scheme: %q is not supported", s.Name, s.Signature.Scheme)
	}
}

// headerValue is h.Get for a key already in canonical form: Get would
// canonicalize it again, on every request, for every header read.
func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// checkWindow refuses a signed time further than tolerance from now, in
// either direction; what names the time in the refusal.
func checkWindow(what string, at, now time.Time, tolerance time.Duration) error {
	if d := now.Sub(at); d > tolerance || d < -tolerance {
		return &SignatureError{Reason: "timestamp_window", Detail: fmt.Sprintf("%s is %s away from now; the window is ±%s", what, d.Round(time.Millisecond), tolerance)}
	}
	return nil
}
