package main

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// entityData is an Entity as the bridge sends it for a conversation state.
func entityData(version, lastSeq int64, clientID string) []byte {
	return fmt.Appendf(nil, `{"key":"conv-1","version":%d,"state":{"last_seq":%d,"members":["u1-0"],`+
		`"last_message":{"event_id":"e","client_message_id":%q,"body":"hi"}},"updated_at_ms":1,"expires_at_ms":0,"expired":false}`,
		version, lastSeq, clientID)
}

// TestFollowerCountsWhatItReceives feeds a follower states in an order
// rapid picks, some repeated, and checks what it notes against a plain
// reading: each sequence is first covered when a state with a higher
// version reaches it; a repeated version is doubled, a last_seq going
// down is backwards, and the client id of each state's last message is
// kept for the check that the sequence is the message sent as it.
func TestFollowerCountsWhatItReceives(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := &follower{}
		var version, last int64
		covered := map[int64]int64{}
		doubled, backwards := 0, 0
		for i := range rapid.IntRange(1, 30).Draw(t, "states") {
			v := rapid.Int64Range(1, 20).Draw(t, "version")
			seq := rapid.Int64Range(0, 20).Draw(t, "last_seq")
			at := int64(i + 1)
			f.state(entityData(v, seq, fmt.Sprint("cm-", seq)), at)
			switch {
			case v <= version:
				doubled++
				continue
			case seq < last:
				version = v
				backwards++
				continue
			}
			version = v
			for s := last + 1; s <= seq; s++ {
				covered[s] = at
			}
			last = max(last, seq)
		}
		if f.doubled != doubled || f.backwards != backwards || f.lastSeq.Load() != last {
			t.Fatalf("doubled %d backwards %d last %d, want %d %d %d", f.doubled, f.backwards, f.lastSeq.Load(), doubled, backwards, last)
		}
		for s := int64(1); s <= last; s++ {
			if f.recv[s] != covered[s] {
				t.Fatalf("seq %d first covered at %d, want %d", s, f.recv[s], covered[s])
			}
		}
		for s, id := range f.clientIDs {
			if id != fmt.Sprint("cm-", s) {
				t.Fatalf("the state reaching %d had last message %q", s, id)
			}
		}
		if f.err != nil {
			t.Fatal(f.err)
		}
	})
}

func TestParseChatLoad(t *testing.T) {
	l, err := parseChatLoad("100x20@1000", viaBridge, 30, 5)
	if err != nil || l.Conversations != 100 || l.Members != 20 || l.Rate != 1000 || l.Via != viaBridge {
		t.Fatalf("%+v %v", l, err)
	}
	for _, bad := range []string{"100x20", "x20@5", "10x0@5", "10x2@0", "10x2@fast"} {
		if _, err := parseChatLoad(bad, viaIngest, 30, 5); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
	if _, err := parseChatLoad("1x1@1", "pigeon", 30, 5); err == nil {
		t.Error("an unknown --via was taken")
	}
}
