package realtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/record"
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

// TestFrameEntityAgreesWithEncodingJSON: for random keys and states, as a
// state record decodes them, the Entity appendEntity writes reads back as
// json.Marshal's does, and the frame is one data line whatever the state's
// whitespace.
func TestFrameEntityAgreesWithEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		doc := map[string]any{"text": rapid.String().Draw(t, "text"), "n": rapid.Int64().Draw(t, "n"),
			"list": rapid.SliceOfN(rapid.StringMatching(`[a-z<>&]{0,4}`), 0, 3).Draw(t, "list")}
		raw, _ := json.Marshal(doc)
		if rapid.Bool().Draw(t, "indented") {
			raw, _ = json.MarshalIndent(doc, "", "\r\n  ")
		}
		st := record.State{Stream: "s", Key: rapid.String().Draw(t, "key"), Version: rapid.Int64().Draw(t, "version"),
			State: raw, UpdatedAtMs: rapid.Int64().Draw(t, "updated"), ExpiresAtMs: rapid.Int64().Draw(t, "expires")}
		var r stateRecord
		var err error
		if r.state, err = record.DecodeState(record.AppendState(nil, &st), &r.st); err != nil {
			t.Fatal(err)
		}
		e := newEntity(0, r, false)
		expired := rapid.Bool().Draw(t, "expired")
		frame := appendFrame(nil, "cursor", e, expired)
		data, ok := bytes.CutPrefix(frame, []byte("id: cursor\nevent: state\ndata: "))
		data, ok2 := bytes.CutSuffix(data, []byte("\n\n"))
		if !ok || !ok2 || bytes.ContainsAny(data, "\r\n") {
			t.Fatalf("not one data line: %q", frame)
		}
		want, _ := json.Marshal(e.jsonExpired(expired))
		var got, wanted any
		if json.Unmarshal(data, &got) != nil || json.Unmarshal(want, &wanted) != nil || !reflect.DeepEqual(got, wanted) {
			t.Fatalf("entity %s, encoding/json %s", data, want)
		}
	})
}
