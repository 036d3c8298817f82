package record

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func ExampleReplayWebhookID() {
	fmt.Println(ReplayWebhookID("workflow", "op-1", 3))
	fmt.Println(ReplayWebhookID("workflow", "eu/op 7", 12))
	// Output:
	// replay_workflow-3-op-1
	// replay_workflow-12-eu%2Fop%207
}

// A gap's webhook-id is a valid header value (visible ASCII only), and
// the stream, the sequence and the key are read back from it whatever the
// key: two gaps share an id only when they are the same gap.
func TestReplayWebhookIDNamesOneGap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		stream := rapid.StringMatching(`[a-z][a-z0-9_]{0,20}`).Draw(t, "stream")
		key := rapid.String().Draw(t, "key")
		from := rapid.Int64Range(0, 1<<62).Draw(t, "from")
		id := ReplayWebhookID(stream, key, from)
		for i := 0; i < len(id); i++ {
			if id[i] <= ' ' || id[i] > '~' {
				t.Fatalf("%q: byte %#x is not a header's visible ASCII", id, id[i])
			}
		}
		rest, ok := strings.CutPrefix(id, "replay_")
		gotStream, rest, ok2 := strings.Cut(rest, "-")
		seq, escaped, ok3 := strings.Cut(rest, "-")
		gotFrom, err := strconv.ParseInt(seq, 10, 64)
		gotKey, err2 := url.PathUnescape(escaped)
		if !ok || !ok2 || !ok3 || err != nil || err2 != nil || gotStream != stream || gotFrom != from || gotKey != key {
			t.Fatalf("%q read back as %q, %d, %q (%v, %v); want %q, %d, %q", id, gotStream, gotFrom, gotKey, err, err2, stream, from, key)
		}
	})
}
