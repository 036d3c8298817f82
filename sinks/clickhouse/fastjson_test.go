package clickhouse

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/driftguard/driftguard/internal/envelope"
)

// The scanner gives what encoding/json gives, or leaves the input to it.
//
//	go test -run '^$' -fuzz '^FuzzDecodeOutcome$' -fuzztime 200000x ./sinks/clickhouse
func FuzzDecodeOutcome(f *testing.F) {
	full, _ := json.Marshal(envelope.Outcome{Stream: "presence", Key: "alice", EventID: "alice-843", EventType: "presence.changed",
		Version: 843, Outcome: "stale", Reason: "version 842 <= 843", Gap: -1, BufferDepth: 2, MessageID: "m1",
		OccurredAtMs: 1_700_000_000_000, ReceivedAtMs: -5, ProcessedAtMs: 1, InputPartition: 4, InputOffset: 7,
		Payload: json.RawMessage(`{"a":[1,2.5,"x\"y",{"b":null}],"c":true}`)})
	for _, seed := range []string{
		string(full),
		`{}`, ` { "version" : 1 , "payload" : "s\u00e9" } `, `{"Stream":"x"}`, `{"\u006bey":"k"}`, `{"KEY":"k","key":"j"}`,
		`{"version":1.0}`, `{"version":01}`, `{"version":-0}`, `{"version":9223372036854775808}`, `{"input_partition":2147483648}`,
		`{"payload":null}`, `{"payload":[}`, `{"payload":{"a":"\x"}}`, `{"other":false,"payload":true}`, `{"stream":"caf\xc3"}`,
		`{"stream":"a\tb"}`, `{"stream":null}`, `{"gap":"1"}`, `{"a":1}x`, `[1]`, `{"a":1,}`, `{"extra":{"k":"\u212a"}}`, "{\"\u212aey\":\"k\"}",
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
		agreesWithJSON(t, data, func(o *envelope.Outcome) *json.RawMessage { return &o.Payload }, outcomeFields)
	})
}

// The same for state records.
//
//	go test -run '^$' -fuzz '^FuzzDecodeState$' -fuzztime 100000x ./sinks/clickhouse
func FuzzDecodeState(f *testing.F) {
	full, _ := json.Marshal(envelope.State{Stream: "presence", Key: "alice", Version: 843,
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
		agreesWithJSON(t, data, func(st *envelope.State) *json.RawMessage { return &st.State }, stateFields)
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

// The records the processors write take the fast path.
func TestScannerReadsWhatProcessorsWrite(t *testing.T) {
	takesFastPath(t, envelope.Outcome{Stream: "presence", Key: "alice", EventID: "alice-843", EventType: "presence.changed",
		Version: 843, Outcome: "applied", Gap: 1, ProcessedAtMs: 1_700_000_000_200, InputPartition: 4, InputOffset: 7,
		Payload: json.RawMessage(`{"event_id":"alice-843","user_id":"alice","presence":"BUSY","note":"a \"quoted\" word"}`)},
		func(o *envelope.Outcome) *json.RawMessage { return &o.Payload }, outcomeFields)
	takesFastPath(t, envelope.State{Stream: "presence", Key: "alice", Version: 843, State: json.RawMessage(`{"presence":"BUSY"}`),
		UpdatedAtMs: 1_700_000_000_200, ExpiresAtMs: 1_700_000_300_000},
		func(st *envelope.State) *json.RawMessage { return &st.State }, stateFields)
}

func takesFastPath[T any](t *testing.T, want T, raw func(*T) *json.RawMessage, fields *flatFields) {
	t.Helper()
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got T
	text, ok := scanFlat(data, &got, fields)
	if !ok {
		t.Fatalf("scanner left %s to encoding/json", data)
	}
	*raw(&got) = json.RawMessage(text)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("scanner read %+v, want %+v", got, want)
	}
}

// The scanners next to encoding/json on records as the processors write
// them, in one run:
//
//	go test -run '^$' -bench DecodeRecords ./sinks/clickhouse
func BenchmarkDecodeRecords(b *testing.B) {
	outcome, err := json.Marshal(envelope.Outcome{Stream: "presence", Key: "user-004217", EventID: "user-004217-000000184217",
		EventType: "presence.changed", Version: 184217, Outcome: "applied", Gap: 1,
		OccurredAtMs: 1_700_000_000_000, ReceivedAtMs: 1_700_000_000_050, ProcessedAtMs: 1_700_000_000_200,
		InputPartition: 3, InputOffset: 184217,
		Payload: json.RawMessage(`{"event_id":"user-004217-000000184217","user_id":"user-004217","presence":"ONLINE",` +
			`"sequence_number":184217,"timestamp":"2026-11-30T07:00:00Z"}`)})
	if err != nil {
		b.Fatal(err)
	}
	state, err := json.Marshal(envelope.State{Stream: "presence", Key: "user-004217", Version: 184217,
		State:       json.RawMessage(`{"presence":"ONLINE","device_id":"dev-1","sequence_number":184217}`),
		UpdatedAtMs: 1_700_000_000_200, ExpiresAtMs: 1_700_000_300_000})
	if err != nil {
		b.Fatal(err)
	}
	benchDecode(b, "outcome", outcome, decodeOutcome)
	benchDecode(b, "state", state, decodeState)
}

func benchDecode[R any](b *testing.B, name string, data []byte, decode func([]byte, *R) error) {
	b.Run(name+"/scanner", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		var row R
		for b.Loop() {
			if err := decode(data, &row); err != nil {
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
