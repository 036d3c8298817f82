package httpframe

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// feedAll feeds data to a new tracker in the pieces cuts make of it.
func feedAll(data []byte, cuts ...int) (tracker, bool) {
	var t tracker
	ok, at := true, 0
	for _, c := range append(cuts, len(data)) {
		c = min(max(c, at), len(data))
		ok = t.feed(data[at:c])
		at = c
	}
	return t, ok
}

// FuzzTrackerSplits: however a connection's bytes are cut into reads,
// the tracker comes to the same judgement and state, and never panics.
func FuzzTrackerSplits(f *testing.F) {
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 20)
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4;x\r\nabcd\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n"), 50)
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.0\r\n\r\n"), 3)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		whole, okWhole := feedAll(data)
		split, okSplit := feedAll(data, cut)
		var cuts []int
		for i := range data {
			cuts = append(cuts, i)
		}
		bytewise, okBytewise := feedAll(data, cuts...)
		if okWhole != okSplit || okWhole != okBytewise || whole.state != split.state || whole.state != bytewise.state {
			t.Fatalf("whole %v/%d, cut at %d %v/%d, bytewise %v/%d", okWhole, whole.state, cut, okSplit, split.state, okBytewise, bytewise.state)
		}
	})
}

// TestTrackerFollowsWellFramedRequests: requests framed as net/http's
// client frames them, in any number, with any bodies and read in any
// pieces, are never refused, and the tracker ends between requests.
func TestTrackerFollowsWellFramedRequests(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var all strings.Builder
		n := rapid.IntRange(1, 5).Draw(t, "requests")
		for range n {
			body := rapid.StringN(0, 40, -1).Draw(t, "body")
			name := rapid.SampledFrom([]string{"Content-Length", "content-length", "CONTENT-LENGTH"}).Draw(t, "name")
			if rapid.Bool().Draw(t, "chunked") {
				all.WriteString("POST /v1/webhooks/presence HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n")
				for rest := body; rest != ""; {
					k := rapid.IntRange(1, len(rest)).Draw(t, "chunk")
					fmt.Fprintf(&all, "%x\r\n%s\r\n", k, rest[:k])
					rest = rest[k:]
				}
				all.WriteString("0\r\n\r\n")
			} else {
				fmt.Fprintf(&all, "POST / HTTP/1.1\r\nHost: x\r\n%s: %d\r\nX-Body: %q\r\n\r\n%s", name, len(body), "quoted: GET / HTTP/1.1", body)
			}
		}
		data := []byte(all.String())
		cuts := rapid.SliceOfN(rapid.IntRange(0, len(data)), 0, 8).Draw(t, "cuts")
		slices.Sort(cuts)
		tr, ok := feedAll(data, cuts...)
		if !ok || tr.state != requestLine {
			t.Fatalf("refused %v, state %d after %q", !ok, tr.state, data)
		}
	})
}
