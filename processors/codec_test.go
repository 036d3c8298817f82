package processors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors/decide"
	"github.com/lovoo/goka"
)

// drawEntity draws a table value with every part a policy may set.
func drawEntity(t *rapid.T) *tableValue {
	ids := rapid.SliceOfN(rapid.StringMatching(`[a-z0-9-]{1,12}`), 0, 8)
	clock := rapid.Int64Range(-1, 1<<50)
	// Seen times anywhere, a row's usually close together.
	recent := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) decide.SeenID {
		return decide.SeenID{Hash: rapid.Uint64().Draw(t, "hash"), AtMs: rapid.OneOf(clock, rapid.Int64Range(1<<40, 1<<40+10_000)).Draw(t, "seen")}
	}), 0, 8)
	row := func() decide.Row {
		return decide.Row{Applied: rapid.Bool().Draw(t, "applied"), Version: clock.Draw(t, "version"),
			UpdatedAtMs: clock.Draw(t, "updated"), ExpiresAtMs: clock.Draw(t, "expires"), Recent: recent.Draw(t, "recent")}
	}
	e := &tableValue{Entity: decide.Entity{Row: row(), NextRevision: clock.Draw(t, "next revision"), DeadlineMs: clock.Draw(t, "deadline"),
		GapSinceMs: clock.Draw(t, "gap since"), Terminal: rapid.Bool().Draw(t, "terminal"), ParentSeen: rapid.Bool().Draw(t, "parent seen")}}
	if rapid.Bool().Draw(t, "has state") {
		e.State = json.RawMessage(fmt.Sprintf(`{"presence":%q,"n":%d}`, rapid.StringMatching(`[A-Z]{0,8}`).Draw(t, "presence"), clock.Draw(t, "n")))
	}
	for _, id := range rapid.SliceOfN(rapid.String(), 0, 4).Draw(t, "devices") {
		if e.Devices == nil {
			e.Devices = map[string]*decide.Device{}
		}
		e.Devices[id] = &decide.Device{Row: row(), Value: rapid.String().Draw(t, "value")}
	}
	event := func() decide.Event {
		return decide.Event{Fields: envelope.Fields{Key: "k", EventID: rapid.String().Draw(t, "event id"), Version: clock.Draw(t, "event version"), HasVersion: true},
			Body: json.RawMessage(`{"a":1}`), ReceivedAtMs: clock.Draw(t, "received"), InputOffset: clock.Draw(t, "offset")}
	}
	for range rapid.IntRange(0, 3).Draw(t, "buffered") {
		e.Buffer = append(e.Buffer, event())
	}
	for range rapid.IntRange(0, 3).Draw(t, "quarantined") {
		e.Quarantine = append(e.Quarantine, event())
	}
	if rapid.Bool().Draw(t, "chat") {
		e.Chat = &decide.Conversation{Members: ids.Draw(t, "members")}
		for _, user := range ids.Draw(t, "members ever") {
			if e.Chat.Membership == nil {
				e.Chat.Membership = map[string][]decide.Interval{}
			}
			e.Chat.Membership[user] = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) decide.Interval {
				return decide.Interval{From: clock.Draw(t, "from"), To: clock.Draw(t, "to")}
			}), 1, 3).Draw(t, "intervals")
		}
		for _, user := range ids.Draw(t, "readers") {
			if e.Chat.Cursors == nil {
				e.Chat.Cursors = map[string]decide.Cursor{}
			}
			cur := decide.Cursor{Read: clock.Draw(t, "read"), Delivered: clock.Draw(t, "delivered")}
			for _, dev := range ids.Draw(t, "devices") {
				if cur.Devices == nil {
					cur.Devices = map[string]decide.DeviceCursor{}
				}
				cur.Devices[dev] = decide.DeviceCursor{Delivered: clock.Draw(t, "device delivered")}
			}
			e.Chat.Cursors[user] = cur
		}
		e.Chat.Sent = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) decide.SentMessage {
			return decide.SentMessage{Client: rapid.Uint64().Draw(t, "client"), Seq: clock.Draw(t, "seq"), AtMs: clock.Draw(t, "sent at")}
		}), 0, 8).Draw(t, "sent")
		// The first ones may be sends an earlier release remembered.
		for i := range rapid.IntRange(0, len(e.Chat.Sent)).Draw(t, "legacy sends") {
			e.Chat.Sent[i].Legacy = true
		}
	}
	return e
}

// sameEntity compares entities by their JSON, which ignores the difference
// between nil and empty that no policy depends on.
func sameEntity(t *rapid.T, a, b *tableValue) {
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
		if data[0] != entityFormat5 {
			t.Fatalf("format byte %d", data[0])
		}
		got, err := entityCodec{}.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		sameEntity(t, e, got.(*tableValue))
		legacy, _ := json.Marshal(e)
		old, err := entityCodec{}.Decode(legacy)
		if err != nil {
			t.Fatal(err)
		}
		sameEntity(t, e, old.(*tableValue))
	})
}

// Values of the earlier binary formats decode as the same entity (their
// conversation in JSON): those of the first two with their ids, which had no seen time, dated by
// DateSeenUnknown; the redelivery memory formats 2 and 3 carried, whatever
// it holds, is passed over.
func TestEntityCodecReadsEarlierFormats(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := drawEntity(t)
		for _, format := range []byte{entityFormat1, entityFormat2, entityFormat3, entityFormat4} {
			data, err := encodeEntity(e, format)
			if err != nil {
				t.Fatal(err)
			}
			if format == entityFormat2 || format == entityFormat3 {
				// A memory in place of the empty one encodeEntity wrote.
				memory := rapid.SliceOf(rapid.Byte()).Draw(t, "redelivery memory")
				data = binary.AppendVarint(data[:len(data)-2], rapid.Int64().Draw(t, "next input"))
				data = binary.AppendUvarint(data, uint64(len(memory)))
				data = append(data, memory...)
			}
			got, err := entityCodec{}.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			want := *e
			if format < entityFormat3 {
				want.Entity = undated(&e.Entity)
			}
			sameEntity(t, &want, got.(*tableValue))
		}
	})
}

// undated is e as a table of an earlier release held it, its ids without
// seen times, after DateSeenUnknown: a copy, each id seen at the newest
// time e holds.
func undated(e *decide.Entity) decide.Entity {
	c := *e
	hashes := func(ids decide.EventIDs) decide.EventIDs {
		out := slices.Clone(ids)
		for i := range out {
			out[i].AtMs = decide.SeenUnknown
		}
		return out
	}
	c.Recent = hashes(e.Recent)
	c.Devices = nil
	for id, d := range e.Devices {
		if c.Devices == nil {
			c.Devices = map[string]*decide.Device{}
		}
		dc := *d
		dc.Recent = hashes(d.Recent)
		c.Devices[id] = &dc
	}
	c.DateSeenUnknown()
	return c
}

// An id of an earlier release is dated at the newest time its entity
// holds, whichever part holds it, so it is kept a full window from about
// the upgrade.
func TestDateSeenUnknown(t *testing.T) {
	unseen := decide.EventIDs{{Hash: 1, AtMs: decide.SeenUnknown}}
	for _, tc := range []struct {
		name string
		e    decide.Entity
	}{
		{"own row", decide.Entity{Row: decide.Row{UpdatedAtMs: 50}}},
		{"device row", decide.Entity{Row: decide.Row{UpdatedAtMs: 10}, Devices: map[string]*decide.Device{"d": {Row: decide.Row{UpdatedAtMs: 50}}}}},
		{"quarantined child", decide.Entity{Quarantine: []decide.Event{{ReceivedAtMs: 50}, {ReceivedAtMs: 20}}}},
		{"buffered step", decide.Entity{Row: decide.Row{UpdatedAtMs: 10}, Buffer: []decide.Event{{ReceivedAtMs: 50}}}},
		{"sent message", decide.Entity{Chat: &decide.Conversation{Sent: []decide.SentMessage{{AtMs: 50}}}}},
	} {
		e := tc.e
		e.Recent = slices.Clone(unseen)
		if e.Devices != nil {
			e.Devices["d"].Recent = slices.Clone(unseen)
		}
		e.DateSeenUnknown()
		if e.Recent[0].AtMs != 50 || e.Devices != nil && e.Devices["d"].Recent[0].AtMs != 50 {
			t.Errorf("%s: dated %+v", tc.name, e.Recent)
		}
	}
}

// Tables of earlier releases remembered the event ids themselves, in JSON.
func TestEntityCodecReadsIDsOfEarlierReleases(t *testing.T) {
	v, err := entityCodec{}.Decode([]byte(`{"applied":true,"version":3,"updated_at_ms":1700,"state":{"presence":"AWAY"},"recent":["e1","e2"]}`))
	if err != nil {
		t.Fatal(err)
	}
	e := v.(*tableValue)
	if !e.Remembers("e1") || !e.Remembers("e2") || e.Remembers("e3") || e.Version != 3 || string(e.State) != `{"presence":"AWAY"}` {
		t.Fatalf("decoded %+v", e)
	}
	// Seen at the entity's last update, as ids without a time are.
	for _, id := range e.Recent {
		if id.AtMs != 1700 {
			t.Fatalf("an id of an earlier release seen at %d", id.AtMs)
		}
	}
}

// A conversation of a table of an earlier release remembered each send by
// its client key and message id, in JSON: it decodes to the key's hash, so
// a retry of a send made before the upgrade still gets its sequence back.
func TestEntityCodecReadsSendsOfEarlierReleases(t *testing.T) {
	old := decide.Entity{Row: decide.Row{Applied: true, Version: 7}, Chat: &decide.Conversation{Members: []string{"ann"}}}
	data, err := encodeEntity(&tableValue{Entity: old}, entityFormat4)
	if err != nil {
		t.Fatal(err)
	}
	chat := `{"members":["ann"],"sent":[{"client_key":"phone\u0000c1","seq":7,"message_id":"k:7","at_ms":1799999999000}]}`
	// The conversation is the second of the three JSON parts, the last
	// ones of a format 4 value: the empty buffer, the conversation, the
	// empty quarantine.
	empty := []byte{0}
	prefix := data[:len(data)-len(empty)-len(binary.AppendUvarint(nil, uint64(len(`{"members":["ann"]}`))))-len(`{"members":["ann"]}`)-len(empty)]
	data = append(appendBytes(append(slices.Clone(prefix), empty...), []byte(chat)), empty...)
	v, err := entityCodec{}.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	sent := v.(*tableValue).Chat.Sent
	if len(sent) != 1 || sent[0].Seq != 7 || sent[0].AtMs != 1799999999000 {
		t.Fatalf("decoded sends %+v", sent)
	}
	// Retried, the send gets its sequence and message id back.
	h := newHandler(testenv.Shipped(t, "chat"), Options{Logger: testenv.Logger(t)})
	c := &oneKeyTransaction{key: "k", stored: partedStore{"k": data}, headers: goka.Headers{}, decodeEach: true}
	c.decide(t, h, []byte(`{"event_id":"retry","type":"message.send","conversation_id":"k","sender_id":"ann","sender_device_id":"phone","client_message_id":"c1","body":"hi"}`))
	var o record.Outcome
	if _, err := record.DecodeOutcome(c.outcome, &o); err != nil {
		t.Fatal(err)
	}
	if o.Outcome != record.Duplicate || o.Version != 7 || o.MessageID != "k:7" {
		t.Fatalf("the retry of a send stored before the upgrade: %s %d %q", o.Outcome, o.Version, o.MessageID)
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

// A full memory of ids seen about a second apart costs 8 bytes of hash
// and 3 of seen time an id, and ids spread over the longest window at most
// the 13 bytes the configuration budgets.
func TestEntityCodecSeenTimesAreCompact(t *testing.T) {
	size := func(step int64) int {
		e := &tableValue{Entity: decide.Entity{Row: decide.Row{UpdatedAtMs: 1_700_000_000_000}}}
		for i := range int64(256) {
			e.Recent = append(e.Recent, decide.SeenID{Hash: uint64(i), AtMs: e.UpdatedAtMs - (255-i)*step})
		}
		with, err := entityCodec{}.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		e.Recent = nil
		without, err := entityCodec{}.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		return len(with) - len(without)
	}
	if n := size(1000); n > 256*11+2 {
		t.Errorf("256 ids a second apart take %d bytes", n)
	}
	if n := size(config.MaxDedupWindow.Milliseconds() / 255); n > 256*config.DedupIDBytes+2 {
		t.Errorf("256 ids over %s take %d bytes, budgeted %d an id", config.MaxDedupWindow, n, config.DedupIDBytes)
	}
}
