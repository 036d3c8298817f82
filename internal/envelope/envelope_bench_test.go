package envelope

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// benchBody is the presence webhook ingest's BenchmarkHandler sends, so the
// decoder's share of the edge's cost can be read off the two.
var benchBody = []byte(testenv.BenchBody)

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
