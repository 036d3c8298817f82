package ingest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
)

// The Standard Webhooks specification's own test vector.
const (
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = 1614265330
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func standardHeaders(id, ts, sig string) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderWebhookID, id)
	h.Set(webhook.HeaderWebhookTimestamp, ts)
	h.Set(webhook.HeaderWebhookSignature, sig)
	return h
}

// standardMAC is the Standard Webhooks v1 MAC written out from the spec, so
// the checks do not lean on the webhook.Sign they are checking.
func standardMAC(key []byte, id, ts string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	return mac.Sum(nil)
}

func mustStandardScheme(t testenv.Fataler, secrets ...string) *standardScheme {
	t.Helper()
	s, err := newStandardScheme(secrets, 300*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Publisher and edge must both agree with the spec, not just with each
// other: a shared mistake in Sign would pass every round-trip test.
func TestSpecVectorIsProducedBySignatureHeader(t *testing.T) {
	got, err := webhook.SignatureHeader(specSecret, specID, strconv.Itoa(specTimestamp), []byte(specBody))
	if err != nil {
		t.Fatal(err)
	}
	if got != specSignature {
		t.Errorf("SignatureHeader = %q, the spec says %q", got, specSignature)
	}
}

func TestSpecVectorIsAcceptedByStandardScheme(t *testing.T) {
	s := mustStandardScheme(t, specSecret)
	h := standardHeaders(specID, strconv.Itoa(specTimestamp), specSignature)
	if err := s.CheckHeaders(h, time.Unix(specTimestamp, 0)); err != nil {
		t.Fatalf("CheckHeaders: %v", err)
	}
	id, err := s.Verify(h, []byte(specBody))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if id != specID {
		t.Errorf("delivery id = %q, want %q", id, specID)
	}
}

func TestNewSchemeRefusesUnusableSecrets(t *testing.T) {
	short := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, config.MinSecretBytes-1))
	cases := []struct {
		name    string
		secrets []string
	}{
		{"no secret", nil},
		{"empty secret", []string{""}},
		{"key shorter than the minimum", []string{short}},
		{"missing whsec_ prefix", []string{strings.TrimPrefix(specSecret, "whsec_")}},
		{"not base64", []string{"whsec_not*base64"}},
		// One bad secret among good ones must still stop the start: it would
		// otherwise be silently ignored during a rotation.
		{"a bad secret after a good one", []string{specSecret, "whsec_"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, s := presenceConfig(t, tc.secrets...)
			if _, err := NewHandler([]*config.Stream{s}, nil, Options{}); err == nil {
				t.Fatal("NewHandler accepted the stream")
			}
		})
	}
}

// drawJSON draws a JSON value as text with random whitespace, so the bytes
// signed are not those any encoder would produce.
func drawJSON(t *rapid.T, depth int) string {
	ws := func() string {
		return rapid.StringOfN(rapid.SampledFrom([]rune{' ', '\t', '\n', '\r'}), 0, 3, -1).Draw(t, "ws")
	}
	kinds := 5
	if depth > 0 {
		kinds = 7
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
	case 0:
		return "null"
	case 1:
		return strconv.FormatBool(rapid.Bool().Draw(t, "bool"))
	case 2:
		return strconv.FormatInt(rapid.Int64().Draw(t, "int"), 10)
	case 3:
		return strconv.FormatFloat(rapid.Float64Range(-1e300, 1e300).Draw(t, "float"), 'g', -1, 64)
	case 4:
		s, _ := json.Marshal(rapid.String().Draw(t, "string"))
		return string(s)
	case 5:
		n := rapid.IntRange(0, 3).Draw(t, "len")
		items := make([]string, n)
		for i := range items {
			items[i] = ws() + drawJSON(t, depth-1) + ws()
		}
		return "[" + ws() + strings.Join(items, ",") + "]"
	default:
		return drawObject(t, depth-1, ws)
	}
}

func drawObject(t *rapid.T, depth int, ws func() string) string {
	n := rapid.IntRange(0, 5).Draw(t, "members")
	members := make([]string, n)
	for i := range members {
		key, _ := json.Marshal(rapid.String().Draw(t, "key"))
		members[i] = ws() + string(key) + ws() + ":" + ws() + drawJSON(t, depth) + ws()
	}
	return ws() + "{" + ws() + strings.Join(members, ",") + "}" + ws()
}

// drawSecret draws a valid whsec_ secret of any acceptable key length.
func drawSecret(t *rapid.T, label string) string {
	key := rapid.SliceOfN(rapid.Byte(), config.MinSecretBytes, 64).Draw(t, label)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// Any signed JSON object verifies, under any of the stream's secrets, and no
// single-byte change to the body or to the signature does.
func TestStandardSchemeVerifiesSignedObjectsAndRejectsAnyByteChange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		secrets := []string{drawSecret(t, "secret")}
		if rapid.Bool().Draw(t, "rotating") {
			secrets = append(secrets, drawSecret(t, "second secret"))
		}
		signer := rapid.SampledFrom(secrets).Draw(t, "signer")
		scheme := mustStandardScheme(t, secrets...)

		body := []byte(drawObject(t, 2, func() string {
			return rapid.StringOfN(rapid.SampledFrom([]rune{' ', '\t', '\n', '\r'}), 0, 3, -1).Draw(t, "ws")
		}))
		if !json.Valid(body) {
			t.Fatalf("generator made invalid JSON: %q", body)
		}
		id := rapid.StringMatching(`[A-Za-z0-9_-]{1,64}`).Draw(t, "id")
		sent := rapid.Int64Range(1, 1<<33).Draw(t, "timestamp")
		skew := time.Duration(rapid.Int64Range(-300, 300).Draw(t, "skew")) * time.Second
		ts := strconv.FormatInt(sent, 10)
		sig, err := webhook.SignatureHeader(signer, id, ts, body)
		if err != nil {
			t.Fatal(err)
		}
		h := standardHeaders(id, ts, sig)

		if err := scheme.CheckHeaders(h, time.Unix(sent, 0).Add(skew)); err != nil {
			t.Fatalf("CheckHeaders: %v", err)
		}
		if got, err := scheme.Verify(h, body); err != nil || got != id {
			t.Fatalf("Verify = %q, %v; want %q", got, err, id)
		}

		// XOR with a non-zero byte changes exactly one byte.
		i := rapid.IntRange(0, len(body)-1).Draw(t, "body byte")
		changed := append([]byte(nil), body...)
		changed[i] ^= rapid.ByteMin(1).Draw(t, "body xor")
		if _, err := scheme.Verify(h, changed); !IsSignatureError(err) {
			t.Fatalf("Verify accepted the body with byte %d changed: err %v", i, err)
		}

		mac, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, "v1,"))
		if err != nil {
			t.Fatal(err)
		}
		j := rapid.IntRange(0, len(mac)-1).Draw(t, "signature byte")
		mac[j] ^= rapid.ByteMin(1).Draw(t, "signature xor")
		forged := standardHeaders(id, ts, "v1,"+base64.StdEncoding.EncodeToString(mac))
		if _, err := scheme.Verify(forged, body); !IsSignatureError(err) {
			t.Fatalf("Verify accepted the signature with byte %d changed: err %v", j, err)
		}
	})
}

// FuzzStandardSchemeHeaders feeds arbitrary header values and bodies to the
// header check and the verification. Neither may panic, and a request that
// passes both must carry a v1 signature that is the HMAC of its own id,
// timestamp and body under the secret, computed here independently of
// webhook.Sign.
func FuzzStandardSchemeHeaders(f *testing.F) {
	ts := strconv.Itoa(specTimestamp)
	wrong := "v1," + base64.StdEncoding.EncodeToString(make([]byte, sha256.Size))
	f.Add(specID, ts, specSignature, []byte(specBody))
	f.Add(specID, ts, wrong+" "+specSignature, []byte(specBody))
	f.Add(specID, ts, "v2,abc "+specSignature, []byte(specBody))
	f.Add(specID, ts, specSignature, []byte(`{"test": 2432232315}`))
	f.Add(specID, ts+"000", specSignature, []byte(specBody))
	f.Add(specID, "0"+ts, specSignature, []byte(specBody))
	f.Add("msg.1", ts, specSignature, []byte(specBody))
	f.Add(specID, ts, "v1,", []byte(specBody))
	f.Add(specID, ts, "v1,"+strings.Repeat("A", 44), []byte{})
	f.Add(specID, ts, strings.Repeat(specSignature+" ", 17), []byte(specBody))
	f.Add("", "", "", []byte(nil))

	scheme := mustStandardScheme(f, specSecret)
	key, err := config.DecodeStandardSecret(specSecret)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(specTimestamp, 0)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := standardHeaders(id, ts, sig)
		if scheme.CheckHeaders(h, now) != nil {
			return
		}
		got, err := scheme.Verify(h, body)
		if err != nil {
			if !IsSignatureError(err) {
				t.Fatalf("Verify failed with %T, not a SignatureError: %v", err, err)
			}
			return
		}
		if got != id {
			t.Fatalf("delivery id = %q, want the webhook-id %q", got, id)
		}
		if strings.Contains(id, ".") {
			t.Fatalf("accepted webhook-id %q, whose dot makes the signed content ambiguous", id)
		}
		want := standardMAC(key, id, ts, body)
		for _, field := range strings.Fields(sig) {
			v, ok := strings.CutPrefix(field, "v1,")
			if !ok {
				continue
			}
			if decoded, err := base64.StdEncoding.DecodeString(v); err == nil && hmac.Equal(decoded, want) {
				return
			}
		}
		t.Fatalf("accepted id %q ts %q signature %q body %q without a valid v1 signature", id, ts, sig, body)
	})
}
