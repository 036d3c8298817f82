package realtime

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/driftguard/driftguard/internal/problem"
)

// claims are what a bridge token carries (design §6): the user, when it
// expires, and the streams it may read ("*" for all); optionally the
// user's device.
type claims struct {
	jwt.RegisteredClaims
	Streams []string `json:"streams"`
	Device  string   `json:"device"`
}

// deviceOf is the request's device: the token's device claim when it has
// one, else the DeviceHeader; ok is false for a header that names another
// device than the claim (403 device_mismatch).
func deviceOf(q *request) (device string, ok bool) {
	header := q.r.Header.Get(DeviceHeader)
	if q.user.Device != "" {
		return q.user.Device, header == "" || header == q.user.Device
	}
	return header, true
}

// mayRead reports whether the token's streams name stream.
func (c *claims) mayRead(stream string) bool {
	return slices.Contains(c.Streams, stream) || slices.Contains(c.Streams, "*")
}

// authError is a request the bridge cannot tie to a valid token: 401.
type authError struct{ reason string }

func (e authError) Error() string { return e.reason }

// verifier checks HS256 tokens signed with one key. The algorithm is pinned:
// a token that names none, or another algorithm (RS256 with the key taken
// for a public key), is refused whatever its signature.
type verifier struct {
	key    []byte
	parser *jwt.Parser
}

func newVerifier(key []byte, now func() time.Time) *verifier {
	return &verifier{key: key, parser: jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(now),
	)}
}

// token finds the request's token: `Authorization: Bearer`, or for
// EventSource, which cannot set headers, `?access_token=`.
func token(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
		return ""
	}
	return r.URL.Query().Get("access_token")
}

// verify returns the request's claims, or why it has none.
func (v *verifier) verify(r *http.Request) (*claims, error) {
	raw := token(r)
	if raw == "" {
		return nil, authError{"no token: send Authorization: Bearer <token> or ?access_token=<token>"}
	}
	var c claims
	_, err := v.parser.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return v.key, nil })
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, authError{"the token has expired"}
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return nil, authError{"the token lacks a required claim (exp)"}
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return nil, authError{"the token is not signed with the bridge's key (HS256)"}
	case err != nil:
		return nil, authError{"the token is malformed"}
	case c.Subject == "":
		return nil, authError{"the token names no user (sub)"}
	}
	return &c, nil
}

// Sign returns a token for user to read streams until exp, signed with
// key: for `driftguard dev`'s demo link and for tests.
func Sign(key []byte, user string, streams []string, exp time.Time) (string, error) {
	return SignDevice(key, user, "", streams, exp)
}

// SignDevice is Sign for a token issued to one device of the user: what
// the user writes through the bridge (sends, receipts) is that device's.
func SignDevice(key []byte, user, device string, streams []string, exp time.Time) (string, error) {
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: user, ExpiresAt: jwt.NewNumericDate(exp)},
		Streams:          streams,
		Device:           device,
	}).SignedString(key)
}

// DeviceHeader names the request's device when its token has no device
// claim.
const DeviceHeader = "X-Driftguard-Device"

// maxDeviceBytes bounds a device id, as the shipped schemas do.
const maxDeviceBytes = 256

// requireDevice is the device a write acts for (deviceOf), which it must
// name: a header that names another device than the token's claim is 403
// device_mismatch, none at all 400 device_required; ok is false once it
// has answered.
func requireDevice(q *request) (device string, ok bool) {
	device, ok = deviceOf(q)
	switch {
	case !ok:
		problem.Write(q.w, http.StatusForbidden, "device_mismatch", "the "+DeviceHeader+" header names another device than the token's device claim", nil)
		return "", false
	case device == "":
		problem.Write(q.w, http.StatusBadRequest, "device_required", "name the device: a device claim in the token, or the "+DeviceHeader+" header", nil)
		return "", false
	case len(device) > maxDeviceBytes:
		problem.Write(q.w, http.StatusBadRequest, "device_required", fmt.Sprintf("the %s header is over %d bytes", DeviceHeader, maxDeviceBytes), nil)
		return "", false
	}
	return device, true
}
