package realtime_test

import (
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Every way a token can be wrong, and what the bridge answers: 401 with a
// problem for a request it cannot tie to a valid token, 403 for a stream
// the token does not name, 400 for a token in the query string of another
// endpoint than the events. The algorithm is pinned to HS256.
func TestAuth(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "presence", "workflow")
	e.publish("presence", "alice", 1, `{"presence":"ONLINE"}`)
	testenv.WaitFor(t, e.ctx, "alice's state", func() bool {
		return e.get("/v1/streams/presence/entities/alice", e.token("bob", "*"), nil) == http.StatusOK
	})
	sign := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	valid := jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix(), "streams": []string{"presence"}}
	with := func(change func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{}
		for k, v := range valid {
			c[k] = v
		}
		change(c)
		return c
	}
	good := sign(jwt.SigningMethodHS256, []byte(secret), valid)
	cases := []struct {
		name   string
		header string
		query  string
		status int
		detail string
	}{
		{"valid, in the header", "Bearer " + good, "", 200, ""},
		{"valid, as access_token outside the events", "", good, 400, "only by the events endpoint"},
		{"valid in the header, with access_token too", "Bearer " + good, good, 400, "only by the events endpoint"},
		{"missing", "", "", 401, "no token"},
		{"not a bearer token", "Basic " + good, "", 401, "no token"},
		{"malformed", "Bearer not.a.jwt", "", 401, "malformed"},
		{"alg none", "Bearer " + sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, valid), "", 401, ""},
		{"RS256 (another algorithm)", "Bearer " + sign(jwt.SigningMethodRS256, rsaKey, valid), "", 401, ""},
		{"HS384 (another algorithm)", "Bearer " + sign(jwt.SigningMethodHS384, []byte(secret), valid), "", 401, ""},
		{"the wrong key", "Bearer " + sign(jwt.SigningMethodHS256, []byte(strings.Repeat("x", 40)), valid), "", 401, "not signed with the bridge's key"},
		{"expired", "Bearer " + sign(jwt.SigningMethodHS256, []byte(secret), with(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })), "", 401, "expired"},
		{"without exp", "Bearer " + sign(jwt.SigningMethodHS256, []byte(secret), with(func(c jwt.MapClaims) { delete(c, "exp") })), "", 401, "exp"},
		{"without sub", "Bearer " + sign(jwt.SigningMethodHS256, []byte(secret), with(func(c jwt.MapClaims) { delete(c, "sub") })), "", 401, "sub"},
		{"a stream not in its claims", "Bearer " + sign(jwt.SigningMethodHS256, []byte(secret), with(func(c jwt.MapClaims) { c["streams"] = []string{"workflow"} })), "", 403, `"presence"`},
		{"no streams", "Bearer " + sign(jwt.SigningMethodHS256, []byte(secret), with(func(c jwt.MapClaims) { delete(c, "streams") })), "", 403, ""},
		{"every stream", "Bearer " + sign(jwt.SigningMethodHS256, []byte(secret), with(func(c jwt.MapClaims) { c["streams"] = []string{"*"} })), "", 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := e.url + "/v1/streams/presence/entities/alice"
			if tc.query != "" {
				path += "?access_token=" + tc.query
			}
			req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, path, nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			p := decodeProblem(t, resp)
			if resp.StatusCode != tc.status || !strings.Contains(p.Detail, tc.detail) {
				t.Fatalf("%d %+v, want %d with %q", resp.StatusCode, p, tc.status, tc.detail)
			}
			if tc.status != 200 && resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
			}
			if tc.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// The events take ?access_token=, for EventSource: the stream opens.
	cursor, _ := e.snapshot("presence", good, 10)
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, e.url+"/v1/streams/presence/events?cursor="+cursor+"&access_token="+good, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("events with ?access_token=: %d %s, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// No token, accepted or refused, reaches the bridge's log, at any
	// level: neither itself nor its signature.
	e.stop()
	logged := e.logged.String()
	for _, tc := range cases {
		tok := strings.TrimPrefix(strings.TrimPrefix(tc.header, "Bearer "), "Basic ") + tc.query
		if sig := tok[strings.LastIndex(tok, ".")+1:]; len(sig) > 8 && strings.Contains(logged, sig) {
			t.Errorf("%s: the bridge logged the token", tc.name)
		}
	}
	if len(logged) == 0 {
		t.Error("the bridge logged nothing at all: the check above proves nothing")
	}
}

// CORS is closed unless an origin is allowed: a page of another origin
// gets no Access-Control-Allow-Origin, an allowed one does, on requests
// and preflights.
func TestCORS(t *testing.T) {
	brokers := testenv.Fake(t)
	closed := newBridgeEnv(t, brokers, nil, "presence")
	open := newBridgeEnv(t, brokers, func(c *config.Config) { c.Bridge.AllowedOrigins = []string{"https://app.example"} }, "presence")
	tok := closed.token("bob", "*")
	for _, tc := range []struct {
		e      *bridgeEnv
		origin string
		want   string
	}{
		{closed, "https://app.example", ""},
		{open, "https://app.example", "https://app.example"},
		{open, "https://evil.example", ""},
	} {
		for _, method := range []string{http.MethodGet, http.MethodOptions} {
			req, _ := http.NewRequestWithContext(tc.e.ctx, method, tc.e.url+"/v1/streams/presence/snapshot", nil)
			req.Header.Set("Origin", tc.origin)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("Access-Control-Allow-Origin"); got != tc.want {
				t.Errorf("%s from %s: Access-Control-Allow-Origin %q, want %q", method, tc.origin, got, tc.want)
			}
		}
	}
}
