package realtime

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/problem"
)

// claims are what a bridge token carries (design §6): the user, when it
// expires, and the streams it may read ("*" for all); optionally the
// user's device.
type claims struct {
	jwt.RegisteredClaims
	Streams []string `json:"streams"`
	Device  string   `json:"device"`
	// streamsClaim names the claim Streams is read from
	// (bridge.tokens.streams_claim); empty, "streams".
	streamsClaim string
	// id tells one token from another (bridge.max_streams_per_token): a
	// hash of it, so that no token is kept beyond its request.
	id [sha256.Size]byte
}

// UnmarshalJSON reads the token's claims, the streams from the claim the
// configuration names: an array of names, or one string of names
// separated by spaces (as OAuth's scope is).
func (c *claims) UnmarshalJSON(data []byte) error {
	type plain claims
	var all struct {
		*plain
		// Shadows plain's Streams, read below from the claim named.
		Streams json.RawMessage `json:"streams"`
	}
	all.plain = (*plain)(c)
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	raw := all.Streams
	if c.streamsClaim != "" && c.streamsClaim != config.DefaultStreamsClaim {
		var named map[string]json.RawMessage
		if err := json.Unmarshal(data, &named); err != nil {
			return err
		}
		raw = named[c.streamsClaim]
	}
	c.Streams = nil
	var one string
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil
	case json.Unmarshal(raw, &one) == nil:
		c.Streams = strings.Fields(one)
		return nil
	}
	return json.Unmarshal(raw, &c.Streams)
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

// token is the key the token is counted by (bridge.max_streams_per_token).
func (c *claims) token() string { return string(c.id[:]) }

// mayRead reports whether the token's streams name stream.
func (c *claims) mayRead(stream string) bool {
	return slices.Contains(c.Streams, stream) || slices.Contains(c.Streams, "*")
}

// authError is a request the bridge cannot tie to a valid token: 401.
type authError struct{ reason string }

func (e authError) Error() string { return e.reason }

// queryTokenError is a token in the query string of a request that could
// have sent it in a header: 400, so that the client moves it there.
type queryTokenError struct{}

func (queryTokenError) Error() string {
	return "a token in the query string (?access_token=) is accepted only by the events endpoint, for EventSource, which cannot set headers: send Authorization: Bearer <token>"
}

// accessTokenParam is the query parameter of a token for EventSource.
const accessTokenParam = "access_token"

// token finds the request's token: `Authorization: Bearer`, or, when
// inQuery (the SSE endpoint: EventSource cannot set headers),
// `?access_token=`. A token in the query of any other request is refused:
// a URL is kept in browser history, proxies' logs and Referer headers.
func token(r *http.Request, inQuery bool) (string, error) {
	query := r.URL.Query().Has(accessTokenParam)
	if query && !inQuery {
		return "", queryTokenError{}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t), nil
		}
		return "", nil
	}
	if !query {
		return "", nil
	}
	return r.URL.Query().Get(accessTokenParam), nil
}

// verify returns the request's claims, or why it has none; inQuery says
// whether the token may come in the query string.
func (v *verifier) verify(r *http.Request, inQuery bool) (*claims, error) {
	raw, err := token(r, inQuery)
	switch {
	case err != nil:
		return nil, err
	case raw == "" && inQuery:
		return nil, authError{"no token: send Authorization: Bearer <token> or ?access_token=<token>"}
	case raw == "":
		return nil, authError{"no token: send Authorization: Bearer <token>"}
	}
	c := claims{streamsClaim: v.streamsClaim}
	_, err = v.parser.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) { return v.key(r.Context(), t) })
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, authError{"the token has expired"}
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return nil, authError{"the token is not valid yet (nbf in the future)"}
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return nil, authError{"the token lacks a required claim (exp" + v.required + ")"}
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return nil, authError{"the token's audience (aud) is not the bridge's"}
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return nil, authError{"the token's issuer (iss) is not the bridge's"}
	case errors.Is(err, errNoKey):
		return nil, authError{"no key of the bridge has the token's key id (kid) and algorithm"}
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return nil, authError{"the token is not signed with the bridge's keys (" + v.algs + ")"}
	case err != nil:
		return nil, authError{"the token is malformed"}
	case c.Subject == "":
		return nil, authError{"the token names no user (sub)"}
	}
	c.id = sha256.Sum256([]byte(raw))
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
	return SignKID(key, "", user, device, streams, exp)
}

// SignKID is SignDevice with a key of bridge.tokens.hs256_keys, named in
// the token's header by kid; empty, the token names none (bridge.secret).
func SignKID(key []byte, kid, user, device string, streams []string, exp time.Time) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: user, ExpiresAt: jwt.NewNumericDate(exp)},
		Streams:          streams,
		Device:           device,
	})
	if kid != "" {
		t.Header["kid"] = kid
	}
	return t.SignedString(key)
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
