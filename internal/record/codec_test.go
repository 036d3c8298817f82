package record

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"unicode"

	"pgregory.net/rapid"
)

// The scanner gives what encoding/json gives, or leaves the input to it.
//
//	go test -run '^$' -fuzz '^FuzzDecodeOutcome$' -fuzztime 200000x ./internal/record
func FuzzDecodeOutcome(f *testing.F) {
	full, _ := json.Marshal(Outcome{Stream: "presence", Key: "alice", EventID: "alice-843", EventType: "presence.changed",
		Version: 843, Outcome: "stale", Reason: "version 842 <= 843", Gap: -1, BufferDepth: 2, MessageID: "m1", AcceptedAtMs: 1_699_999_999_000,
		OccurredAtMs: 1_700_000_000_000, ReceivedAtMs: -5, ProcessedAtMs: 1, InputPartition: 4, InputOffset: 7,
		DecisionID: "presence/4/7/0", Payload: json.RawMessage(`{"a":[1,2.5,"x\"y",{"b":null}],"c":true}`)})
	for _, seed := range []string{
		string(full),
		`{}`, ` { "version" : 1 , "payload" : "s\u00e9" } `, `{"Stream":"x"}`, `{"\u006bey":"k"}`, `{"KEY":"k","key":"j"}`,
		`{"version":1.0}`, `{"version":01}`, `{"version":-0}`, `{"version":9223372036854775808}`, `{"input_partition":2147483648}`,
		`{"payload":null}`, `{"payload":[}`, `{"payload":{"a":"\x"}}`, `{"other":false,"payload":true}`, `{"stream":"caf\xc3"}`,
		`{"stream":"a\tb"}`, `{"decision_id":"orders/t/1700000000000/orphan_ttl/0/o-1"}`, `{"decision_id":7}`, `{"stream":null}`, `{"gap":"1"}`, `{"a":1}x`, `[1]`, `{"a":1,}`, `{"extra":{"k":"\u212a"}}`, "{\"\u212aey\":\"k\"}",
		`{"payload":-.5}`, `{"payload":1.5e+3}`, `{"payload":1.e3}`, `{"payload":"\u00zz"}`, `{"payload":"\u00e9\n"}`, `{"payload":[1,]}`,
		`{"payload":{"a":01}}`, `{"payload":{"a" 1}}`, `{"payload":[[[[[]]]]]}`, `{"payload":nul}`, "{\"payload\":\"\xff\"}",
		// Strings long enough to be read eight bytes at a time, with what
		// stops that at each place of a word.
		`{"stream":"abcdefghijklmnopqrstuvwxyz0123456789"}`, "{\"stream\":\"abcdefghijklmn\xc3\xa9opqrstuvwxyz\"}",
		"{\"stream\":\"abcdefghijklm\xc3opqrstuvwxyz\"}", "{\"key\":\"abcdefghijk\x01lmnopqrstuvwxyz\"}",
		`{"key":"abcdefghij\"klmnopqrstuvwxyz"}`, `{"payload":"abcdefghijklmnop\"qrstuvw\u00e9xyz\\0123456789"}`,
		"{\"payload\":\"abcdefghijklmnopqrs\x1ftuvwxyz\"}", `{"payload":"abcdefghijklmnopqrstuvw\q"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		agreesWithJSON(t, data, func(o *Outcome) *json.RawMessage { return &o.Payload }, outcomeFields)
	})
}

// The same for state records.
//
//	go test -run '^$' -fuzz '^FuzzDecodeState$' -fuzztime 100000x ./internal/record
func FuzzDecodeState(f *testing.F) {
	full, _ := json.Marshal(State{Stream: "presence", Key: "alice", Version: 843,
		State:       json.RawMessage(`{"presence":"BUSY","devices":[{"id":"d1","until":1.5e3}],"note":"a \"b\""}`),
		UpdatedAtMs: 1_700_000_000_000, ExpiresAtMs: -1})
	for _, seed := range []string{
		string(full), `{}`, `{"state":null}`, `{"state":"x"}`, `{"State":{}}`, `{"STATE":1,"state":2}`, `{"version":1e2}`,
		`{"updated_at_ms":-0}`, `{"expires_at_ms":9223372036854775807}`, `{"key":"é"}`, `{"state":{"a":[}}`,
		` {"stream" :"s", "state": [ 1 , {"b":true} ] } `, `{"stream":"s","stream":"t"}`, `{"other":{"state":1},"state":0}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		agreesWithJSON(t, data, func(st *State) *json.RawMessage { return &st.State }, stateFields)
	})
}

// agreesWithJSON checks a record scanner against encoding/json on data:
// what scanFlat takes, encoding/json takes and reads alike; and decodeFlat
// fails exactly where encoding/json does and otherwise reads the same. raw
// is the record's one raw JSON field, which scanFlat returns as a string.
func agreesWithJSON[T any](t *testing.T, data []byte, raw func(*T) *json.RawMessage, fields *flatFields) {
	t.Helper()
	var want T
	stdErr := json.Unmarshal(data, &want)
	var got T
	if text, ok := scanFlat(data, &got, fields); ok {
		if text != "" {
			*raw(&got) = json.RawMessage(text)
		}
		if stdErr != nil {
			t.Fatalf("scanner took %q, which encoding/json refuses: %v", data, stdErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: scanner read\n%+v\nencoding/json\n%+v", data, got, want)
		}
	}
	var row T
	text, err := decodeFlat(data, &row, raw(&row), fields)
	if (err == nil) != (stdErr == nil) {
		t.Fatalf("%q: decodeFlat %v; encoding/json %v", data, err, stdErr)
	}
	if err == nil {
		if text != "" || *raw(&want) != nil {
			*raw(&row) = json.RawMessage(text)
		}
		if !reflect.DeepEqual(row, want) {
			t.Fatalf("%q: decodeFlat %+v, encoding/json %+v", data, row, want)
		}
	}
}

// anyText is any string, including quotes, control characters, U+2028 and
// invalid UTF-8.
var anyText = rapid.OneOf(rapid.String(), rapid.Custom(func(t *rapid.T) string {
	return string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes"))
}))

// plainText is a string the encoder writes without an escape, as keys,
// ids and type names nearly always are.
var plainText = rapid.StringOf(rapid.RuneFrom(nil, &unicode.RangeTable{
	R16: []unicode.Range16{{Lo: ' ', Hi: '!', Stride: 1}, {Lo: '#', Hi: '[', Stride: 1}, {Lo: ']', Hi: 0x2027, Stride: 1}, {Lo: 0x202a, Hi: 0xd7ff, Stride: 1}},
	R32: []unicode.Range32{{Lo: 0x10000, Hi: 0x10ffff, Stride: 1}},
}))

// payloads are raw JSON values of the kinds events and states hold.
var payloads = rapid.SampledFrom([]string{"", `{"presence":"ONLINE","n":[1,2.5,"\u00e9"]}`, `{"a":"x\"y","b":null,"c":[true,-0.5e3]}`, `[]`, `"s"`, `7`})

// fill sets every field of the struct v points to, its strings from text,
// so a field added to the record later and not encoded by hand fails the
// comparisons below.
func fill(t *rapid.T, v any, text *rapid.Generator[string]) {
	s := reflect.ValueOf(v).Elem()
	for i := range s.NumField() {
		f, name := s.Field(i), s.Type().Field(i).Name
		switch {
		case f.Type() == reflect.TypeFor[json.RawMessage]():
			if p := payloads.Draw(t, name); p != "" {
				f.SetBytes([]byte(p))
			}
		case f.Kind() == reflect.String:
			f.SetString(text.Draw(t, name))
		case f.Kind() == reflect.Int32:
			f.SetInt(int64(rapid.Int32().Draw(t, name)))
		case f.CanInt():
			f.SetInt(rapid.Int64Range(math.MinInt64, math.MaxInt64).Draw(t, name))
		default:
			t.Fatalf("field %s of kind %s: teach the hand encoder and this test", name, f.Kind())
		}
	}
}

// canonicalJSON is data decoded and encoded again by encoding/json, which
// sorts object keys: two texts of the same JSON value give the same string,
// and text that is not JSON gives "". (This package's tests cannot use
// testenv, which imports config, which imports this package.)
func canonicalJSON(data []byte) string {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// roundTrip encodes a random record with encode, as the processors write
// it, and decodes it with decode, as the sinks read it: the encoding holds
// the value encoding/json's encoding holds, the decoder reads what
// encoding/json reads from it, and when every string is plain the decoder
// takes its fast path and gives back the record itself.
func roundTrip[T any](t *rapid.T, encode func([]byte, *T) []byte, decode func([]byte, *T) (string, error),
	raw func(*T) *json.RawMessage, fields *flatFields) {
	plain := rapid.Bool().Draw(t, "plain strings")
	text := anyText
	if plain {
		text = plainText
	}
	var rec T
	fill(t, &rec, text)
	data := encode(nil, &rec)
	stdEncoded, err := json.Marshal(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if canonicalJSON(data) != canonicalJSON(stdEncoded) {
		t.Fatalf("hand-encoded %s\nencoding/json %s", data, stdEncoded)
	}
	var want T
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("encoding/json cannot read %s: %v", data, err)
	}
	var got T
	text2, err := decode(data, &got)
	if err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
	if text2 != "" {
		*raw(&got) = json.RawMessage(text2)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: decoded\n%+v\nencoding/json\n%+v", data, got, want)
	}
	if !plain {
		return
	}
	var fast T
	if _, ok := scanFlat(data, &fast, fields); !ok {
		t.Fatalf("the decoder left %s, as the encoder wrote it, to encoding/json", data)
	}
	// An empty raw value is written absent (outcome) or null (state).
	if len(*raw(&rec)) == 0 {
		*raw(&rec) = *raw(&want)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Fatalf("%s: decoded\n%+v\nencoded\n%+v", data, got, rec)
	}
}

func TestOutcomeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		roundTrip(t, AppendOutcome, DecodeOutcome, func(o *Outcome) *json.RawMessage { return &o.Payload }, outcomeFields)
	})
}

func TestStateRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		roundTrip(t, AppendState, DecodeState, func(st *State) *json.RawMessage { return &st.State }, stateFields)
	})
}

// The scanners next to encoding/json on records as the processors write
// them, in one run:
//
//	go test -run '^$' -bench DecodeRecords ./internal/record
func BenchmarkDecodeRecords(b *testing.B) {
	outcome, err := json.Marshal(Outcome{Stream: "presence", Key: "user-004217", EventID: "user-004217-000000184217",
		EventType: "presence.changed", Version: 184217, Outcome: "applied", Gap: 1,
		OccurredAtMs: 1_700_000_000_000, ReceivedAtMs: 1_700_000_000_050, ProcessedAtMs: 1_700_000_000_200,
		InputPartition: 3, InputOffset: 184217,
		Payload: json.RawMessage(`{"event_id":"user-004217-000000184217","user_id":"user-004217","presence":"ONLINE",` +
			`"sequence_number":184217,"timestamp":"2026-11-30T07:00:00Z"}`)})
	if err != nil {
		b.Fatal(err)
	}
	state, err := json.Marshal(State{Stream: "presence", Key: "user-004217", Version: 184217,
		State:       json.RawMessage(`{"presence":"ONLINE","device_id":"dev-1","sequence_number":184217}`),
		UpdatedAtMs: 1_700_000_000_200, ExpiresAtMs: 1_700_000_300_000})
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, "outcome", outcome, DecodeOutcome)
	benchDecode(b, "state", state, DecodeState)
}

func benchDecode[R any](b *testing.B, name string, data []byte, decode func([]byte, *R) (string, error)) {
	b.Run(name+"/scanner", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		var row R
		for b.Loop() {
			if _, err := decode(data, &row); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(name+"/encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var row R
			if err := json.Unmarshal(data, &row); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Every field of the records the scanner reads is of a kind it fills: a
// field of another kind would send every record to encoding/json.
func TestScannerFillsEveryField(t *testing.T) {
	for name, fields := range map[string]*flatFields{"outcome": outcomeFields, "state": stateFields} {
		for i, kind := range fields.kinds {
			if kind == kindOther {
				t.Errorf("%s field %q is of a kind the scanner does not fill", name, fields.keys[i])
			}
		}
	}
}
