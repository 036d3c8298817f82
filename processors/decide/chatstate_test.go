package decide

import (
	"encoding/json"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The hand-written public state of a conversation is what json.Marshal
// writes, for any members, membership, cursors and last message.
func TestChatStateIsEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.OneOf(rapid.String(), rapid.StringMatching(`[a-z<>&"\\]{0,6}`), rapid.SampledFrom([]string{"\u2028", "\xff", "a\x00b"}))
		seq := rapid.Int64Range(-1, 1<<40)
		c := &Conversation{Members: rapid.SliceOfN(name, 0, 4).Draw(t, "members")}
		if rapid.Bool().Draw(t, "no members") {
			c.Members = nil
		}
		// Members are a sorted set, as join keeps them.
		slices.Sort(c.Members)
		c.Members = slices.Compact(c.Members)
		for _, user := range rapid.SliceOfN(name, 0, 3).Draw(t, "ever") {
			if c.Membership == nil {
				c.Membership = map[string][]Interval{}
			}
			c.Membership[user] = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Interval {
				return Interval{From: seq.Draw(t, "from"), To: rapid.OneOf(rapid.Just(int64(0)), seq).Draw(t, "to")}
			}), -1, 3).Draw(t, "intervals")
		}
		for _, user := range rapid.SliceOfN(name, 0, 3).Draw(t, "readers") {
			if c.Cursors == nil {
				c.Cursors = map[string]Cursor{}
			}
			cur := Cursor{Read: rapid.OneOf(rapid.Just(int64(0)), seq).Draw(t, "read"), Delivered: rapid.OneOf(rapid.Just(int64(0)), seq).Draw(t, "delivered")}
			for _, dev := range rapid.SliceOfN(name, 0, 2).Draw(t, "devices") {
				if cur.Devices == nil {
					cur.Devices = map[string]DeviceCursor{}
				}
				cur.Devices[dev] = DeviceCursor{Delivered: seq.Draw(t, "device delivered")}
			}
			c.Cursors[user] = cur
		}
		var last json.RawMessage
		if rapid.Bool().Draw(t, "has last message") {
			text := rapid.String().Draw(t, "text")
			raw, _ := json.Marshal(map[string]any{"body": text, "n": seq.Draw(t, "n")})
			last = append(append([]byte(" \n"), raw...), '\t') // space to compact
		}
		lastSeq := seq.Draw(t, "last seq")
		want, err := json.Marshal(struct {
			LastSeq     int64                 `json:"last_seq"`
			Members     []string              `json:"members"`
			Membership  map[string][]Interval `json:"membership,omitempty"`
			Cursors     map[string]Cursor     `json:"cursors,omitempty"`
			LastMessage json.RawMessage       `json:"last_message,omitempty"`
		}{lastSeq, nonNil(c.Members), c.Membership, c.Cursors, last})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendChatState(nil, lastSeq, c, last); string(got) != string(want) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
