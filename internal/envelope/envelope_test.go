package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
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
		{name: "numbers stay exact", body: `{"n":9007199254740993}`, ok: true},
		{name: "duplicate key", body: `{"a":1,"a":2}`, pointer: "/a"},
		{name: "nested duplicate key", body: `{"a":{"b/c":1,"b/c":2}}`, pointer: "/a/b~1c"},
		{name: "keys differing in case are distinct", body: `{"a":1,"A":2}`, ok: true},
		{name: "invalid UTF-8", body: "{\"a\":\"\xff\"}"},
		{name: "trailing data", body: `{} {}`},
		{name: "not JSON", body: `a=1`},
		{name: "empty", body: ``},
		{name: "nesting at the limit", body: strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), ok: true},
		{name: "nesting over the limit", body: `{"x":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`, pointer: "/x" + strings.Repeat("/0", MaxDepth-1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Decode([]byte(tc.body))
			if tc.ok {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if tc.name == "numbers stay exact" && v.(map[string]any)["n"].(json.Number).String() != "9007199254740993" {
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
	doc, err := Decode([]byte(`{"event_id":"e1","user_id":"u1","presence":"ONLINE","sequence_number":841,"timestamp":1700000000}`))
	if err != nil {
		t.Fatal(err)
	}
	f, err := Extract(s, doc, "fallback")
	if err != nil {
		t.Fatal(err)
	}
	want := Fields{Key: "u1", EventID: "e1", Type: "presence.changed", Version: 841, HasVersion: true, OccurredAtMs: 1_700_000_000_000}
	if f != want {
		t.Fatalf("got %+v, want %+v", f, want)
	}
	// Without event_id in the body the delivery id is the event id.
	doc, _ = Decode([]byte(`{"user_id":"u1","sequence_number":1}`))
	if f, err = Extract(s, doc, "msg_1"); err != nil || f.EventID != "msg_1" {
		t.Fatalf("fallback id: %+v %v", f, err)
	}
	for body, pointer := range map[string]string{
		`{"event_id":"e","sequence_number":1}`:                               "/user_id",
		`{"event_id":"e","user_id":"u","sequence_number":-1}`:                "/sequence_number",
		`{"event_id":"e","user_id":"u","sequence_number":1e400}`:             "/sequence_number",
		`{"event_id":"e","user_id":"u","sequence_number":"1"}`:               "/sequence_number",
		`{"event_id":"e","user_id":{},"sequence_number":1}`:                  "/user_id",
		`{"event_id":"e","user_id":"u","sequence_number":1,"timestamp":"x"}`: "/timestamp",
	} {
		doc, err := Decode([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Extract(s, doc, "")
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Pointer != pointer {
			t.Errorf("%s: error %v, want one at %s", body, err, pointer)
		}
	}
}

func TestLookupFollowsRFC6901(t *testing.T) {
	doc, err := Decode([]byte(`{"a/b":{"m~n":[10,20]}}`))
	if err != nil {
		t.Fatal(err)
	}
	v, err := Lookup(doc, "/a~1b/m~0n/1")
	if err != nil || v.(json.Number).String() != "20" {
		t.Fatalf("got %v %v", v, err)
	}
	if _, err := Lookup(doc, "/a~1b/m~0n/2"); err == nil {
		t.Fatal("index past the end resolved")
	}
}

// The strict decoder never panics, accepts only what encoding/json accepts,
// and never accepts invalid UTF-8.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":1,"timestamp":1}`,
		`{"a":1,"a":2}`, "{\"a\":\"\xff\"}", `[[[[]]]]`, `{"a":{"b":[1,2,{"c":null}]}}`, `1e999`, `"x"`, ``, `{} {}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := Decode(body)
		if err != nil {
			return
		}
		if !json.Valid(body) || !utf8.Valid(body) {
			t.Fatalf("accepted %q", body)
		}
		// It decoded the same value as encoding/json with exact numbers.
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var std any
		if err := dec.Decode(&std); err != nil {
			t.Fatalf("encoding/json rejects what Decode accepted: %v", err)
		}
		if !reflect.DeepEqual(v, std) {
			t.Fatalf("decoded %#v, encoding/json %#v", v, std)
		}
	})
}
