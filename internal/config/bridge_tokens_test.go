package config_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
)

// writePEM writes a PEM block of type typ holding der and returns its path.
func writePEM(t *testing.T, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), strings.ReplaceAll(strings.ToLower(typ), " ", "-")+".pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The token keys: defaults, the keys read with their algorithms, and
// every invalid setting refused at start with its path.
func TestBridgeTokenKeys(t *testing.T) {
	load := func(yaml string, environ ...string) (*config.Config, error) { return loadYAML(t, yaml, environ...) }
	cfg, err := load("bridge: {}")
	if err != nil {
		t.Fatal(err)
	}
	if tk := cfg.Bridge.Tokens; tk.JWKSRefresh != 15*time.Minute || tk.JWKSMinRefresh != time.Minute || tk.StreamsClaim != "streams" {
		t.Fatalf("defaults: %+v", tk)
	}
	if cfg.Bridge.HasKey() {
		t.Error("HasKey without any key")
	}

	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	weakRSA, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	pkix := func(k any) []byte {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	rsaPath := writePEM(t, "PUBLIC KEY", pkix(&rsaKey.PublicKey))
	pkcs1Path := writePEM(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey))
	esPath := writePEM(t, "PUBLIC KEY", pkix(&p256.PublicKey))
	cfg, err = load("bridge:\n  tokens:\n    public_keys: [{kid: r, file: "+rsaPath+"}, {kid: p, file: "+pkcs1Path+"}, {kid: e, file: "+esPath+"}]\n",
		"DRIFTGUARD_BRIDGE_HS256_KEYS=k1:"+strings.Repeat("1", 32)+",k2:"+strings.Repeat("2", 32),
		"DRIFTGUARD_BRIDGE_SECRET="+strings.Repeat("s", 32))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := cfg.Bridge.TokenKeys()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.HS256) != 3 || string(keys.HS256["k2"]) != strings.Repeat("2", 32) || string(keys.HS256[""]) != strings.Repeat("s", 32) {
		t.Errorf("HS256 keys by kid: %d keys", len(keys.HS256))
	}
	var algs []string
	for _, k := range keys.Public {
		algs = append(algs, k.KID+"="+k.Alg)
	}
	if got := strings.Join(algs, " "); got != "r=RS256 p=RS256 e=ES256" {
		t.Errorf("public keys %s, want r=RS256 p=RS256 e=ES256", got)
	}
	if s := cfg.Bridge.String(); strings.Contains(s, strings.Repeat("1", 32)) || !strings.Contains(s, config.Redacted) {
		t.Errorf("the HS256 keys are not redacted: %s", s)
	}

	missing := filepath.Join(t.TempDir(), "none.pem")
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	private := writePEM(t, "PRIVATE KEY", der)
	for yaml, want := range map[string]string{
		"bridge: {tokens: {jwks_url: http://idp.example/jwks}}":                                                  `in bridge.tokens.jwks_url: "http://idp.example/jwks" is http: the keys that sign tokens must come over https`,
		"bridge: {tokens: {jwks_url: ftp://idp.example/jwks}}":                                                   "is not an https URL",
		"bridge: {tokens: {jwks_url: /jwks}}":                                                                    "has no host",
		"bridge: {tokens: {jwks_refresh: 10ms}}":                                                                 "in bridge.tokens.jwks_refresh: must be at least 1s",
		"bridge: {tokens: {jwks_min_refresh: 0s, jwks_url: https://idp.example/j}}":                              "", // 0 is the default
		"bridge: {tokens: {jwks_min_refresh: 500ms}}":                                                            "in bridge.tokens.jwks_min_refresh: must be at least 1s",
		"bridge: {tokens: {leeway: 10m}}":                                                                        "in bridge.tokens.leeway",
		"bridge: {tokens: {leeway: -1s}}":                                                                        "in bridge.tokens.leeway",
		"bridge: {tokens: {streams_claim: 'a b'}}":                                                               "in bridge.tokens.streams_claim",
		"bridge: {tokens: {audience: ['']}}":                                                                     "in bridge.tokens.audience[0]: is empty",
		"bridge: {secret: short}":                                                                                "in bridge.secret: is 5 bytes; at least 32 are needed",
		"bridge: {tokens: {hs256_keys: 'k1:short'}}":                                                             `in bridge.tokens.hs256_keys[0]: the key of kid "k1" is 5 bytes`,
		"bridge: {tokens: {hs256_keys: 'nokid" + strings.Repeat("x", 32) + "'}}":                                 "in bridge.tokens.hs256_keys[0]: is not kid:key",
		"bridge: {tokens: {hs256_keys: ':" + strings.Repeat("x", 32) + "'}}":                                     "is not kid:key",
		"bridge: {tokens: {hs256_keys: 'a:" + strings.Repeat("x", 32) + ",a:" + strings.Repeat("y", 32) + "'}}":  `in bridge.tokens.hs256_keys[1]: kid "a" is named twice`,
		"bridge: {tokens: {public_keys: [{file: " + missing + "}]}}":                                             "in bridge.tokens.public_keys[0].file: open " + missing,
		"bridge: {tokens: {public_keys: [{file: " + garbage + "}]}}":                                             "holds no PEM block",
		"bridge: {tokens: {public_keys: [{file: ''}]}}":                                                          "in bridge.tokens.public_keys[0].file: is empty",
		"bridge: {tokens: {public_keys: [{file: " + private + "}]}}":                                             "holds a private key (PRIVATE KEY): give the public key alone",
		"bridge: {tokens: {public_keys: [{file: " + writePEM(t, "PUBLIC KEY", pkix(&weakRSA.PublicKey)) + "}]}}": "the RSA key is 1024 bits; at least 2048 are needed",
		"bridge: {tokens: {public_keys: [{file: " + writePEM(t, "PUBLIC KEY", pkix(&p384.PublicKey)) + "}]}}":    "the EC key is on P-384; ES256 needs P-256",
		"bridge: {tokens: {public_keys: [{file: " + writePEM(t, "PUBLIC KEY", []byte("junk")) + "}]}}":           "in bridge.tokens.public_keys[0].file",
		"bridge: {tokens: {public_keys: [{kid: x, file: " + rsaPath + "}, {kid: x, file: " + pkcs1Path + "}]}}":  `in bridge.tokens.public_keys[1].kid: another RS256 key has kid "x"`,
		"bridge: {tokens: {jwks_url: 'http://127.0.0.1:8080/jwks'}}":                                             "",
		"bridge: {tokens: {jwks_url: 'http://localhost:8080/jwks'}}":                                             "",
		"bridge: {tokens: {jwks_url: 'http://[::1]:8080/jwks'}}":                                                 "",
	} {
		_, err := load(yaml)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", yaml, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", yaml, err, want)
		case err != nil && strings.Contains(err.Error(), "short"):
			t.Errorf("%s: the error quotes the secret: %v", yaml, err)
		}
	}
}
