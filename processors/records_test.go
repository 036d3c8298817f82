package processors

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/envelope"
)

// anyText is any string, including quotes, control characters, U+2028 and
// invalid UTF-8.
var anyText = rapid.OneOf(rapid.String(), rapid.Custom(func(t *rapid.T) string {
	return string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes"))
}))

// fill sets every field of the struct v points to, so a field added to the
// record later and not encoded by hand fails the comparison below.
func fill(t *rapid.T, v any) {
	s := reflect.ValueOf(v).Elem()
	for i := range s.NumField() {
		f, name := s.Field(i), s.Type().Field(i).Name
		switch {
		case f.Type() == reflect.TypeFor[json.RawMessage]():
			if rapid.Bool().Draw(t, name+" set") {
				f.SetBytes([]byte(`{"presence":"ONLINE","n":[1,2.5,"\u00e9"]}`))
			}
		case f.Kind() == reflect.String:
			f.SetString(anyText.Draw(t, name))
		case f.Kind() == reflect.Int32:
			f.SetInt(int64(rapid.Int32().Draw(t, name)))
		case f.CanInt():
			f.SetInt(rapid.Int64Range(math.MinInt64, math.MaxInt64).Draw(t, name))
		default:
			t.Fatalf("field %s of kind %s: teach the hand encoder and this test", name, f.Kind())
		}
	}
}

// sameAsEncodingJSON checks that the hand-encoded record decodes to what
// encoding/json's encoding of the same value decodes to.
func sameAsEncodingJSON(t *rapid.T, v any, hand []byte) {
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(t, hand, want) {
		t.Fatalf("hand-encoded %s\nencoding/json %s", hand, want)
	}
}

func TestOutcomeAndStateEncodeLikeEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var o envelope.Outcome
		fill(t, &o)
		sameAsEncodingJSON(t, &o, appendOutcome(nil, &o))
		var st envelope.State
		fill(t, &st)
		sameAsEncodingJSON(t, &st, appendState(nil, &st))
	})
}
