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
		var want envelope.Outcome
		stdErr := json.Unmarshal(data, &want)
		var got envelope.Outcome
		if payload, ok := scanOutcome(data, &got); ok {
			if payload != "" {
				got.Payload = json.RawMessage(payload)
			}
			if stdErr != nil {
				t.Fatalf("scanner took %q, which encoding/json refuses: %v", data, stdErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: scanner read\n%+v\nencoding/json\n%+v", data, got, want)
			}
		}
		var row outcomeRow
		err := decodeOutcome(data, &row)
		if (err == nil) != (stdErr == nil) {
			t.Fatalf("%q: decodeOutcome %v; encoding/json %v", data, err, stdErr)
		}
		if err == nil {
			got := row.Outcome
			if row.payload != "" || want.Payload != nil {
				got.Payload = json.RawMessage(row.payload)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: decodeOutcome %+v, encoding/json %+v", data, got, want)
			}
		}
	})
}

// The records the processors write take the fast path.
func TestScannerReadsWhatProcessorsWrite(t *testing.T) {
	o := envelope.Outcome{Stream: "presence", Key: "alice", EventID: "alice-843", EventType: "presence.changed", Version: 843,
		Outcome: "applied", Gap: 1, ProcessedAtMs: 1_700_000_000_200, InputPartition: 4, InputOffset: 7,
		Payload: json.RawMessage(`{"event_id":"alice-843","user_id":"alice","presence":"BUSY","note":"a \"quoted\" word"}`)}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var got envelope.Outcome
	payload, ok := scanOutcome(data, &got)
	if !ok {
		t.Fatalf("scanner left %s to encoding/json", data)
	}
	got.Payload = json.RawMessage(payload)
	if !reflect.DeepEqual(got, o) {
		t.Fatalf("scanner read %+v, want %+v", got, o)
	}
}

// The scanner next to encoding/json on an outcome as the processors write
// it, in one run:
//
//	go test -run '^$' -bench DecodeOutcome ./sinks/clickhouse
func BenchmarkDecodeOutcome(b *testing.B) {
	data, err := json.Marshal(envelope.Outcome{Stream: "presence", Key: "user-004217", EventID: "user-004217-000000184217",
		EventType: "presence.changed", Version: 184217, Outcome: "applied", Gap: 1,
		OccurredAtMs: 1_700_000_000_000, ReceivedAtMs: 1_700_000_000_050, ProcessedAtMs: 1_700_000_000_200,
		InputPartition: 3, InputOffset: 184217,
		Payload: json.RawMessage(`{"event_id":"user-004217-000000184217","user_id":"user-004217","presence":"ONLINE",` +
			`"sequence_number":184217,"timestamp":"2026-11-30T07:00:00Z"}`)})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		var row outcomeRow
		for b.Loop() {
			if err := decodeOutcome(data, &row); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var o envelope.Outcome
			if err := json.Unmarshal(data, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
