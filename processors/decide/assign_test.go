package decide

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// chatEvent is a chat event of type typ with fields, read through the
// rules as the processor reads it.
func chatEvent(t *testing.T, r *Rules, id, typ string, atMs int64, fields map[string]any) Event {
	t.Helper()
	body := map[string]any{"event_id": id, "type": typ, "conversation_id": "conv"}
	for k, v := range fields {
		body[k] = v
	}
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return read(t, r, raw, atMs)
}

func send(t *testing.T, r *Rules, id, sender, device, clientID string, atMs int64) Event {
	return chatEvent(t, r, id, "message.send", atMs, map[string]any{"sender_id": sender, "sender_device_id": device, "client_message_id": clientID, "body": "hi"})
}

func member(t *testing.T, r *Rules, id, typ, user string) Event {
	return chatEvent(t, r, id, typ, 0, map[string]any{"user_id": user})
}

func receipt(t *testing.T, r *Rules, id, typ, user string, seq int64) Event {
	return chatEvent(t, r, id, typ, 0, map[string]any{"user_id": user, "device_id": "d", "conversation_seq": seq})
}

func TestAssignDecisions(t *testing.T) {
	p := For(testenv.Shipped(t, "chat"))
	var e Entity
	steps := []struct {
		ev        Event
		outcome   record.Result
		reason    record.Reason
		version   int64
		messageID string
	}{
		{member(t, p, "e1", "member.added", "alice"), "applied", "", 0, ""},
		{send(t, p, "e2", "bob", "b1", "m1", 1), "rejected", record.ReasonNotMember, 0, ""},
		{send(t, p, "e3", "alice", "a1", "m1", 2), "applied", "", 1, "conv:1"},
		// The client timed out after the server committed and sent again.
		{send(t, p, "e4", "alice", "a1", "m1", 3), "duplicate", "", 1, "conv:1"},
		{send(t, p, "e3", "alice", "a1", "m1", 4), "duplicate", "", 1, "conv:1"},
		{send(t, p, "e5", "alice", "a2", "m1", 5), "applied", "", 2, "conv:2"},
		{receipt(t, p, "e6", "receipt.read", "alice", 2), "applied", "", 2, ""},
		{receipt(t, p, "e7", "receipt.read", "alice", 1), "stale", "", 1, ""},
		{receipt(t, p, "e8", "receipt.delivered", "alice", 1), "applied", "", 1, ""},
		{receipt(t, p, "e9", "receipt.delivered", "alice", 3), "rejected", record.ReasonAheadOfConversation, 3, ""},
		{member(t, p, "e10", "member.removed", "alice"), "applied", "", 2, ""},
		{send(t, p, "e11", "alice", "a1", "m9", 6), "rejected", record.ReasonNotMember, 2, ""},
	}
	for i, st := range steps {
		got := p.Decide(&e, st.ev).Decisions
		if len(got) != 1 || got[0].Outcome != st.outcome || got[0].Reason != st.reason || got[0].Version != st.version || got[0].MessageID != st.messageID {
			t.Fatalf("step %d (%s): got %+v; want %s/%s version %d message %q", i, st.ev.EventID, got, st.outcome, st.reason, st.version, st.messageID)
		}
	}
	var state struct {
		LastSeq    int64                 `json:"last_seq"`
		Members    []string              `json:"members"`
		Membership map[string][]Interval `json:"membership"`
		Cursors    map[string]Cursor     `json:"cursors"`
	}
	err := json.Unmarshal(e.State, &state)
	if cur := state.Cursors["alice"]; err != nil || state.LastSeq != 2 || len(state.Members) != 0 || cur.Read != 2 || cur.Delivered != 1 || cur.Devices["d"].Delivered != 1 ||
		len(state.Membership["alice"]) != 1 || state.Membership["alice"][0] != (Interval{From: 1, To: 2}) {
		t.Fatalf("public state %s (%v)", e.State, err)
	}
}

// A retried send, under a new event id as the bridge gives each attempt,
// is answered with what the first attempt was given: its sequence, its
// message id and when it was accepted; no other outcome carries that time.
func TestAssignRetryCarriesTheOriginalResult(t *testing.T) {
	p := For(testenv.Shipped(t, "chat"))
	var e Entity
	p.Decide(&e, member(t, p, "m", "member.added", "alice"))
	first := p.Decide(&e, send(t, p, "try-1", "alice", "phone", "c1", 1000)).Decisions[0]
	p.Decide(&e, send(t, p, "other", "alice", "phone", "c2", 1500))
	retry := p.Decide(&e, send(t, p, "try-2", "alice", "phone", "c1", 2000)).Decisions[0]
	if first.Outcome != record.Applied || first.AcceptedAtMs != 0 {
		t.Fatalf("first attempt: %+v", first)
	}
	if retry.Outcome != record.Duplicate || retry.Version != first.Version || retry.MessageID != first.MessageID || retry.AcceptedAtMs != 1000 {
		t.Fatalf("retry: %s seq %d %q accepted at %d; want duplicate seq %d %q accepted at 1000",
			retry.Outcome, retry.Version, retry.MessageID, retry.AcceptedAtMs, first.Version, first.MessageID)
	}
}

func TestAssignIdempotencyWindowAndBound(t *testing.T) {
	s := testenv.Shipped(t, "chat")
	s.Limits.IdempotencyWindow = time.Hour
	s.Limits.IdempotencyKeys = 2
	p := For(s)
	var e Entity
	p.Decide(&e, member(t, p, "m", "member.added", "alice"))
	p.Decide(&e, send(t, p, "a", "alice", "d", "c1", 0))
	// Past the window the same client key is a new message.
	if d := p.Decide(&e, send(t, p, "b", "alice", "d", "c1", time.Hour.Milliseconds()+1)).Decisions[0]; d.Outcome != "applied" || d.Version != 2 {
		t.Fatalf("after the window: %+v", d)
	}
	p.Decide(&e, send(t, p, "c", "alice", "d", "c2", time.Hour.Milliseconds()+2))
	p.Decide(&e, send(t, p, "d", "alice", "d", "c3", time.Hour.Milliseconds()+3))
	if len(e.Chat.Sent) != 2 {
		t.Fatalf("%d client keys kept, bound 2", len(e.Chat.Sent))
	}
}

// An event of a type the catalogue gives no part (a foreign producer's) is
// rejected as unknown; the stream's own message id format names the
// messages.
func TestAssignUnknownTypeAndMessageIDFormat(t *testing.T) {
	s := testenv.Shipped(t, "chat")
	s.Assign.MessageID = "msg-{seq}@{key}"
	p := For(s)
	var e Entity
	p.Decide(&e, member(t, p, "m", "member.added", "alice"))
	if d := p.Decide(&e, chatEvent(t, p, "x", "message.edit", 0, nil)).Decisions[0]; d.Outcome != record.Rejected || d.Reason != record.ReasonUnknownType {
		t.Fatalf("an event of no part: %+v", d)
	}
	if d := p.Decide(&e, send(t, p, "s", "alice", "d", "c1", 0)).Decisions[0]; d.MessageID != "msg-1@conv" {
		t.Fatalf("message id %q, want the stream's format", d.MessageID)
	}
}

// With terminal states a conversation closes: a new event after it is
// rejected, a send retried from before it still gets its sequence back,
// and the closing event needs no other part.
func TestAssignTerminal(t *testing.T) {
	s := testenv.Shipped(t, "chat")
	s.Terminal = config.Terminal{Field: "/type", Values: []string{"conversation.closed"}}
	p := For(s)
	var e Entity
	p.Decide(&e, member(t, p, "m", "member.added", "alice"))
	p.Decide(&e, send(t, p, "s1", "alice", "d", "c1", 0))
	steps := []struct {
		ev      Event
		outcome record.Result
		reason  record.Reason
		version int64
	}{
		{chatEvent(t, p, "close", "conversation.closed", 0, nil), record.Applied, "", 1},
		{send(t, p, "s2", "alice", "d", "c2", 0), record.Rejected, record.ReasonTerminal, 1},
		{member(t, p, "m2", "member.added", "bob"), record.Rejected, record.ReasonTerminal, 1},
		{send(t, p, "s1-retry", "alice", "d", "c1", 0), record.Duplicate, "", 1},
		{chatEvent(t, p, "close", "conversation.closed", 0, nil), record.Duplicate, "", 1},
	}
	for i, st := range steps {
		d := p.Decide(&e, st.ev).Decisions[0]
		if d.Outcome != st.outcome || d.Reason != st.reason || d.Version != st.version {
			t.Fatalf("step %d (%s): %s/%s version %d, want %s/%s %d", i, st.ev.EventID, d.Outcome, d.Reason, d.Version, st.outcome, st.reason, st.version)
		}
	}
	if !e.Terminal {
		t.Fatal("the conversation is not terminal after its closing event")
	}
}

// The policy reads its fields where the catalogue says, whatever their
// names: a send whose sender field is renamed is read from the new field.
func TestAssignReadsTheCataloguePointers(t *testing.T) {
	s := testenv.Shipped(t, "chat")
	s.Assign.Send.Sender = "/author"
	p := For(s)
	ev := chatEvent(t, p, "s", "message.send", 0, map[string]any{"author": "carol", "sender_id": "mallory", "sender_device_id": "d", "client_message_id": "c"})
	if ev.Member != "carol" || ev.ClientKey != "d\x00c" {
		t.Fatalf("read member %q client key %q", ev.Member, ev.ClientKey)
	}
	if got := fmt.Sprint(p.Decide(&Entity{}, ev).Decisions[0].Reason); got != string(record.ReasonNotMember) {
		t.Fatalf("a send from a non-member: %s", got)
	}
}

// A conversation whose members would outgrow its share of the table value
// refuses the next member with conversation_full, copied to the DLQ, and
// keeps deciding: its members can still send.
func TestAssignConversationFull(t *testing.T) {
	s := testenv.Shipped(t, "chat")
	r := For(s)
	var e Entity
	// 256-byte names of a character JSON escapes to six bytes.
	name := func(i int) string { return fmt.Sprintf("%03d%s", i, strings.Repeat("\x01", 253)) }
	full := -1
	for i := 0; full < 0 && i < 1000; i++ {
		effects := r.Decide(&e, member(t, r, fmt.Sprint("m", i), "member.added", name(i)))
		switch d := effects.Decisions[0]; {
		case d.Reason == record.ReasonConversationFull:
			if d.Outcome != record.Rejected || d.DeadLetter != record.ReasonConversationFull {
				t.Fatalf("a full conversation decided %+v", d)
			}
			full = i
		case d.Outcome != record.Applied:
			t.Fatalf("member %d: %+v", i, d)
		}
	}
	if full < 80 {
		t.Fatalf("the conversation was full after %d members (or never, -1)", full)
	}
	if got := r.Decide(&e, send(t, r, "s", name(0), "d", "c1", 1)).Decisions[0]; got.Outcome != record.Applied {
		t.Fatalf("a member's send in a full conversation: %+v", got)
	}
}

// Delivery is recorded per device: a laptop that got message 1 after the
// phone got message 2 is applied for the laptop, and the user's delivered
// stays at the highest any device reached. At limits.devices the device
// that received least makes room.
func TestAssignDeliveryPerDevice(t *testing.T) {
	s := testenv.Shipped(t, "chat")
	s.Limits.Devices = 2
	p := For(s)
	var e Entity
	p.Decide(&e, member(t, p, "m", "member.added", "alice"))
	for i := range 3 {
		p.Decide(&e, send(t, p, fmt.Sprint("s", i), "alice", "d", fmt.Sprint("c", i), 0))
	}
	delivered := func(id, device string, seq int64) Decision {
		return p.Decide(&e, chatEvent(t, p, id, "receipt.delivered", 0, map[string]any{"user_id": "alice", "device_id": device, "conversation_seq": seq})).Decisions[0]
	}
	steps := []struct {
		id, device string
		seq        int64
		outcome    record.Result
	}{
		{"r1", "phone", 2, record.Applied},
		{"r2", "laptop", 1, record.Applied},
		{"r3", "laptop", 1, record.Stale},
		{"r4", "phone", 2, record.Stale},
		{"r5", "tablet", 3, record.Applied}, // evicts the laptop (1)
		{"r6", "laptop", 1, record.Applied}, // a new device again: evicts the phone (2)
	}
	for _, st := range steps {
		if d := delivered(st.id, st.device, st.seq); d.Outcome != st.outcome || d.Version != st.seq {
			t.Fatalf("%s: %+v, want %s at %d", st.id, d, st.outcome, st.seq)
		}
	}
	cur := e.Chat.Cursors["alice"]
	if cur.Delivered != 3 || len(cur.Devices) != 2 || cur.Devices["tablet"].Delivered != 3 || cur.Devices["laptop"].Delivered != 1 {
		t.Fatalf("cursor %+v", cur)
	}
}

// A member who joins and leaves more than MaxIntervals times keeps the
// last MaxIntervals intervals: the oldest is forgotten, never merged.
func TestAssignIntervalsBound(t *testing.T) {
	p := For(testenv.Shipped(t, "chat"))
	var e Entity
	p.Decide(&e, member(t, p, "a", "member.added", "alice"))
	for i := range MaxIntervals + 3 {
		p.Decide(&e, member(t, p, fmt.Sprint("j", i), "member.added", "bob"))
		p.Decide(&e, send(t, p, fmt.Sprint("s", i), "alice", "d", fmt.Sprint("c", i), 0))
		p.Decide(&e, member(t, p, fmt.Sprint("l", i), "member.removed", "bob"))
		p.Decide(&e, send(t, p, fmt.Sprint("t", i), "alice", "d", fmt.Sprint("u", i), 0))
	}
	ivs := e.Chat.Membership["bob"]
	if len(ivs) != MaxIntervals || ivs[0] != (Interval{From: 7, To: 7}) || ivs[MaxIntervals-1] != (Interval{From: 37, To: 37}) {
		t.Fatalf("bob's intervals %v", ivs)
	}
	// A member of a conversation stored before intervals reads everything.
	old := Entity{Row: Row{Applied: true, Version: 5}, Chat: &Conversation{Members: []string{"carol"}}}
	p.Decide(&old, member(t, p, "x", "member.removed", "carol"))
	if got := old.Chat.Membership["carol"]; len(got) != 1 || got[0] != (Interval{From: 1, To: 5}) {
		t.Fatalf("an old member's intervals %v", got)
	}
}

// A send is remembered with its sender: another member who names the same
// device and client message id gets a sequence of their own, never the
// first sender's message. A send remembered by an earlier release, keyed
// without its sender, is still recognised when retried.
func TestAssignRemembersTheSender(t *testing.T) {
	p := For(testenv.Shipped(t, "chat"))
	var e Entity
	for _, user := range []string{"alice", "mallory"} {
		p.Decide(&e, member(t, p, "add-"+user, "member.added", user))
	}
	steps := []struct {
		ev      Event
		outcome record.Result
		version int64
	}{
		{send(t, p, "s1", "alice", "phone", "m1", 1), "applied", 1},
		{send(t, p, "s2", "mallory", "phone", "m1", 2), "applied", 2},
		{send(t, p, "s3", "alice", "phone", "m1", 3), "duplicate", 1},
		{send(t, p, "s4", "mallory", "phone", "m1", 4), "duplicate", 2},
	}
	for i, st := range steps {
		got := p.Decide(&e, st.ev).Decisions
		if len(got) != 1 || got[0].Outcome != st.outcome || got[0].Version != st.version {
			t.Fatalf("step %d: got %+v, want %s at %d", i, got, st.outcome, st.version)
		}
	}
	// As an earlier release remembered alice's send m2: by its client key.
	e.Chat.Sent = append([]SentMessage{{Client: idHash("tablet\x00m2"), Seq: 1, AtMs: 1, Legacy: true}}, e.Chat.Sent...)
	if got := p.Decide(&e, send(t, p, "s5", "alice", "tablet", "m2", 5)).Decisions; got[0].Outcome != record.Duplicate || got[0].Version != 1 {
		t.Fatalf("the retry of a send remembered before senders were: %+v", got)
	}
}
