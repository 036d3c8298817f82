package config

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// BridgeTokens says which JWTs the bridge accepts besides those signed
// with bridge.secret: tokens of an identity provider (RS256 or ES256,
// keys from a JWKS URL or PEM files) and more HS256 keys, each named by a
// key id, for rotation (docs/bridge.md, "Tokens").
type BridgeTokens struct {
	// HS256Keys are HS256 keys besides bridge.secret, comma-separated
	// `kid:key`, each key at least 32 bytes: a token whose header names
	// kid is checked with that key alone. bridge.secret is the key of the
	// tokens that name none. Set it with DRIFTGUARD_BRIDGE_HS256_KEYS.
	HS256Keys string `yaml:"hs256_keys" env:"DRIFTGUARD_BRIDGE_HS256_KEYS" redact:"true"`
	// JWKSURL is the identity provider's JWK Set (its jwks_uri): https,
	// or http on loopback only. Its RS256 and ES256 keys sign tokens.
	JWKSURL string `yaml:"jwks_url" env:"DRIFTGUARD_BRIDGE_JWKS_URL"`
	// JWKSRefresh is how often the JWK Set is fetched again, so that a
	// key the provider removed stops verifying. Default 15m.
	JWKSRefresh time.Duration `yaml:"jwks_refresh"`
	// JWKSMinRefresh is the shortest time between two fetches caused by
	// tokens naming a kid the bridge does not hold (a key the provider
	// has just added), so that made-up kids cannot make the bridge
	// hammer the provider. Default 1m.
	JWKSMinRefresh time.Duration `yaml:"jwks_min_refresh"`
	// PublicKeys are static RS256 or ES256 keys, in PEM files.
	PublicKeys []PublicKeyFile `yaml:"public_keys"`
	// Issuer, when set, must be the token's `iss`.
	Issuer string `yaml:"issuer" env:"DRIFTGUARD_BRIDGE_TOKEN_ISSUER"`
	// Audience, when set, must hold one of the token's `aud`.
	Audience []string `yaml:"audience" env:"DRIFTGUARD_BRIDGE_TOKEN_AUDIENCE"`
	// StreamsClaim is the claim that lists the streams a token may read.
	// Default streams.
	StreamsClaim string `yaml:"streams_claim"`
	// Leeway is how far the bridge's clock may be from the token issuer's:
	// a token is taken until Leeway after its `exp`, and from Leeway
	// before its `nbf` and `iat`. Default 0 (an issuer on the same clock,
	// bridge.secret's); a few seconds to a minute for an identity provider
	// whose clock drifts from the bridge's. At most 5m.
	Leeway time.Duration `yaml:"leeway"`
}

// PublicKeyFile is a static public key of the bridge's tokens.
type PublicKeyFile struct {
	// KID is the key id of the tokens it verifies; empty, it verifies
	// the tokens that name none.
	KID string `yaml:"kid"`
	// File is a PEM file: a PUBLIC KEY, an RSA PUBLIC KEY or a
	// CERTIFICATE. An RSA key (at least 2048 bits) verifies RS256, a
	// P-256 key ES256.
	File string `yaml:"file"`
}

// Defaults of the bridge's tokens (docs/bridge.md, "Tokens" says why).
const (
	DefaultJWKSRefresh    = 15 * time.Minute
	DefaultJWKSMinRefresh = time.Minute
	DefaultStreamsClaim   = "streams"
	// MaxTokenLeeway bounds bridge.tokens.leeway: clocks kept by NTP are
	// within seconds of each other, and a token must not outlive its
	// expiry by much more.
	MaxTokenLeeway = 5 * time.Minute
	// minRSABits is the shortest RSA key that verifies tokens: shorter
	// ones are factorable by a determined attacker.
	minRSABits = 2048
)

// Algorithms of the bridge's tokens; each key verifies one of them only.
const (
	AlgHS256 = "HS256"
	AlgRS256 = "RS256"
	AlgES256 = "ES256"
)

func (t *BridgeTokens) applyDefaults() {
	orDefault(&t.JWKSRefresh, DefaultJWKSRefresh)
	orDefault(&t.JWKSMinRefresh, DefaultJWKSMinRefresh)
	orDefault(&t.StreamsClaim, DefaultStreamsClaim)
}

// TokenKeys are the bridge's static keys, read and checked.
type TokenKeys struct {
	// HS256 are the HS256 keys by kid; "" is bridge.secret's.
	HS256 map[string][]byte
	// Public are the static public keys.
	Public []PublicKey
}

// PublicKey is a static key bound to its algorithm.
type PublicKey struct {
	KID, Alg string
	Key      crypto.PublicKey
}

// HasKey reports whether the bridge has any way to verify a token.
func (b Bridge) HasKey() bool {
	return b.Secret != "" || b.Tokens.HS256Keys != "" || b.Tokens.JWKSURL != "" || len(b.Tokens.PublicKeys) > 0
}

// TokenKeys reads the static keys of the bridge's tokens: bridge.secret,
// bridge.tokens.hs256_keys and the PEM files of bridge.tokens.public_keys.
// Its errors name the path; they never quote a secret.
func (b Bridge) TokenKeys() (TokenKeys, error) {
	keys := TokenKeys{HS256: map[string][]byte{}}
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("in %s: %s", path, fmt.Sprintf(format, args...)))
	}
	if n := len(b.Secret); n > 0 && n < MinBridgeSecretBytes {
		add("bridge.secret", "is %d bytes; at least %d are needed", n, MinBridgeSecretBytes)
	} else if n > 0 {
		keys.HS256[""] = []byte(b.Secret)
	}
	for i, entry := range SplitList(b.Tokens.HS256Keys) {
		path := fmt.Sprintf("bridge.tokens.hs256_keys[%d]", i)
		kid, key, ok := strings.Cut(entry, ":")
		switch {
		case !ok || kid == "":
			add(path, "is not kid:key (the key id, a colon, then the key)")
		case len(key) < MinBridgeSecretBytes:
			add(path, "the key of kid %q is %d bytes; at least %d are needed", kid, len(key), MinBridgeSecretBytes)
		case keys.HS256[kid] != nil:
			add(path, "kid %q is named twice", kid)
		default:
			keys.HS256[kid] = []byte(key)
		}
	}
	seen := map[string]bool{}
	for i, f := range b.Tokens.PublicKeys {
		path := fmt.Sprintf("bridge.tokens.public_keys[%d]", i)
		key, alg, err := readPublicKey(f.File)
		if err != nil {
			add(path+".file", "%v", err)
			continue
		}
		if seen[alg+" "+f.KID] {
			add(path+".kid", "another %s key has kid %q: a token could not say which", alg, f.KID)
			continue
		}
		seen[alg+" "+f.KID] = true
		keys.Public = append(keys.Public, PublicKey{KID: f.KID, Alg: alg, Key: key})
	}
	return keys, errors.Join(errs...)
}

// readPublicKey reads a PEM public key or certificate and the algorithm
// it verifies: RS256 for RSA, ES256 for P-256. A private key is refused:
// the bridge only verifies, and its file should not be able to sign.
func readPublicKey(file string) (crypto.PublicKey, string, error) {
	if file == "" {
		return nil, "", errors.New("is empty: name a PEM file")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, "", err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, "", fmt.Errorf("%s holds no PEM block", file)
	}
	var key any
	switch block.Type {
	case "PUBLIC KEY":
		key, err = x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		key, err = x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
			key = cert.PublicKey
		}
	default:
		if strings.Contains(block.Type, "PRIVATE") {
			return nil, "", fmt.Errorf("%s holds a private key (%s): give the public key alone (openssl pkey -pubout)", file, block.Type)
		}
		return nil, "", fmt.Errorf("%s holds a %s, not a PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", file, block.Type)
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return nil, "", fmt.Errorf("%s: the RSA key is %d bits; at least %d are needed", file, k.N.BitLen(), minRSABits)
		}
		return k, AlgRS256, nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return nil, "", fmt.Errorf("%s: the EC key is on %s; ES256 needs P-256", file, k.Curve.Params().Name)
		}
		return k, AlgES256, nil
	default:
		return nil, "", fmt.Errorf("%s: a %T verifies neither RS256 nor ES256", file, key)
	}
}

// validateTokens checks the bridge's token settings, each error naming
// its path.
func (b *Bridge) validateTokens() []error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("in %s: %s", path, fmt.Sprintf(format, args...)))
	}
	if _, err := b.TokenKeys(); err != nil {
		errs = append(errs, err)
	}
	t := b.Tokens
	if t.JWKSURL != "" {
		if err := checkJWKSURL(t.JWKSURL); err != nil {
			add("bridge.tokens.jwks_url", "%v", err)
		}
	}
	if t.JWKSRefresh < time.Second {
		add("bridge.tokens.jwks_refresh", "must be at least 1s, got %s", t.JWKSRefresh)
	}
	if t.JWKSMinRefresh < time.Second {
		add("bridge.tokens.jwks_min_refresh", "must be at least 1s (each unknown kid may fetch the JWK Set once in it), got %s", t.JWKSMinRefresh)
	}
	if t.StreamsClaim == "" || strings.ContainsFunc(t.StreamsClaim, func(r rune) bool { return r <= ' ' }) {
		add("bridge.tokens.streams_claim", "%q is not a claim name", t.StreamsClaim)
	}
	if t.Leeway < 0 || t.Leeway > MaxTokenLeeway {
		add("bridge.tokens.leeway", "must be between 0 and %s (a token is taken this long past its expiry), got %s", MaxTokenLeeway, t.Leeway)
	}
	for i, aud := range t.Audience {
		if aud == "" {
			add(fmt.Sprintf("bridge.tokens.audience[%d]", i), "is empty")
		}
	}
	return errs
}

// checkJWKSURL refuses a JWK Set that a network attacker could replace:
// only https, or http to a loopback address (a sidecar, a test).
func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %w", raw, err)
	case u.Host == "":
		return fmt.Errorf("%q has no host", raw)
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		return nil
	case u.Scheme == "http":
		return fmt.Errorf("%q is http: the keys that sign tokens must come over https (http is allowed on loopback only)", raw)
	default:
		return fmt.Errorf("%q is not an https URL", raw)
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
