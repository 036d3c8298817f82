package schemacheck

import (
	"encoding/json"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/schemas"
)

// crafted exercises every implemented keyword, alone and nested.
var crafted = map[string]string{
	"types":      `{"type": ["integer", "null"]}`,
	"number":     `{"type": "number", "exclusiveMinimum": -1.5, "exclusiveMaximum": 1e2}`,
	"integer":    `{"type": "integer", "minimum": -3, "maximum": 255}`,
	"fraction":   `{"minimum": 0.5, "maximum": 2.25}`,
	"const":      `{"const": "ONLINE"}`,
	"constNull":  `{"const": null}`,
	"enum":       `{"enum": ["a", true, null, "é"]}`,
	"strings":    `{"type": "string", "minLength": 1, "maxLength": 2, "pattern": "^[a-zé]+$"}`,
	"closed":     `{"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false, "required": ["a"]}`,
	"additional": `{"properties": {"a": true, "b": false}, "additionalProperties": {"type": "string", "maxLength": 1}}`,
	"members":    `{"minProperties": 1, "maxProperties": 2}`,
	"array":      `{"type": "array", "items": {"enum": ["a", null]}, "minItems": 1, "maxItems": 3}`,
	"legacyItems": `{"$schema": "http://json-schema.org/draft-07/schema#", "items": {"type": "boolean"},
		"exclusiveMaximum": 3, "properties": {"n": {"type": "integer"}}}`,
	"bigBounds": `{"type": "number", "minimum": -9223372036854775809, "maximum": 18446744073709551616,
		"exclusiveMaximum": 300}`,
	"nested": `{"type": "object", "required": ["o"], "properties": {"o": {"type": "object",
		"properties": {"n": {"type": "number", "maximum": 0}, "s": {"minLength": 2}}, "required": ["n"]}}}`,
	"false": `false`,
}

// unsupported uses keywords outside the implemented set.
var unsupported = map[string]string{
	"ref":        `{"$defs": {"x": {"type": "string"}}, "$ref": "#/$defs/x"}`,
	"anyOf":      `{"anyOf": [{"type": "string"}, {"type": "integer"}]}`,
	"nestedNot":  `{"properties": {"a": {"not": {"type": "string"}}}}`,
	"multipleOf": `{"multipleOf": 2}`,
	"numberEnum": `{"enum": [1, 2]}`,
	"patterns":   `{"patternProperties": {"^x": {"type": "string"}}}`,
}

func compileSchema(t testing.TB, name, text string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	url := "test:///" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return sch
}

// shippedSchemas are the catalogue's stream schemas.
func shippedSchemas(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(schemas.Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".json" {
			return err
		}
		data, err := fs.ReadFile(schemas.Files, p)
		out[path.Base(p)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no shipped schemas found")
	}
	return out
}

func TestCompileCoversShippedSchemas(t *testing.T) {
	for name, text := range shippedSchemas(t) {
		if Compile(compileSchema(t, name, text)) == nil {
			t.Errorf("%s: no checker; the edge would validate it the slow way", name)
		}
	}
}

func TestCompileRefusesUnimplementedKeywords(t *testing.T) {
	for name, text := range unsupported {
		if Compile(compileSchema(t, name, text)) != nil {
			t.Errorf("%s: got a checker for a keyword it does not implement", name)
		}
	}
}

// TestAgreesWithLibrary is the checker's contract: on any document, it
// says valid exactly when the library does.
func TestAgreesWithLibrary(t *testing.T) {
	all := shippedSchemas(t)
	for name, text := range crafted {
		all[name] = text
	}
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		sch := compileSchema(t, name, all[name])
		checker := Compile(sch)
		if checker == nil {
			t.Fatalf("%s: no checker", name)
		}
		words := vocabulary(all[name])
		verdicts := map[bool]int{}
		t.Run(name, rapid.MakeCheck(func(t *rapid.T) {
			text, err := json.Marshal(shaped(sch, words, 4).Draw(t, "doc"))
			if err != nil {
				t.Fatal(err)
			}
			// The checker reads what the edge's decoder accepts; a number
			// it refuses never reaches a schema.
			doc, err := envelope.Parse(text)
			if err != nil {
				return
			}
			defer doc.Release()
			want := sch.Validate(doc.Root().Any()) == nil
			if got := checker.Valid(doc.Root()); got != want {
				t.Fatalf("checker says valid=%v, library says valid=%v, for %s", got, want, text)
			}
			verdicts[want]++
		}))
		// Both answers must be exercised, or the agreement proves little.
		if name != "false" && (verdicts[true] == 0 || verdicts[false] == 0) {
			t.Errorf("%s: generated documents were all valid=%v: %v", name, verdicts[true] > 0, verdicts)
		}
	}
}

// shaped generates documents that mostly follow sch, so they are often
// valid and fail, when they do, on one keyword near its limit.
func shaped(sch *jsonschema.Schema, words []string, depth int) *rapid.Generator[any] {
	return rapid.Custom(func(t *rapid.T) any {
		if sch == nil || depth == 0 || rapid.IntRange(0, 29).Draw(t, "stray") == 0 {
			return value(words, min(depth, 1)).Draw(t, "any")
		}
		if sch.Enum != nil {
			return rapid.SampledFrom(sch.Enum.Values).Draw(t, "enum")
		}
		if sch.Const != nil {
			return *sch.Const
		}
		types := []string{"null", "boolean", "number", "string", "array", "object"}
		if sch.Types != nil {
			types = sch.Types.ToStrings()
		}
		switch rapid.SampledFrom(types).Draw(t, "type") {
		case "null":
			return nil
		case "boolean":
			return rapid.Bool().Draw(t, "bool")
		case "number", "integer":
			if rapid.Bool().Draw(t, "small") {
				return json.Number(strconv.Itoa(rapid.IntRange(0, 300).Draw(t, "int")))
			}
			return json.Number(rapid.SampledFrom(numbers).Draw(t, "number"))
		case "string":
			if rapid.Bool().Draw(t, "word") {
				return rapid.SampledFrom(words).Draw(t, "word")
			}
			lo, hi := intOr(sch.MinLength, 0), intOr(sch.MaxLength, 6)
			return rapid.StringN(max(lo-1, 0), min(hi+1, lo+8), -1).Draw(t, "string")
		case "array":
			items := sch.Items2020
			if legacy, ok := sch.Items.(*jsonschema.Schema); ok {
				items = legacy
			}
			return rapid.SliceOfN(shaped(items, words, depth-1), 0, 4).Draw(t, "array")
		}
		obj := map[string]any{}
		for _, name := range sch.Required {
			if rapid.IntRange(0, 19).Draw(t, "omit") > 0 {
				obj[name] = shaped(sch.Properties[name], words, depth-1).Draw(t, name)
			}
		}
		for name, sub := range sch.Properties {
			if rapid.Bool().Draw(t, "optional") {
				obj[name] = shaped(sub, words, depth-1).Draw(t, name)
			}
		}
		if rapid.IntRange(0, 3).Draw(t, "extra") == 0 {
			obj[rapid.SampledFrom(words).Draw(t, "key")] = value(words, 1).Draw(t, "extra")
		}
		return obj
	})
}

// vocabulary is the schema's own strings (property names, enum values)
// and a few more, so generated documents hit required members, enums and
// length limits often.
func vocabulary(schema string) []string {
	var doc any
	_ = json.Unmarshal([]byte(schema), &doc)
	words := []string{"", "a", "é", "ab", "abc", "x", "ONLINE", "0"}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, member := range v {
				words = append(words, k)
				walk(member)
			}
		case []any:
			for _, item := range v {
				walk(item)
			}
		case string:
			words = append(words, v)
		}
	}
	walk(doc)
	return words
}

// numbers are literals around the bounds that schemas use.
var numbers = []string{
	"0", "-0", "1", "-1", "2", "-3", "-4", "3", "255", "256", "0.5", "0.4999", "2.25", "2.2500001",
	"1.0", "1e2", "100", "99.99", "1E+2", "-1.5", "-1.4", "1.5e1", "9007199254740991", "9007199254740992",
	"-9223372036854775808", "-9223372036854775809", "-9223372036854775810", "9223372036854775807",
	"18446744073709551616", "18446744073709551617", "1718900000", "0.0", "-0.0001",
}

func value(words []string, depth int) *rapid.Generator[any] {
	return rapid.Custom(func(t *rapid.T) any {
		kinds := 5
		if depth > 0 {
			kinds = 7
		}
		switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
		case 0:
			return nil
		case 1:
			return rapid.Bool().Draw(t, "bool")
		case 2:
			return json.Number(rapid.SampledFrom(numbers).Draw(t, "number"))
		case 3, 4:
			if rapid.Bool().Draw(t, "word") {
				return rapid.SampledFrom(words).Draw(t, "string")
			}
			return rapid.StringN(0, 4, -1).Draw(t, "string")
		case 5:
			return rapid.SliceOfN(value(words, depth-1), 0, 4).Draw(t, "array")
		}
		obj := map[string]any{}
		for range rapid.IntRange(0, 8).Draw(t, "members") {
			obj[rapid.SampledFrom(words).Draw(t, "key")] = value(words, depth-1).Draw(t, "member")
		}
		return obj
	})
}

// FuzzAgreesWithLibrary feeds bodies through the edge's decoder and checks
// the shipped presence schema's checker against the library.
func FuzzAgreesWithLibrary(f *testing.F) {
	text := shippedSchemas(f)["presence.schema.json"]
	sch := compileSchema(f, "presence", text)
	checker := Compile(sch)
	f.Add([]byte(`{"event_id":"e1","user_id":"u1","presence":"AWAY","sequence_number":1,"timestamp":1718900000}`))
	f.Add([]byte(`{"event_id":"","user_id":"u1","presence":"AWAY","sequence_number":1.0,"timestamp":-1}`))
	f.Add([]byte(`{"event_id":"e","user_id":"u","presence":"ONLINE","sequence_number":9007199254740992,"timestamp":1e2}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		doc, err := envelope.Parse(body)
		if err != nil {
			return
		}
		defer doc.Release()
		if got, want := checker.Valid(doc.Root()), sch.Validate(doc.Root().Any()) == nil; got != want {
			t.Fatalf("checker says valid=%v, library says valid=%v, for %s", got, want, body)
		}
	})
}

// BenchmarkValid checks the presence webhook ingest's BenchmarkHandler
// sends against the shipped presence schema.
func BenchmarkValid(b *testing.B) {
	checker := Compile(compileSchema(b, "presence", shippedSchemas(b)["presence.schema.json"]))
	doc, err := envelope.Parse([]byte(testenv.BenchBody))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if !checker.Valid(doc.Root()) {
			b.Fatal("invalid")
		}
	}
}
