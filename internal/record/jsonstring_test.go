package record

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// AppendJSONString writes what encoding/json writes for any string, with
// and without its HTML escaping.
func TestAppendJSONStringIsEncodingJSON(t *testing.T) {
	pieces := []string{"<", ">", "&", "\u2028", "\u2029", `"`, `\`, "\n", "\t", "\x00", "\x1f", "\xff", "é", "a", " "}
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(
			rapid.String(),
			rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }),
			rapid.Map(rapid.SliceOf(rapid.SampledFrom(pieces)), func(p []string) string { return strings.Join(p, "") }),
		).Draw(t, "s")
		for _, escapeHTML := range []bool{true, false} {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(escapeHTML)
			if err := enc.Encode(s); err != nil {
				t.Fatal(err)
			}
			if got := AppendJSONString(nil, s, escapeHTML); string(got) != strings.TrimSuffix(want.String(), "\n") {
				t.Fatalf("escapeHTML %v: %q: got %s, encoding/json %s", escapeHTML, s, got, want.String())
			}
		}
	})
}
