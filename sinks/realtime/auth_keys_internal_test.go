package realtime

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// jwksServer is an identity provider's JWK Set endpoint whose keys a test
// changes, counting the fetches.
type jwksServer struct {
	t       *testing.T
	mu      sync.Mutex
	keys    map[string]jwkset.JWK
	fetches atomic.Int64
	url     string
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{t: t, keys: map[string]jwkset.JWK{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		set := jwkset.NewMemoryStorage()
		s.mu.Lock()
		for _, k := range s.keys {
			_ = set.KeyWrite(r.Context(), k)
		}
		s.mu.Unlock()
		body, err := set.JSONPublic(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/.well-known/jwks.json"
	return s
}

// add publishes the public half of key under kid, for alg.
func (s *jwksServer) add(kid string, alg jwkset.ALG, key crypto.Signer) {
	s.t.Helper()
	jwk, err := jwkset.NewJWKFromKey(key.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: alg, USE: jwkset.UseSig}})
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.keys[kid] = jwk
	s.mu.Unlock()
}

func (s *jwksServer) remove(kid string) {
	s.mu.Lock()
	delete(s.keys, kid)
	s.mu.Unlock()
}

// testVerifier is the verifier of the default configuration changed by
// change, validated as at start.
func testVerifier(t *testing.T, change func(*config.Bridge)) *verifier {
	t.Helper()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	change(&cfg.Bridge)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := newVerifier(ctx, cfg.Bridge, time.Now, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// verifyToken is what the verifier makes of tok in the Authorization
// header.
func (v *verifier) verifyToken(tok string) (*claims, error) {
	r := httptest.NewRequest(http.MethodGet, "/v1/streams/presence/snapshot", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return v.verify(r, false)
}

// mustAccept fails unless v accepts tok for bob.
func mustAccept(t *testing.T, v *verifier, what, tok string) *claims {
	t.Helper()
	c, err := v.verifyToken(tok)
	if err != nil || c.Subject != "bob" {
		t.Fatalf("%s: refused (%v), want accepted", what, err)
	}
	return c
}

// mustRefuse fails unless v refuses tok with a reason holding want.
func mustRefuse(t *testing.T, v *verifier, what, tok, want string) {
	t.Helper()
	if _, err := v.verifyToken(tok); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want refused with %q", what, err, want)
	}
}

// bob are the claims of a valid token, changed by each change.
func bob(changes ...func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix(), "streams": []string{"presence"}}
	for _, change := range changes {
		change(c)
	}
	return c
}

// signed is a token of claims signed with key by method, naming kid in
// its header unless kid is empty.
func signed(t *testing.T, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func p256Key(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// publicPEM writes key's public half as a PEM PUBLIC KEY file and returns
// its path and bytes.
func publicPEM(t *testing.T, key crypto.Signer) (string, []byte) {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	path := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// jwksVerifier is a provider whose set holds key a (RS256), and a
// verifier of its set refreshed every refresh, and on an unknown kid at
// most once per minRefresh.
func jwksVerifier(t *testing.T, a *rsa.PrivateKey, refresh, minRefresh time.Duration) (*jwksServer, *verifier) {
	t.Helper()
	idp := newJWKSServer(t)
	idp.add("a", jwkset.AlgRS256, a)
	return idp, testVerifier(t, func(c *config.Bridge) {
		c.Tokens.JWKSURL = idp.url
		c.Tokens.JWKSRefresh = refresh
		c.Tokens.JWKSMinRefresh = minRefresh
	})
}

// A JWK Set's keys come and go: a token of a key added is accepted once
// the bridge fetches the set again (at once, for its unknown kid), and a
// key removed stops verifying at the next periodic refresh.
func TestJWKSRotation(t *testing.T) {
	a, b := rsaKey(t), p256Key(t)
	idp, v := jwksVerifier(t, a, time.Second, time.Hour)
	tokA := signed(t, jwt.SigningMethodRS256, a, "a", bob())
	tokB := signed(t, jwt.SigningMethodES256, b, "b", bob())
	mustAccept(t, v, "a token of key a", tokA)
	// Before the provider publishes b, b's tokens are refused; that
	// refusal spends the one fetch an unknown kid may cause in an hour,
	// so once the provider publishes b the bridge sees it at its next
	// periodic refresh.
	mustRefuse(t, v, "a token of key b before the set has it", tokB, "no key of the bridge")
	idp.add("b", jwkset.AlgES256, b)
	testenv.WaitFor(t, t.Context(), "a token of key b, added to the set, accepted", func() bool {
		_, err := v.verifyToken(tokB)
		return err == nil
	})
	mustAccept(t, v, "key b's token", tokB)
	idp.remove("a")
	testenv.WaitFor(t, t.Context(), "a token of key a, removed from the set, refused", func() bool {
		_, err := v.verifyToken(tokA)
		return err != nil
	})
	mustRefuse(t, v, "key a's token after its removal", tokA, "no key of the bridge has the token's key id")
	mustAccept(t, v, "key b's token after a's removal", tokB)
	t.Logf("fetches of the JWK Set: %d", idp.fetches.Load())
}

// A key the provider adds is accepted at once, before any periodic
// refresh: the token's unknown kid makes the bridge fetch the set.
func TestJWKSUnknownKidFetchesTheSet(t *testing.T) {
	b := rsaKey(t)
	idp, v := jwksVerifier(t, rsaKey(t), time.Hour, time.Hour)
	if n := idp.fetches.Load(); n != 1 {
		t.Fatalf("%d fetches at start, want 1", n)
	}
	idp.add("b", jwkset.AlgRS256, b)
	mustAccept(t, v, "a token of key b, just added", signed(t, jwt.SigningMethodRS256, b, "b", bob()))
	if n := idp.fetches.Load(); n != 2 {
		t.Errorf("%d fetches, want 2: at start and for b's kid", n)
	}
}

// Tokens naming made-up kids, many at once, make the bridge fetch the set
// at most once per jwks_min_refresh: the identity provider is not
// hammered, and every such token is refused.
func TestJWKSFetchRateIsBounded(t *testing.T) {
	a := rsaKey(t)
	idp, v := jwksVerifier(t, a, config.DefaultJWKSRefresh, time.Hour)
	const tokens = 500
	var refused atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range tokens {
		wg.Go(func() {
			if _, err := v.verifyToken(signed(t, jwt.SigningMethodRS256, a, fmt.Sprintf("made-up-%d", i), bob())); err != nil {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	fetches := idp.fetches.Load()
	t.Logf("%d tokens with unknown kids: %d refused, %d fetches of the JWK Set in %s", tokens, refused.Load(), fetches, time.Since(start))
	if refused.Load() != tokens {
		t.Errorf("%d of %d tokens with unknown kids refused, want all", refused.Load(), tokens)
	}
	if fetches > 2 {
		t.Errorf("%d fetches, want at most 2: the first and one for the unknown kids", fetches)
	}
	mustAccept(t, v, "a token of the set's key after the storm", signed(t, jwt.SigningMethodRS256, a, "a", bob()))
}

// Algorithm confusion is impossible: each key verifies its own algorithm
// only, so an HS256 token signed with a public key's bytes (PEM, DER or
// the JWK Set's), an RS256 token naming an HMAC key's kid, `none`, and
// algorithms without a key are all refused.
func TestAlgorithmConfusionIsRefused(t *testing.T) {
	idp := newJWKSServer(t)
	static, remote := rsaKey(t), rsaKey(t)
	idp.add("remote", jwkset.AlgRS256, remote)
	staticPath, staticPEM := publicPEM(t, static)
	_, remotePEM := publicPEM(t, remote)
	staticDER, err := x509.MarshalPKIXPublicKey(static.Public())
	if err != nil {
		t.Fatal(err)
	}
	hmacKey := strings.Repeat("h", 32)
	v := testVerifier(t, func(c *config.Bridge) {
		c.Secret = strings.Repeat("s", 32)
		c.Tokens.HS256Keys = "hmac:" + hmacKey
		c.Tokens.PublicKeys = []config.PublicKeyFile{{KID: "static", File: staticPath}}
		c.Tokens.JWKSURL = idp.url
		c.Tokens.JWKSMinRefresh = time.Hour
	})
	mustAccept(t, v, "RS256 with the static key", signed(t, jwt.SigningMethodRS256, static, "static", bob()))
	mustAccept(t, v, "RS256 with the set's key", signed(t, jwt.SigningMethodRS256, remote, "remote", bob()))
	mustAccept(t, v, "HS256 with kid hmac", signed(t, jwt.SigningMethodHS256, []byte(hmacKey), "hmac", bob()))
	for _, tc := range []struct{ what, tok, want string }{
		{"HS256 signed with the static key's PEM, naming its kid", signed(t, jwt.SigningMethodHS256, staticPEM, "static", bob()), "no key of the bridge"},
		{"HS256 signed with the static key's PEM, no kid", signed(t, jwt.SigningMethodHS256, staticPEM, "", bob()), "not signed with the bridge's keys"},
		{"HS256 signed with the static key's DER, naming its kid", signed(t, jwt.SigningMethodHS256, staticDER, "static", bob()), "no key of the bridge"},
		{"HS256 signed with the set's key's PEM, naming its kid", signed(t, jwt.SigningMethodHS256, remotePEM, "remote", bob()), "no key of the bridge"},
		{"RS256 naming the HMAC key's kid", signed(t, jwt.SigningMethodRS256, static, "hmac", bob()), "no key of the bridge"},
		{"ES256 naming the RSA key's kid", signed(t, jwt.SigningMethodES256, p256Key(t), "static", bob()), "no key of the bridge"},
		{"RS256 with another key, naming the static kid", signed(t, jwt.SigningMethodRS256, rsaKey(t), "static", bob()), "not signed with the bridge's keys"},
		{"alg none", signed(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", bob()), "not signed with the bridge's keys"},
		{"PS256, an algorithm without a key", signed(t, jwt.SigningMethodPS256, static, "static", bob()), "not signed with the bridge's keys"},
		{"HS384 with the secret", signed(t, jwt.SigningMethodHS384, []byte(strings.Repeat("s", 32)), "", bob()), "not signed with the bridge's keys"},
	} {
		mustRefuse(t, v, tc.what, tc.tok, tc.want)
	}
}

// With bridge.tokens.issuer and audience, a token of another issuer or
// audience, or with none, is refused.
func TestIssuerAndAudience(t *testing.T) {
	key := strings.Repeat("k", 32)
	v := testVerifier(t, func(c *config.Bridge) {
		c.Secret = key
		c.Tokens.Issuer = "https://idp.example/"
		c.Tokens.Audience = []string{"driftguard", "bridge"}
	})
	tok := func(change func(jwt.MapClaims)) string {
		return signed(t, jwt.SigningMethodHS256, []byte(key), "", bob(func(c jwt.MapClaims) {
			c["iss"], c["aud"] = "https://idp.example/", "bridge"
		}, change))
	}
	mustAccept(t, v, "the issuer and an audience", tok(func(jwt.MapClaims) {}))
	mustAccept(t, v, "audiences among which one is the bridge's", tok(func(c jwt.MapClaims) { c["aud"] = []string{"billing", "driftguard"} }))
	mustRefuse(t, v, "another audience", tok(func(c jwt.MapClaims) { c["aud"] = "billing" }), "audience (aud) is not the bridge's")
	mustRefuse(t, v, "no audience", tok(func(c jwt.MapClaims) { delete(c, "aud") }), "aud")
	mustRefuse(t, v, "another issuer", tok(func(c jwt.MapClaims) { c["iss"] = "https://evil.example/" }), "issuer (iss) is not the bridge's")
	mustRefuse(t, v, "no issuer", tok(func(c jwt.MapClaims) { delete(c, "iss") }), "iss")
	// Without them configured, neither is checked.
	open := testVerifier(t, func(c *config.Bridge) { c.Secret = key })
	mustAccept(t, open, "any issuer and audience when none is configured", tok(func(c jwt.MapClaims) { c["aud"], c["iss"] = "billing", "x" }))
}

// bridge.tokens.leeway takes a token that much past its exp and before
// its nbf, and not a second more; without it, neither.
func TestTokenLeeway(t *testing.T) {
	key := strings.Repeat("k", 32)
	at := func(exp, nbf time.Duration) string {
		return signed(t, jwt.SigningMethodHS256, []byte(key), "", bob(func(c jwt.MapClaims) {
			c["exp"], c["nbf"] = time.Now().Add(exp).Unix(), time.Now().Add(nbf).Unix()
		}))
	}
	lenient := testVerifier(t, func(c *config.Bridge) { c.Secret, c.Tokens.Leeway = key, 30*time.Second })
	strict := testVerifier(t, func(c *config.Bridge) { c.Secret = key })
	mustAccept(t, lenient, "expired 10 s ago, within the leeway", at(-10*time.Second, -time.Hour))
	mustAccept(t, lenient, "valid from 10 s ahead, within the leeway", at(time.Hour, 10*time.Second))
	mustRefuse(t, lenient, "expired 60 s ago, past the leeway", at(-time.Minute, -time.Hour), "expired")
	mustRefuse(t, lenient, "valid from 60 s ahead, past the leeway", at(time.Hour, time.Minute), "not valid yet")
	mustRefuse(t, strict, "expired 10 s ago, without leeway", at(-10*time.Second, -time.Hour), "expired")
	mustRefuse(t, strict, "valid from 10 s ahead, without leeway", at(time.Hour, 10*time.Second), "not valid yet")
}

// ES256 tokens verify with a static P-256 key read from a PEM file, by
// its kid; a key without kid verifies the tokens that name none.
func TestES256WithAStaticPEM(t *testing.T) {
	named, unnamed := p256Key(t), p256Key(t)
	namedPath, _ := publicPEM(t, named)
	unnamedPath, _ := publicPEM(t, unnamed)
	v := testVerifier(t, func(c *config.Bridge) {
		c.Tokens.PublicKeys = []config.PublicKeyFile{{KID: "es-1", File: namedPath}, {File: unnamedPath}}
	})
	mustAccept(t, v, "ES256 by kid es-1", signed(t, jwt.SigningMethodES256, named, "es-1", bob()))
	mustAccept(t, v, "ES256 without kid, by the key without one", signed(t, jwt.SigningMethodES256, unnamed, "", bob()))
	mustRefuse(t, v, "es-1's key without kid", signed(t, jwt.SigningMethodES256, named, "", bob()), "not signed with the bridge's keys")
	mustRefuse(t, v, "another key naming es-1", signed(t, jwt.SigningMethodES256, p256Key(t), "es-1", bob()), "not signed with the bridge's keys")
	mustRefuse(t, v, "an unknown kid", signed(t, jwt.SigningMethodES256, named, "es-2", bob()), "no key of the bridge")
	mustRefuse(t, v, "HS256, which no key of this bridge verifies", signed(t, jwt.SigningMethodHS256, []byte(strings.Repeat("s", 32)), "", bob()), "(ES256)")
}

// Several HS256 keys, each by its kid, beside bridge.secret for the
// tokens that name none: rotation without a moment when tokens fail.
func TestSeveralHS256Keys(t *testing.T) {
	secret, k1, k2 := strings.Repeat("s", 32), strings.Repeat("1", 32), strings.Repeat("2", 40)
	v := testVerifier(t, func(c *config.Bridge) {
		c.Secret = secret
		c.Tokens.HS256Keys = "2026-11:" + k1 + ", 2026-12:" + k2
	})
	hs := func(key, kid string) string { return signed(t, jwt.SigningMethodHS256, []byte(key), kid, bob()) }
	mustAccept(t, v, "bridge.secret, no kid", hs(secret, ""))
	mustAccept(t, v, "kid 2026-11", hs(k1, "2026-11"))
	mustAccept(t, v, "kid 2026-12", hs(k2, "2026-12"))
	mustRefuse(t, v, "kid 2026-11 signed with 2026-12's key", hs(k2, "2026-11"), "not signed with the bridge's keys (HS256)")
	mustRefuse(t, v, "a kid's key without the kid", hs(k1, ""), "not signed with the bridge's keys")
	mustRefuse(t, v, "bridge.secret naming a kid", hs(secret, "2026-12"), "not signed with the bridge's keys")
	mustRefuse(t, v, "an unknown kid", hs(k1, "2027-01"), "no key of the bridge has the token's key id")
	mustRefuse(t, v, "a token not valid yet", signed(t, jwt.SigningMethodHS256, []byte(k1), "2026-11", bob(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), "not valid yet")
	// Only keys with kids: a token without one is refused.
	kidsOnly := testVerifier(t, func(c *config.Bridge) { c.Tokens.HS256Keys = "2026-12:" + k2 })
	mustRefuse(t, kidsOnly, "no kid when every key has one", hs(secret, ""), "no key of the bridge")
	mustAccept(t, kidsOnly, "kid 2026-12 alone", hs(k2, "2026-12"))
	// Sign with a kid is what `driftguard token --kid` prints.
	tok, err := SignKID([]byte(k2), "2026-12", "bob", "", []string{"presence"}, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mustAccept(t, v, "SignKID", tok)
}

// bridge.tokens.streams_claim renames the claim of the streams: an array
// of names, or one string of them separated by spaces; the `streams`
// claim is then not read.
func TestStreamsClaimRenamed(t *testing.T) {
	key := strings.Repeat("k", 32)
	const claim = "https://driftguard.dev/streams"
	v := testVerifier(t, func(c *config.Bridge) {
		c.Secret = key
		c.Tokens.StreamsClaim = claim
	})
	tok := func(change func(jwt.MapClaims)) string {
		return signed(t, jwt.SigningMethodHS256, []byte(key), "", bob(func(c jwt.MapClaims) { delete(c, "streams") }, change))
	}
	for what, tc := range map[string]struct {
		tok  string
		want []string
	}{
		"an array":           {tok(func(c jwt.MapClaims) { c[claim] = []string{"presence", "chat"} }), []string{"presence", "chat"}},
		"a string of names":  {tok(func(c jwt.MapClaims) { c[claim] = "presence chat" }), []string{"presence", "chat"}},
		"streams, not named": {tok(func(c jwt.MapClaims) { c["streams"] = []string{"*"} }), nil},
		"streams too":        {tok(func(c jwt.MapClaims) { c["streams"], c[claim] = "*", []string{"chat"} }), []string{"chat"}},
	} {
		c := mustAccept(t, v, what, tc.tok)
		if !slices.Equal(c.Streams, tc.want) {
			t.Errorf("%s: streams %q, want %q", what, c.Streams, tc.want)
		}
	}
	mustRefuse(t, v, "a claim that is neither", tok(func(c jwt.MapClaims) { c[claim] = 7 }), "malformed")
	// The default reads streams, an array or a string.
	def := testVerifier(t, func(c *config.Bridge) { c.Secret = key })
	if c := mustAccept(t, def, "streams by default", signed(t, jwt.SigningMethodHS256, []byte(key), "", bob())); !slices.Equal(c.Streams, []string{"presence"}) {
		t.Errorf("streams %q, want [presence]", c.Streams)
	}
	if c := mustAccept(t, def, "streams as a string", signed(t, jwt.SigningMethodHS256, []byte(key), "", bob(func(c jwt.MapClaims) { c["streams"] = "presence chat" }))); !slices.Equal(c.Streams, []string{"presence", "chat"}) {
		t.Errorf("streams %q, want [presence chat]", c.Streams)
	}
}

// A token in the query string is taken on the events endpoint only; on
// any other it is refused even when the header holds a valid token.
func TestQueryTokenOnlyForEvents(t *testing.T) {
	key := strings.Repeat("k", 32)
	v := testVerifier(t, func(c *config.Bridge) { c.Secret = key })
	tok := signed(t, jwt.SigningMethodHS256, []byte(key), "", bob())
	r := httptest.NewRequest(http.MethodGet, "/v1/streams/presence/events?cursor=x&access_token="+tok, nil)
	if _, err := v.verify(r, true); err != nil {
		t.Errorf("events: %v", err)
	}
	if _, err := v.verify(r, false); err == nil || !strings.Contains(err.Error(), "only by the events endpoint") {
		t.Errorf("elsewhere: %v, want refused", err)
	}
	r.Header.Set("Authorization", "Bearer "+tok)
	if _, err := v.verify(r, false); err == nil {
		t.Error("elsewhere with the header too: accepted, want refused")
	}
}
