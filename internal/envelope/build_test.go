package envelope

import (
	"testing"

	"pgregory.net/rapid"
)

// What Build writes at a pointer, Lookup reads back at it, for any field
// names (escapes included) and nesting.
func TestBuildIsReadBackByLookup(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z~/]{1,4}`), 1, 4, rapid.ID[string]).Draw(t, "names")
		nested := rapid.Bool().Draw(t, "nested")
		fields := map[string]any{}
		want := map[string]string{}
		for _, name := range names {
			p := "/" + EscapePointer(name)
			if nested {
				p = "/outer" + p
			}
			v := rapid.StringMatching(`[a-zA-Z0-9 é"\\]{1,8}`).Draw(t, "value")
			fields[p], want[p] = v, v
		}
		body, err := Build(fields)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := Parse(body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		defer doc.Release()
		for p, v := range want {
			got, err := doc.OptionalString(p)
			if err != nil || got != v {
				t.Fatalf("%s at %s: %q %v, want %q", body, p, got, err, v)
			}
		}
	})
}

func TestBuildRefusesOverlappingPointers(t *testing.T) {
	for _, fields := range []map[string]any{
		{"/a": "x", "/a/b": "y"},
		{"/a": map[string]any{"c": 1}, "/a/b": "y"},
		{"/a/b": "y", "/a": map[string]any{}},
		{"no-slash": "x"},
	} {
		if body, err := Build(fields); err == nil {
			t.Errorf("%v built %s, want an error", fields, body)
		}
	}
}
