package envelope

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
)

// benchBody is the presence webhook ingest's BenchmarkHandler sends, so the
// decoder's share of the edge's cost can be read off the two.
var benchBody = []byte(`{"event_id":"evt_01J0Z3K9Q7M2B8C4D6E8F0G1H2","user_id":"usr_7f3a9c2e4b1d","presence":"AWAY","sequence_number":184467,"timestamp":1718900000,"device_id":"dev_macbook-pro-14_3f9a","expires_at":1718900300,"client":{"app":"desktop","version":"4.12.3","os":"macOS 14.5"},"status_text":"In a meeting until 15:30"}`)

// BenchmarkParse reads the body in place, as the edge does.
func BenchmarkParse(b *testing.B) {
	text := string(benchBody)
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		doc, err := ParseString(text)
		if err != nil {
			b.Fatal(err)
		}
		doc.Release()
	}
}

// BenchmarkDecode builds the generic tree, as the schema library's path
// does for a body the fast check refused.
func BenchmarkDecode(b *testing.B) {
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decode(benchBody); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeEncodingJSON is the lenient reference: what the strictness
// costs over encoding/json building the same value.
func BenchmarkDecodeEncodingJSON(b *testing.B) {
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		dec := json.NewDecoder(bytes.NewReader(benchBody))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExtract(b *testing.B) {
	cfg, err := config.Default()
	if err != nil {
		b.Fatal(err)
	}
	s := cfg.Streams["presence"]
	doc, err := Parse(benchBody)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := doc.Extract(s, "msg_bench"); err != nil {
			b.Fatal(err)
		}
	}
}
