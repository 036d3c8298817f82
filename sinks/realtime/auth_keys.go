package realtime

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/driftguard/driftguard/internal/config"
)

// verifier checks the tokens of the bridge's clients against its keys
// (bridge.secret and bridge.tokens). Each key is bound to one algorithm,
// and a token is checked only with the keys of the algorithm and key id
// its header names: an HS256 token is never checked with a public key's
// bytes, an RS256 token never with an HMAC key, and `none` or any
// algorithm without a key is refused whatever its signature.
type verifier struct {
	parser *jwt.Parser
	// hs are the HS256 keys by kid; "" is bridge.secret, the key of the
	// tokens that name none.
	hs map[string][]byte
	// public are the static RS256 and ES256 keys.
	public []config.PublicKey
	// jwks holds the identity provider's keys, nil without jwks_url.
	jwks keyfunc.Keyfunc
	// streamsClaim names the claim of the streams.
	streamsClaim string
	// algs and required complete the refusals' details: the algorithms
	// accepted, and the claims required besides exp.
	algs, required string
}

// errNoKey is a token whose kid and algorithm name no key of the bridge.
var errNoKey = errors.New("no key for the token's kid and algorithm")

// jwksTimeout bounds one fetch of the JWK Set, and how long a request
// whose kid is unknown waits for the fetch it may cause.
const jwksTimeout = 10 * time.Second

// newVerifier builds the verifier of cfg's keys; ctx ends the JWK Set's
// refreshes. It fails when no key is configured or one does not read.
func newVerifier(ctx context.Context, cfg config.Bridge, now func() time.Time, log *slog.Logger) (*verifier, error) {
	if !cfg.HasKey() {
		return nil, ErrNoSecret
	}
	keys, err := cfg.TokenKeys()
	if err != nil {
		return nil, err
	}
	t := cfg.Tokens
	v := &verifier{hs: keys.HS256, public: keys.Public, streamsClaim: t.StreamsClaim}
	var algs []string
	if len(keys.HS256) > 0 {
		algs = append(algs, config.AlgHS256)
	}
	for _, k := range keys.Public {
		algs = append(algs, k.Alg)
	}
	if t.JWKSURL != "" {
		algs = append(algs, config.AlgRS256, config.AlgES256)
		if v.jwks, err = newJWKS(ctx, t, log); err != nil {
			return nil, err
		}
	}
	slices.Sort(algs)
	algs = slices.Compact(algs)
	v.algs = strings.Join(algs, ", ")
	opts := []jwt.ParserOption{jwt.WithValidMethods(algs), jwt.WithExpirationRequired(), jwt.WithTimeFunc(now), jwt.WithLeeway(t.Leeway)}
	if t.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(t.Issuer))
		v.required += ", iss"
	}
	if len(t.Audience) > 0 {
		opts = append(opts, jwt.WithAudience(t.Audience...))
		v.required += ", aud"
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

// newJWKS fetches the JWK Set at t.JWKSURL, again every t.JWKSRefresh, and
// when a token names a kid it lacks, at most once per t.JWKSMinRefresh.
// A first fetch that fails is logged and the bridge starts: it refuses
// the provider's tokens until a fetch succeeds.
func newJWKS(ctx context.Context, t config.BridgeTokens, log *slog.Logger) (keyfunc.Keyfunc, error) {
	return keyfunc.NewDefaultOverrideCtx(ctx, []string{t.JWKSURL}, keyfunc.Override{
		Client:          &http.Client{Timeout: jwksTimeout},
		HTTPTimeout:     jwksTimeout,
		RefreshInterval: t.JWKSRefresh,
		// One fetch at once, then one per interval: a request whose kid
		// is unknown while the limiter is empty is refused at once
		// rather than queued (it waits only when the next fetch is due
		// within RateLimitWaitMax).
		RefreshUnknownKID: rate.NewLimiter(rate.Every(t.JWKSMinRefresh), 1),
		RateLimitWaitMax:  jwksTimeout,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(_ context.Context, err error) {
				log.Warn("fetching the JWK Set of the bridge's tokens failed; the keys held are kept", "url", u, "err", err)
			}
		},
	})
}

// key is the jwt.Keyfunc: the keys that may have signed t, of the
// algorithm and kid its header names. ctx is the request's: a fetch of
// the JWK Set for an unknown kid ends with it.
func (v *verifier) key(ctx context.Context, t *jwt.Token) (any, error) {
	kid, ok := "", true
	if raw, named := t.Header["kid"]; named {
		kid, ok = raw.(string)
	}
	alg := t.Method.Alg()
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: the kid is not a string", errNoKey)
	case alg == config.AlgHS256:
		if k, found := v.hs[kid]; found {
			return k, nil
		}
		return nil, errNoKey
	}
	var set jwt.VerificationKeySet
	for _, k := range v.public {
		if k.Alg == alg && k.KID == kid {
			set.Keys = append(set.Keys, k.Key)
		}
	}
	if len(set.Keys) == 0 && v.jwks != nil {
		k, err := v.jwks.KeyfuncCtx(ctx)(t)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNoKey, err)
		}
		set = keysFor(alg, k)
	}
	if len(set.Keys) == 0 {
		return nil, errNoKey
	}
	return set, nil
}

// keysFor keeps of what the JWK Set gave (one key, or a set for a token
// without kid) the keys of alg's type: RSA for RS256, P-256 for ES256. A
// symmetric ("oct") key in the set verifies nothing.
func keysFor(alg string, k any) jwt.VerificationKeySet {
	all, isSet := k.(jwt.VerificationKeySet)
	if !isSet {
		all.Keys = []jwt.VerificationKey{k}
	}
	var kept jwt.VerificationKeySet
	for _, key := range all.Keys {
		switch key := key.(type) {
		case *rsa.PublicKey:
			if alg == config.AlgRS256 {
				kept.Keys = append(kept.Keys, key)
			}
		case *ecdsa.PublicKey:
			if alg == config.AlgES256 && key.Curve == elliptic.P256() {
				kept.Keys = append(kept.Keys, key)
			}
		}
	}
	return kept
}
