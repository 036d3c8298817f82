package realtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// chatState is a conversation's public state, as the processor writes it.
func chatState(lastSeq int64, members ...string) string {
	m, _ := json.Marshal(members)
	return fmt.Sprintf(`{"last_seq":%d,"members":%s}`, lastSeq, m)
}

// sent writes the outcome of an applied send, as the processor does.
func (e *bridgeEnv) sent(conv string, seq int64, sender, body string) {
	e.t.Helper()
	payload := fmt.Sprintf(`{"event_id":"e%d","type":"message.send","conversation_id":%q,"sender_id":%q,"sender_device_id":"%s-phone","client_message_id":"c%d","body":%q}`,
		seq, conv, sender, sender, seq, body)
	o := record.Outcome{Stream: "chat", Key: conv, EventID: fmt.Sprintf("e%d", seq), EventType: "message.send", Version: seq,
		Outcome: record.Applied, MessageID: fmt.Sprintf("%s:%d", conv, seq), ReceivedAtMs: 1000 + seq, Payload: json.RawMessage(payload)}
	rec := &kgo.Record{Topic: naming.Prefixes{}.For("chat").Outcomes, Key: []byte(conv), Value: record.AppendOutcome(nil, &o)}
	if err := e.cl.ProduceSync(e.ctx, rec).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

type messagesPage struct {
	Messages []struct {
		Seq             int64  `json:"conversation_seq"`
		MessageID       string `json:"message_id"`
		SenderID        string `json:"sender_id"`
		SenderDeviceID  string `json:"sender_device_id"`
		ClientMessageID string `json:"client_message_id"`
		Body            string `json:"body"`
		AcceptedAtMs    int64  `json:"accepted_at_ms"`
	} `json:"messages"`
	NextAfterSeq int64 `json:"next_after_seq"`
	Limited      bool  `json:"limited"`
}

func (p messagesPage) seqs() []int64 {
	var out []int64
	for _, m := range p.Messages {
		out = append(out, m.Seq)
	}
	return out
}

// Catch-up after a reconnect returns each sequence once, in order, however
// often an outcome was repeated, also from further behind than the window
// (history_test.go covers limited); members only, and a removed member gets 403 and,
// on an open connection, nothing decided after the removal.
func TestChatCatchUp(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) { c.Bridge.ChatWindow = 5 }, "chat")
	e.publish("chat", "room", 1, chatState(0, "alice", "bob"))
	for seq := int64(1); seq <= 8; seq++ {
		e.sent("room", seq, "alice", fmt.Sprintf("message %d", seq))
		if seq%3 == 0 {
			e.sent("room", seq, "alice", fmt.Sprintf("message %d", seq)) // repeated after a processor restart
		}
	}
	e.publish("chat", "room", 2, chatState(8, "alice", "bob"))
	alice, bob, carol := e.token("alice", "chat"), e.token("bob", "chat"), e.token("carol", "chat")
	var page messagesPage
	testenv.WaitFor(t, e.ctx, "the sends held", func() bool {
		return e.get("/v1/streams/chat/entities/room/messages?after_seq=5", alice, &page) == http.StatusOK && len(page.Messages) == 3
	})
	if !slices.Equal(page.seqs(), []int64{6, 7, 8}) || page.Limited || page.NextAfterSeq != 8 {
		t.Fatalf("after 5: %v limited %v next %d", page.seqs(), page.Limited, page.NextAfterSeq)
	}
	m := page.Messages[0]
	if m.MessageID != "room:6" || m.SenderID != "alice" || m.SenderDeviceID != "alice-phone" || m.ClientMessageID != "c6" || m.Body != "message 6" || m.AcceptedAtMs != 1006 {
		t.Errorf("message %+v", m)
	}
	// The window holds the last five: messages 2 and 3 are read back from
	// the outcomes, and nothing is limited.
	if e.get("/v1/streams/chat/entities/room/messages?after_seq=1&limit=2", bob, &page) != http.StatusOK || page.Limited || !slices.Equal(page.seqs(), []int64{2, 3}) || page.NextAfterSeq != 3 {
		t.Fatalf("after 1: %v limited %v next %d", page.seqs(), page.Limited, page.NextAfterSeq)
	}
	if e.get("/v1/streams/chat/entities/room/messages?after_seq=8", bob, &page) != http.StatusOK || len(page.Messages) != 0 || page.NextAfterSeq != 8 {
		t.Fatalf("after 8: %+v", page)
	}
	for _, path := range []string{"/messages", ""} {
		if status := e.get("/v1/streams/chat/entities/room"+path, carol, nil); status != http.StatusForbidden {
			t.Errorf("a non-member's %q: %d, want 403", path, status)
		}
	}
	if _, ents := e.snapshot("chat", carol, 10); len(ents) != 0 {
		t.Errorf("a non-member's snapshot shows %d conversations", len(ents))
	}

	// Bob follows the room, then is removed: the removal and what comes
	// after never reach him, and his connection ends.
	cursor, ents := e.snapshot("chat", bob, 10)
	if len(ents) != 1 {
		t.Fatalf("bob's snapshot: %+v", ents)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	whole, status := e.open(ctx, "chat", bob, cursor, "")
	followed, status2 := e.open(ctx, "chat", bob, cursor, "room")
	if status != http.StatusOK || status2 != http.StatusOK {
		t.Fatalf("events: %d %d", status, status2)
	}
	e.publish("chat", "room", 3, chatState(8, "alice", "bob")) // a change bob sees
	e.publish("chat", "room", 4, chatState(8, "alice"))        // bob removed
	e.sent("room", 9, "alice", "after bob left")
	e.publish("chat", "room", 5, chatState(9, "alice"))
	e.publish("chat", "other", 1, chatState(0, "bob")) // a conversation bob is in
	for name, s := range map[string]*sse{"whole stream": whole, "the room": followed} {
		ev, _ := s.next(t, 10*time.Second)
		var ent entityJSON
		if err := json.Unmarshal([]byte(ev.data), &ent); err != nil || ent.Version != 3 {
			t.Fatalf("%s: first event %+v", name, ev)
		}
	}
	// Following the room, the connection ends at the removal.
	if ev, ok := <-followed.events; ok {
		t.Errorf("after the removal bob received %+v", ev)
	}
	// On the whole stream, he only sees the conversation he is still in.
	ev, _ := whole.next(t, 10*time.Second)
	var ent entityJSON
	if err := json.Unmarshal([]byte(ev.data), &ent); err != nil || ent.Key != "other" {
		t.Fatalf("whole stream after the removal: %+v", ev)
	}
	if status := e.get("/v1/streams/chat/entities/room/messages?after_seq=0", bob, nil); status != http.StatusForbidden {
		t.Errorf("a removed member's catch-up: %d, want 403", status)
	}
	if _, status := e.open(ctx, "chat", bob, cursor, "room"); status != http.StatusForbidden {
		t.Errorf("a removed member following the room: %d, want 403", status)
	}
}
