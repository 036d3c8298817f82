package processors

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/envelope"
)

func chatEvent(id, typ string, atMs int64, fields map[string]any) Event {
	body := map[string]any{"event_id": id, "type": typ, "conversation_id": "conv"}
	for k, v := range fields {
		body[k] = v
	}
	raw, _ := json.Marshal(body)
	return Event{Fields: envelope.Fields{Key: "conv", EventID: id, Type: typ}, Body: raw, ReceivedAtMs: atMs}
}

func send(id, sender, device, clientID string, atMs int64) Event {
	return chatEvent(id, chatSend, atMs, map[string]any{"sender_id": sender, "sender_device_id": device, "client_message_id": clientID, "body": "hi"})
}

func member(id, typ, user string) Event {
	return chatEvent(id, typ, 0, map[string]any{"user_id": user})
}

func receipt(id, typ, user string, seq int64) Event {
	return chatEvent(id, typ, 0, map[string]any{"user_id": user, "device_id": "d", "conversation_seq": seq})
}

func TestAssignDecisions(t *testing.T) {
	s := chat(t)
	p := assign{stream: s}
	var e Entity
	steps := []struct {
		ev        Event
		outcome   string
		reason    string
		version   int64
		messageID string
	}{
		{member("e1", chatMemberAdded, "alice"), "applied", "", 0, ""},
		{send("e2", "bob", "b1", "m1", 1), "rejected", ReasonNotMember, 0, ""},
		{send("e3", "alice", "a1", "m1", 2), "applied", "", 1, "conv:1"},
		// The client timed out after the server committed and sent again.
		{send("e4", "alice", "a1", "m1", 3), "duplicate", "", 1, "conv:1"},
		{send("e3", "alice", "a1", "m1", 4), "duplicate", "", 1, "conv:1"},
		{send("e5", "alice", "a2", "m1", 5), "applied", "", 2, "conv:2"},
		{receipt("e6", chatReceiptRead, "alice", 2), "applied", "", 2, ""},
		{receipt("e7", chatReceiptRead, "alice", 1), "stale", "", 1, ""},
		{receipt("e8", chatReceiptDelivered, "alice", 1), "applied", "", 1, ""},
		{receipt("e9", chatReceiptDelivered, "alice", 3), "rejected", ReasonAheadOfMessages, 3, ""},
		{member("e10", chatMemberRemoved, "alice"), "applied", "", 2, ""},
		{send("e11", "alice", "a1", "m9", 6), "rejected", ReasonNotMember, 2, ""},
	}
	for i, st := range steps {
		got := p.decide(&e, st.ev).Decisions
		if len(got) != 1 || got[0].Outcome != st.outcome || got[0].Reason != st.reason || got[0].Version != st.version || got[0].MessageID != st.messageID {
			t.Fatalf("step %d (%s): got %+v; want %s/%s version %d message %q", i, st.ev.EventID, got, st.outcome, st.reason, st.version, st.messageID)
		}
	}
	var state struct {
		LastSeq int64             `json:"last_seq"`
		Members []string          `json:"members"`
		Cursors map[string]Cursor `json:"cursors"`
	}
	if err := json.Unmarshal(e.State, &state); err != nil || state.LastSeq != 2 || len(state.Members) != 0 || state.Cursors["alice"] != (Cursor{Read: 2, Delivered: 1}) {
		t.Fatalf("public state %s (%v)", e.State, err)
	}
}

func TestAssignIdempotencyWindowAndBound(t *testing.T) {
	s := chat(t)
	s.Limits.IdempotencyWindow = time.Hour
	s.Limits.IdempotencyKeys = 2
	p := assign{stream: s}
	var e Entity
	p.decide(&e, member("m", chatMemberAdded, "alice"))
	p.decide(&e, send("a", "alice", "d", "c1", 0))
	// Past the window the same client key is a new message.
	if d := p.decide(&e, send("b", "alice", "d", "c1", time.Hour.Milliseconds()+1)).Decisions[0]; d.Outcome != "applied" || d.Version != 2 {
		t.Fatalf("after the window: %+v", d)
	}
	p.decide(&e, send("c", "alice", "d", "c2", time.Hour.Milliseconds()+2))
	p.decide(&e, send("d", "alice", "d", "c3", time.Hour.Milliseconds()+3))
	if len(e.Chat.Sent) != 2 {
		t.Fatalf("%d client keys kept, bound 2", len(e.Chat.Sent))
	}
}

// Sends permuted, duplicated and retried under new event ids: each logical
// message gets exactly one sequence, every report of it names that one, and
// the sequences are 1..n with no gap.
func TestAssignEachMessageGetsOneSequence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := chat(t)
		p := assign{stream: s}
		var e Entity
		p.decide(&e, member("join-a", chatMemberAdded, "alice"))
		p.decide(&e, member("join-b", chatMemberAdded, "bob"))
		n := rapid.IntRange(1, 30).Draw(t, "messages")
		var deliveries []Event
		for i := range n {
			sender := rapid.SampledFrom([]string{"alice", "bob"}).Draw(t, "sender")
			original := send(fmt.Sprintf("e%d", i), sender, sender+"-phone", fmt.Sprintf("c%d", i), int64(i))
			deliveries = append(deliveries, original)
			for r := range rapid.IntRange(0, 2).Draw(t, "retries") {
				retry := send(fmt.Sprintf("e%d-retry%d", i, r), sender, sender+"-phone", fmt.Sprintf("c%d", i), int64(i))
				deliveries = append(deliveries, retry)
			}
			if rapid.Bool().Draw(t, "redelivered") {
				deliveries = append(deliveries, original)
			}
		}
		seqOf := map[string]int64{}
		for _, ev := range rapid.Permutation(deliveries).Draw(t, "order") {
			var f chatFields
			_ = json.Unmarshal(ev.Body, &f)
			for _, d := range p.decide(&e, ev).Decisions {
				if d.Outcome != "applied" && d.Outcome != "duplicate" {
					continue
				}
				if prev, ok := seqOf[f.ClientMessageID]; ok && prev != d.Version {
					t.Fatalf("message %s got sequences %d and %d", f.ClientMessageID, prev, d.Version)
				}
				seqOf[f.ClientMessageID] = d.Version
			}
		}
		var seqs []int64
		for _, seq := range seqOf {
			seqs = append(seqs, seq)
		}
		slices.Sort(seqs)
		if len(seqs) != n || e.Version != int64(n) {
			t.Fatalf("%d messages numbered, last %d; want %d", len(seqs), e.Version, n)
		}
		for i, seq := range seqs {
			if seq != int64(i+1) {
				t.Fatalf("sequences %v are not 1..%d", seqs, n)
			}
		}
	})
}

// Through goka: the assigned message id on the outcome, and a typing
// indicator written to chat.in by a foreign producer is neither decided nor
// stored.
func TestProcessorChatThroughGoka(t *testing.T) {
	s := chat(t)
	tt, _, names := startTester(t, s, Options{})
	outQ := tt.NewQueueTracker(names.Outcomes)
	for _, body := range []string{
		`{"event_id":"j","type":"member.added","conversation_id":"c9","user_id":"u1"}`,
		`{"event_id":"t","type":"typing","conversation_id":"c9","user_id":"u1"}`,
		`{"event_id":"s","type":"message.send","conversation_id":"c9","sender_id":"u1","sender_device_id":"d","client_message_id":"m","body":"hi"}`,
		`{"event_id":"s2","type":"message.send","conversation_id":"c9","sender_id":"u1","sender_device_id":"d","client_message_id":"m","body":"hi"}`,
	} {
		tt.Consume(names.In, "c9", []byte(body))
	}
	var got []string
	for _, o := range outcomes(t, outQ) {
		got = append(got, fmt.Sprintf("%s:%s:%d:%s", o.EventID, o.Outcome, o.Version, o.MessageID))
	}
	if want := []string{"j:applied:0:", "s:applied:1:c9:1", "s2:duplicate:1:c9:1"}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	e := tt.TableValue(goka.GroupTable(goka.Group(s.Name)), "c9").(*Entity)
	if e.seen("t") {
		t.Fatal("the typing indicator was stored in the table")
	}
}
