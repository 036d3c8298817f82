package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/driftguard/driftguard/internal/config"
)

func TestDecodeIsStrict(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		pointer string // for a located error
		ok      bool
	}{
		{name: "object", body: `{"a":1,"b":[true,null,"x"]}`, ok: true},
		{name: "numbers stay exact", body: `{"n":9007199254740991,"x":-12.50}`, ok: true},
		{name: "duplicate key", body: `{"a":1,"a":2}`, pointer: "/a"},
		{name: "nested duplicate key", body: `{"a":{"b/c":1,"b/c":2}}`, pointer: "/a/b~1c"},
		{name: "keys differing in case are distinct", body: `{"a":1,"A":2}`, ok: true},
		{name: "invalid UTF-8", body: "{\"a\":\"\xff\"}"},
		{name: "trailing data", body: `{} {}`},
		{name: "not JSON", body: `a=1`},
		{name: "empty", body: ``},
		{name: "nesting at the limit", body: strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), ok: true},
		{name: "nesting over the limit", body: `{"x":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`, pointer: "/x" + strings.Repeat("/0", MaxDepth-1)},
		{name: "escapes", body: `{"a\u0062":"\ud83d\ude00 \"\\\/\b\f\n\r\t\u00e9","lone surrogate":"\ud800x"}`, ok: true},
		{name: "duplicate key spelled with an escape", body: `{"a":1,"\u0061":2}`, pointer: "/a"},
		{name: "control character in a string", body: "{\"a\":\"\n\"}"},
		{name: "leading zero", body: `{"a":01}`},

		// I-JSON (RFC 7493): a float64 reader must read back what was sent.
		{name: "normal decimals", body: `[0.1,12.5,1e3,-0,2.5E-3,1.7976931348623157e308,5e-324,0.0e-999]`, ok: true},
		{name: "integers up to 2^53-1", body: `[9007199254740991,-9007199254740991]`, ok: true},
		{name: "17 significant digits", body: `[1.2345678901234567,12345678901234567e5]`, ok: true},
		{name: "zeros that only place the point", body: `[1.000000000000000000000e5,0.00000000000000000000001,1000000000000000000000.0]`, ok: true},
		{name: "integer over 2^53-1", body: `{"a":[1,9007199254740992]}`, pointer: "/a/1"},
		{name: "integer under -(2^53-1)", body: `{"n":-9007199254740992}`, pointer: "/n"},
		{name: "integer over 2^64", body: `{"n":99999999999999999999}`, pointer: "/n"},
		{name: "overflows float64", body: `{"n":1e400}`, pointer: "/n"},
		{name: "overflows float64 negative", body: `{"n":-1.8e308}`, pointer: "/n"},
		{name: "underflows to zero", body: `{"n":1e-400}`, pointer: "/n"},
		// Exact, but a validator would do big-number arithmetic on it.
		{name: "literal longer than 400 characters", body: `{"n":1.` + strings.Repeat("0", 400) + `}`, pointer: "/n"},
		{name: "18 significant digits", body: `{"n":0.123456789012345678}`, pointer: "/n"},
		{name: "digits beyond float64 in the integer part", body: `{"n":100000000000000000001.5}`, pointer: "/n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := decode([]byte(tc.body))
			if tc.ok {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if std := decodeWithEncodingJSON(t, []byte(tc.body)); !reflect.DeepEqual(v, std) {
					t.Fatalf("decoded %#v, encoding/json %#v", v, std)
				}
				if tc.name == "numbers stay exact" && v.(map[string]any)["x"].(json.Number).String() != "-12.50" {
					t.Fatalf("number changed: %v", v)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %q", tc.body)
			}
			var fe *FieldError
			if tc.pointer != "" && (!errors.As(err, &fe) || fe.Pointer != tc.pointer) {
				t.Fatalf("error %v, want one located at %s", err, tc.pointer)
			}
		})
	}
}

func TestExtractPresence(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Streams["presence"]
	doc, err := Parse([]byte(`{"event_id":"e1","user_id":"u1","presence":"ONLINE","sequence_number":841,"timestamp":1700000000}`))
	if err != nil {
		t.Fatal(err)
	}
	f, err := doc.Extract(s, "fallback")
	if err != nil {
		t.Fatal(err)
	}
	want := Fields{Key: "u1", EventID: "e1", Type: "presence.changed", Version: 841, HasVersion: true, OccurredAtMs: 1_700_000_000_000}
	if f != want {
		t.Fatalf("got %+v, want %+v", f, want)
	}
	// Without event_id in the body the delivery id is the event id.
	doc, _ = Parse([]byte(`{"user_id":"u1","sequence_number":1}`))
	if f, err = doc.Extract(s, "msg_1"); err != nil || f.EventID != "msg_1" {
		t.Fatalf("fallback id: %+v %v", f, err)
	}
	for body, pointer := range map[string]string{
		`{"event_id":"e","sequence_number":1}`:                               "/user_id",
		`{"event_id":"e","user_id":"u","sequence_number":-1}`:                "/sequence_number",
		`{"event_id":"e","user_id":"u","sequence_number":1.5}`:               "/sequence_number",
		`{"event_id":"e","user_id":"u","sequence_number":"1"}`:               "/sequence_number",
		`{"event_id":"e","user_id":{},"sequence_number":1}`:                  "/user_id",
		`{"event_id":"e","user_id":"u","sequence_number":1,"timestamp":"x"}`: "/timestamp",
		// U+0000 in a key could reach the parts of another key's value.
		`{"event_id":"e","user_id":"u\u0000s","sequence_number":1}`: "/user_id",
	} {
		doc, err := Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		_, err = doc.Extract(s, "")
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Pointer != pointer {
			t.Errorf("%s: error %v, want one at %s", body, err, pointer)
		}
	}
}

// Clock reads a time in the stream's unit, and tells an absent time (or a
// null) from one that is there but unreadable, where clockAt takes both
// absences as 0.
func TestClockTellsMissingFromMalformed(t *testing.T) {
	doc, err := Parse([]byte(`{"s":1700000000,"ms":1700000000123,"at":"2023-11-14T22:13:20.5Z","none":null,"text":"x","frac":1.5}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		unit, pointer string
		ms            int64
		problem       string // "" when read, else the FieldError's
	}{
		{"s", "/s", 1_700_000_000_000, ""},
		{"ms", "/ms", 1_700_000_000_123, ""},
		{"rfc3339", "/at", 1_700_000_000_500, ""},
		{"s", "/absent", 0, problemMissing},
		{"s", "/none", 0, problemMissing},
		{"s", "/text", 0, "must be an integer"},
		{"s", "/frac", 0, "must be an integer"},
		{"rfc3339", "/s", 0, "must be an RFC 3339 time"},
	}
	for _, tc := range cases {
		s := &config.Stream{OccurredAtUnit: tc.unit}
		ms, err := doc.Clock(s, tc.pointer)
		var fe *FieldError
		switch {
		case tc.problem == "" && (err != nil || ms != tc.ms):
			t.Errorf("%s in %s: %d %v, want %d", tc.pointer, tc.unit, ms, err, tc.ms)
		case tc.problem != "" && (!errors.As(err, &fe) || fe.Problem != tc.problem || fe.Pointer != tc.pointer):
			t.Errorf("%s in %s: %v, want %q at %s", tc.pointer, tc.unit, err, tc.problem, tc.pointer)
		case IsMissing(err) != (tc.problem == problemMissing):
			t.Errorf("%s in %s: IsMissing(%v) = %v", tc.pointer, tc.unit, err, IsMissing(err))
		}
	}
}

func TestLookupFollowsRFC6901(t *testing.T) {
	doc, err := Parse([]byte(`{"a/b":{"m~n":[10,20]}}`))
	if err != nil {
		t.Fatal(err)
	}
	v, err := doc.Lookup("/a~1b/m~0n/1")
	if err != nil || v.Text() != "20" {
		t.Fatalf("got %v %v", v, err)
	}
	if _, err := doc.Lookup("/a~1b/m~0n/2"); err == nil {
		t.Fatal("index past the end resolved")
	}
}

// Keys differing only in case are refused where a catalogue pointer reads
// one of them: a reader matching keys case-insensitively, such as Go's struct
// decoding, could read the other. Elsewhere they are distinct keys.
func TestExtractRefusesKeysDifferingOnlyInCase(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Streams["presence"]
	for body, pointer := range map[string]string{
		`{"event_id":"e","user_id":"u","User_ID":"v","sequence_number":1}`:                  "/user_id",
		`{"event_id":"e","EVENT_ID":"f","user_id":"u","sequence_number":1}`:                 "/event_id",
		`{"event_id":"e","user_id":"u","sequence_number":1,"Sequence_Number":2}`:            "/sequence_number",
		`{"event_id":"e","user_id":"u","sequence_number":1,"timestamp":1,"TimeStamp":null}`: "/timestamp",
	} {
		doc, err := Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		_, err = doc.Extract(s, "fallback")
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Pointer != pointer || !strings.HasPrefix(fe.Problem, "ambiguous") {
			t.Errorf("%s: error %v, want an ambiguity at %s", body, err, pointer)
		}
	}
	doc, err := Parse([]byte(`{"event_id":"e","user_id":"u","sequence_number":1,"note":"a","NOTE":"b"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := doc.Extract(s, ""); err != nil {
		t.Errorf("keys no pointer reads: %v", err)
	}
	doc, err = Parse([]byte(`{"a":{"b":1,"B":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := doc.Lookup("/a/b"); err == nil {
		t.Error("Lookup resolved a key with a case variant beside it")
	}
}

// The strict decoder never panics and accepts only what encoding/json
// accepts, never invalid UTF-8, building the same value. It may refuse more,
// but valid JSON only for a strictness rule, located: a refusal without a
// location would be a bug of its own scanner. Every number it accepts
// survives a float64 reader.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":1}`,
		`{"a":1,"a":2}`, "{\"a\":\"\xff\"}", `[[[[]]]]`, `{"a":{"b":[1,2,{"c":null}]}}`, `1e999`, `"x"`, ``, `{} {}`,
		`9007199254740993`, `[0.1,-0,1E+2,0.123456789012345678]`, `{"\u0061":"\ud800\udc00\ud800"}`, `{"a":1,"A":2}`, `[1e-400,5e-324]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := decode(body)
		valid := json.Valid(body) && utf8.Valid(body)
		if err != nil {
			var fe *FieldError
			if valid && !errors.As(err, &fe) {
				t.Fatalf("refused valid JSON %q without a located reason: %v", body, err)
			}
			return
		}
		if !valid {
			t.Fatalf("accepted %q", body)
		}
		if std := decodeWithEncodingJSON(t, body); !reflect.DeepEqual(v, std) {
			t.Fatalf("decoded %#v, encoding/json %#v", v, std)
		}
		checkFloat64Safe(t, v)
	})
}

// decode parses body and builds its generic tree.
func decode(body []byte) (any, error) {
	doc, err := Parse(body)
	if err != nil {
		return nil, err
	}
	defer doc.Release()
	return doc.Root().Any(), nil
}

// decodeWithEncodingJSON is the reference value: encoding/json with exact
// numbers.
func decodeWithEncodingJSON(t *testing.T, body []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("encoding/json rejects %q: %v", body, err)
	}
	return v
}

// checkFloat64Safe fails when a number in v would not survive a float64
// reader: an integer that comes back different, or any number that
// overflows or becomes 0.
func checkFloat64Safe(t *testing.T, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for _, member := range v {
			checkFloat64Safe(t, member)
		}
	case []any:
		for _, member := range v {
			checkFloat64Safe(t, member)
		}
	case json.Number:
		f, err := strconv.ParseFloat(v.String(), 64)
		if err != nil {
			t.Fatalf("accepted %s: %v", v, err)
		}
		mantissa, _, _ := strings.Cut(strings.ToLower(v.String()), "e")
		if f == 0 && strings.ContainsAny(mantissa, "123456789") {
			t.Fatalf("accepted %s, which a float64 reader reads as 0", v)
		}
		if strings.ContainsAny(v.String(), ".eE") {
			return
		}
		if i, err := strconv.ParseInt(v.String(), 10, 64); err != nil || int64(f) != i {
			t.Fatalf("accepted the integer %s, which a float64 reader reads as %v", v, f)
		}
	}
}
