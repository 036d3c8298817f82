package realtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// iv is a membership interval as the processor writes it and the
// messages endpoint answers it: To 0 while open.
type iv struct {
	From int64 `json:"from"`
	To   int64 `json:"to,omitempty"`
}

// memberState is a conversation's public state with membership
// intervals, as the processor writes it: its members are the users whose
// last interval is open, and its last message is message lastSeq's.
func memberState(lastSeq int64, membership map[string][]iv) string {
	members := []string{}
	for _, u := range slices.Sorted(maps.Keys(membership)) {
		if ivs := membership[u]; ivs[len(ivs)-1].To == 0 {
			members = append(members, u)
		}
	}
	doc := map[string]any{"last_seq": lastSeq, "members": members, "membership": membership}
	if lastSeq > 0 {
		doc["last_message"] = map[string]any{"body": fmt.Sprintf("message %d", lastSeq)}
	}
	b, _ := json.Marshal(doc)
	return string(b)
}

// intervalPage is a page of messages with the requester's intervals.
type intervalPage struct {
	messagesPage
	Intervals []iv `json:"intervals"`
}

// withHistory starts a second bridge on e's broker whose chat stream has
// the history policy history.
func (e *bridgeEnv) withHistory(history string) *bridgeEnv {
	e.t.Helper()
	other := *e
	cfg := *e.cfg
	s := *cfg.Streams["chat"]
	s.Assign.History = history
	cfg.Streams = map[string]*config.Stream{"chat": &s}
	other.cfg = &cfg
	other.start()
	return &other
}

// readAll pages a conversation's messages from the start, limit a page,
// and returns the sequences and the intervals of the last page.
func (e *bridgeEnv) readAll(conv, tok string, limit int) ([]int64, []iv) {
	e.t.Helper()
	var seqs []int64
	var after int64
	for {
		var page intervalPage
		if status := e.get(fmt.Sprintf("/v1/streams/chat/entities/%s/messages?after_seq=%d&limit=%d", conv, after, limit), tok, &page); status != http.StatusOK {
			e.t.Fatalf("messages after %d: %d", after, status)
		}
		seqs = append(seqs, page.seqs()...)
		if len(page.Messages) == 0 && page.NextAfterSeq == after {
			return seqs, page.Intervals
		}
		if page.NextAfterSeq < after {
			e.t.Fatalf("messages after %d go on after %d", after, page.NextAfterSeq)
		}
		after = page.NextAfterSeq
	}
}

// Who reads what of a conversation, by the membership intervals of its
// state, under each history policy: alice a member from the start; bob
// joined after message 2, left after 4 and came back after 5; carol left
// after 2; dave joined after the last message; erin never was a member.
// With joined each reads the messages of their intervals (bob not 5, sent
// while he was out), with shared everything up to the end of their last
// interval; a former member still reads theirs, with their intervals, but
// the entity tells them the boundary instead; a member who may not read
// the last message is shown the conversation without it, at the entity,
// in the snapshot and in events.
func TestChatReadsByMembershipInterval(t *testing.T) {
	joined := newBridgeEnv(t, testenv.Fake(t), nil, "chat")
	shared := joined.withHistory(config.HistoryShared)
	for seq := int64(1); seq <= 6; seq++ {
		joined.sent("room", seq, "alice", fmt.Sprintf("message %d", seq))
	}
	membership := map[string][]iv{"alice": {{From: 1}}, "bob": {{From: 3, To: 4}, {From: 6}}, "carol": {{From: 1, To: 2}}, "dave": {{From: 7}}}
	joined.publish("chat", "room", 1, memberState(6, membership))
	tok := map[string]string{}
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin"} {
		tok[u] = joined.token(u, "chat")
	}
	for _, e := range []*bridgeEnv{joined, shared} {
		testenv.WaitFor(t, e.ctx, "the room", func() bool { return e.get("/v1/streams/chat/entities/room", tok["alice"], nil) == http.StatusOK })
		// A bridge reads the messages apart from the state, and serves
		// what it holds after waiting 2 s for the rest: on a loaded
		// machine its reader of messages can lag longer. What follows is
		// who reads what, so it starts once both bridges hold them all.
		testenv.WaitFor(t, e.ctx, "the room's six messages", func() bool {
			var page intervalPage
			return e.get("/v1/streams/chat/entities/room/messages?after_seq=0&limit=100", tok["alice"], &page) == http.StatusOK && len(page.Messages) == 6
		})
	}

	all := []int64{1, 2, 3, 4, 5, 6}
	for _, c := range []struct {
		e          *bridgeEnv
		user       string
		seqs       []int64
		intervals  []iv
		lastShown  bool
		entity     int
		entityTold string
	}{
		{joined, "alice", all, []iv{{From: 1}}, true, http.StatusOK, ""},
		{joined, "bob", []int64{3, 4, 6}, []iv{{From: 3, To: 4}, {From: 6}}, true, http.StatusOK, ""},
		{joined, "carol", []int64{1, 2}, []iv{{From: 1, To: 2}}, false, http.StatusForbidden, "after message 2"},
		{joined, "dave", nil, []iv{{From: 7}}, false, http.StatusOK, ""},
		{shared, "alice", all, []iv{{From: 1}}, true, http.StatusOK, ""},
		{shared, "bob", all, []iv{{From: 1}}, true, http.StatusOK, ""},
		{shared, "carol", []int64{1, 2}, []iv{{From: 1, To: 2}}, false, http.StatusForbidden, "after message 2"},
		{shared, "dave", all, []iv{{From: 1}}, true, http.StatusOK, ""},
	} {
		policy := "joined"
		if c.e == shared {
			policy = "shared"
		}
		who := c.user + " (" + policy + ")"
		for _, limit := range []int{1, 2, 100} {
			seqs, ivs := c.e.readAll("room", tok[c.user], limit)
			if !slices.Equal(seqs, c.seqs) || !slices.Equal(ivs, c.intervals) {
				t.Errorf("%s, %d a page: read %v with intervals %v, want %v with %v", who, limit, seqs, ivs, c.seqs, c.intervals)
			}
		}
		var ent entityJSON
		var p problemBody
		into := any(&ent)
		if c.entity != http.StatusOK {
			into = &p
		}
		if status := c.e.get("/v1/streams/chat/entities/room", tok[c.user], into); status != c.entity || !strings.Contains(p.Detail, c.entityTold) {
			t.Errorf("%s: entity %d %q, want %d saying %q", who, status, p.Detail, c.entity, c.entityTold)
		}
		_, ents := c.e.snapshot("chat", tok[c.user], 10)
		if member := c.entity == http.StatusOK; len(ents) != map[bool]int{true: 1, false: 0}[member] {
			t.Errorf("%s: snapshot %+v, a member %v", who, ents, member)
		} else if member {
			for where, state := range map[string]json.RawMessage{"entity": ent.State, "snapshot": ents[0].State} {
				if shown := strings.Contains(string(state), "last_message"); shown != c.lastShown {
					t.Errorf("%s: the %s shows the last message %v, want %v: %s", who, where, shown, c.lastShown, state)
				}
			}
		}
	}
	for _, e := range []*bridgeEnv{joined, shared} {
		for _, path := range []string{"/messages?after_seq=0", ""} {
			if status := e.get("/v1/streams/chat/entities/room"+path, tok["erin"], nil); status != http.StatusForbidden {
				t.Errorf("erin, never a member: %q %d, want 403", path, status)
			}
		}
	}

	// Events: dave, who joined after the last message, gets the room's
	// changes without it under joined, with it under shared.
	ctx, cancel := context.WithTimeout(joined.ctx, 30*time.Second)
	defer cancel()
	daves := map[*bridgeEnv]*sse{}
	for _, e := range []*bridgeEnv{joined, shared} {
		cursor, _ := e.snapshot("chat", tok["dave"], 10)
		s, status := e.open(ctx, "chat", tok["dave"], cursor, "")
		if status != http.StatusOK {
			t.Fatalf("dave's events: %d", status)
		}
		defer s.close()
		daves[e] = s
	}
	joined.publish("chat", "room", 2, memberState(6, membership)) // a receipt, say
	for e, s := range daves {
		ev, _ := s.next(t, 10*time.Second)
		var ent entityJSON
		if err := json.Unmarshal([]byte(ev.data), &ent); err != nil || ev.event != "state" || ent.Version != 2 {
			t.Fatalf("dave's event %+v", ev)
		}
		if shown, want := strings.Contains(string(ent.State), "last_message"), e == shared; shown != want {
			t.Errorf("dave's event shows the last message %v, want %v: %s", shown, want, ent.State)
		}
	}
}

// A member removed from a conversation while following the whole stream
// is told once, with `event: left` and the last sequence they may read,
// and then receives nothing more of it, only the conversations they are
// still in; following the conversation alone, the connection ends after
// `left`. They still read the messages of their interval.
func TestChatRemovedMemberIsToldOnce(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "chat")
	for seq := int64(1); seq <= 3; seq++ {
		e.sent("room", seq, "alice", fmt.Sprintf("message %d", seq))
	}
	membership := map[string][]iv{"alice": {{From: 1}}, "bob": {{From: 2}}}
	e.publish("chat", "room", 1, memberState(3, membership))
	bob := e.token("bob", "chat")
	testenv.WaitFor(t, e.ctx, "the room", func() bool { return e.get("/v1/streams/chat/entities/room", bob, nil) == http.StatusOK })
	cursor, _ := e.snapshot("chat", bob, 10)
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	whole, status := e.open(ctx, "chat", bob, cursor, "")
	followed, status2 := e.open(ctx, "chat", bob, cursor, "room")
	if status != http.StatusOK || status2 != http.StatusOK {
		t.Fatalf("events: %d %d", status, status2)
	}
	defer whole.close()

	membership["bob"] = []iv{{From: 2, To: 3}}
	e.publish("chat", "room", 2, memberState(3, membership)) // bob removed after 3
	e.sent("room", 4, "alice", "message 4")
	e.publish("chat", "room", 3, memberState(4, membership))
	e.publish("chat", "other", 1, memberState(0, map[string][]iv{"bob": {{From: 1}}}))

	left := `{"key":"room","readable_until_seq":3}`
	for i, want := range []string{"left " + left, "state other"} {
		ev, _ := whole.next(t, 10*time.Second)
		got := ev.event + " " + ev.data
		if ev.event == "state" {
			var ent entityJSON
			_ = json.Unmarshal([]byte(ev.data), &ent)
			got = "state " + ent.Key
		}
		if got != want {
			t.Fatalf("whole stream, event %d: %s, want %s", i, got, want)
		}
	}
	var got []string
	for ev := range followed.events {
		got = append(got, ev.event+" "+ev.data)
	}
	if want := []string{"left " + left}; !slices.Equal(got, want) {
		t.Errorf("following the room: %v, want %v and the end", got, want)
	}
	var page intervalPage
	if status := e.get("/v1/streams/chat/entities/room/messages?after_seq=0", bob, &page); status != http.StatusOK || !slices.Equal(page.seqs(), []int64{2, 3}) {
		t.Errorf("bob, removed after 3: %d %v", status, page.seqs())
	}
}
