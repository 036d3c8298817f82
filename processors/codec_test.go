package processors

import (
	"encoding/json"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/envelope"
)

// drawEntity draws a table value with every part a policy may set.
func drawEntity(t *rapid.T) *Entity {
	ids := rapid.SliceOfN(rapid.StringMatching(`[a-z0-9-]{1,12}`), 0, 8)
	hashes := rapid.SliceOfN(rapid.Uint64(), 0, 8)
	clock := rapid.Int64Range(-1, 1<<50)
	row := func() Row {
		return Row{Applied: rapid.Bool().Draw(t, "applied"), Version: clock.Draw(t, "version"),
			UpdatedAtMs: clock.Draw(t, "updated"), ExpiresAtMs: clock.Draw(t, "expires"), Recent: hashes.Draw(t, "recent")}
	}
	e := &Entity{Row: row(), NextRevision: clock.Draw(t, "next revision"), DeadlineMs: clock.Draw(t, "deadline"),
		GapSinceMs: clock.Draw(t, "gap since"), Terminal: rapid.Bool().Draw(t, "terminal"), ParentSeen: rapid.Bool().Draw(t, "parent seen")}
	if rapid.Bool().Draw(t, "has state") {
		e.State = json.RawMessage(fmt.Sprintf(`{"presence":%q,"n":%d}`, rapid.StringMatching(`[A-Z]{0,8}`).Draw(t, "presence"), clock.Draw(t, "n")))
	}
	for _, id := range rapid.SliceOfN(rapid.String(), 0, 4).Draw(t, "devices") {
		if e.Devices == nil {
			e.Devices = map[string]*Device{}
		}
		e.Devices[id] = &Device{Row: row(), Value: rapid.String().Draw(t, "value")}
	}
	event := func() Event {
		return Event{Fields: envelope.Fields{Key: "k", EventID: rapid.String().Draw(t, "event id"), Version: clock.Draw(t, "event version"), HasVersion: true},
			Body: json.RawMessage(`{"a":1}`), ReceivedAtMs: clock.Draw(t, "received"), InputOffset: clock.Draw(t, "offset")}
	}
	for range rapid.IntRange(0, 3).Draw(t, "buffered") {
		e.Buffer = append(e.Buffer, event())
	}
	for range rapid.IntRange(0, 3).Draw(t, "quarantined") {
		e.Quarantine = append(e.Quarantine, event())
	}
	if rapid.Bool().Draw(t, "chat") {
		e.Chat = &Conversation{Members: ids.Draw(t, "members"), Cursors: map[string]Cursor{"u": {Read: clock.Draw(t, "read")}}}
	}
	return e
}

// sameEntity compares entities by their JSON, which ignores the difference
// between nil and empty that no policy depends on.
func sameEntity(t *rapid.T, a, b *Entity) {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("decoded %s\nwant    %s", jb, ja)
	}
}

// Every entity survives the binary codec, and values written as JSON by
// earlier releases still decode.
func TestEntityCodecRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := drawEntity(t)
		data, err := entityCodec{}.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if data[0] != entityFormat1 {
			t.Fatalf("format byte %d", data[0])
		}
		got, err := entityCodec{}.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		sameEntity(t, e, got.(*Entity))
		legacy, _ := json.Marshal(e)
		old, err := entityCodec{}.Decode(legacy)
		if err != nil {
			t.Fatal(err)
		}
		sameEntity(t, e, old.(*Entity))
	})
}

// Tables of earlier releases remembered the event ids themselves, in JSON.
func TestEntityCodecReadsIDsOfEarlierReleases(t *testing.T) {
	v, err := entityCodec{}.Decode([]byte(`{"applied":true,"version":3,"state":{"presence":"AWAY"},"recent":["e1","e2"]}`))
	if err != nil {
		t.Fatal(err)
	}
	e := v.(*Entity)
	if !e.seen("e1") || !e.seen("e2") || e.seen("e3") || e.Version != 3 || string(e.State) != `{"presence":"AWAY"}` {
		t.Fatalf("decoded %+v", e)
	}
}

// A truncated or unknown value is an error, never a panic or a partial
// entity.
func TestEntityCodecRejectsDamagedValues(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		data, err := entityCodec{}.Encode(drawEntity(t))
		if err != nil {
			t.Fatal(err)
		}
		cut := rapid.IntRange(0, len(data)-1).Draw(t, "cut")
		if _, err := (entityCodec{}).Decode(data[:cut]); err == nil {
			t.Fatalf("a value cut at %d of %d bytes decoded", cut, len(data))
		}
	})
	if _, err := (entityCodec{}).Decode([]byte{9, 0}); err == nil {
		t.Error("an unknown format decoded")
	}
}
