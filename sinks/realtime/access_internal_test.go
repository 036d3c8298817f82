package realtime

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// TestAccessAfterAgreesWithAFreshParse: for random pairs of conversation
// states, the membership read after the first (sharing its parsed form
// when unchanged) is the membership read from scratch, and it is shared
// exactly when the members and membership are written the same.
func TestAccessAfterAgreesWithAFreshParse(t *testing.T) {
	state := func(t *rapid.T, label string) json.RawMessage {
		membership := map[string][]interval{}
		var members []string
		for u := range rapid.IntRange(0, 4).Draw(t, label+" users") {
			user := fmt.Sprint("u", u)
			from := rapid.Int64Range(1, 3).Draw(t, label+" from")
			if rapid.Bool().Draw(t, label+" member") {
				members = append(members, user)
				membership[user] = []interval{{From: from}}
			} else {
				membership[user] = []interval{{From: from, To: from + 2}}
			}
		}
		b, _ := json.Marshal(map[string]any{"last_seq": rapid.Int64Range(0, 9).Draw(t, label+" last_seq"),
			"members": members, "membership": membership, "last_message": map[string]string{"body": "hi"}})
		return b
	}
	rapid.Check(t, func(t *rapid.T) {
		first, second := state(t, "first"), state(t, "second")
		if rapid.Bool().Draw(t, "a message only") {
			var doc map[string]any
			_ = json.Unmarshal(first, &doc)
			doc["last_seq"] = doc["last_seq"].(float64) + 1
			second, _ = json.Marshal(doc)
		}
		prev := accessOf(first)
		got, same := accessAfter(&prev, second)
		want := accessOf(second)
		if got.lastSeq != want.lastSeq || !reflect.DeepEqual(got.members, want.members) || !reflect.DeepEqual(got.membership, want.membership) {
			t.Fatalf("after %s, %s reads as %+v, from scratch %+v", first, second, got, want)
		}
		if wantSame := string(prev.rawMembers) == string(want.rawMembers) && string(prev.rawMembership) == string(want.rawMembership); same != wantSame {
			t.Fatalf("shared %v, want %v", same, wantSame)
		}
	})
}
