package realtime_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// chatWorld decides the events of an assign stream's conversations as the
// state contract (docs/bridge.md, "Who reads which messages") says the
// processor does, and writes to the bridge's broker what a processor
// writes: each decision's outcome, then the conversation's new state. The
// processors' own rules are held to the same contract by their models
// (decidetest.Membership); a component's tests do not import another
// component.
type chatWorld struct {
	e     *bridgeEnv
	s     *config.Stream
	convs map[string]*conversation
	// written is, per partition of the state topic, the offset after the
	// last state written.
	written map[int32]int64
	n       int
}

// conversation is one conversation as the contract keeps it.
type conversation struct {
	revision    int64
	LastSeq     int64                       `json:"last_seq"`
	Members     []string                    `json:"members"`
	Membership  map[string][]interval       `json:"membership,omitempty"`
	Cursors     map[string]map[string]int64 `json:"cursors,omitempty"`
	LastMessage json.RawMessage             `json:"last_message,omitempty"`
}

func newChatWorld(e *bridgeEnv) *chatWorld {
	return &chatWorld{e: e, s: e.cfg.Streams["chat"], convs: map[string]*conversation{}, written: map[int32]int64{}}
}

// decide decides one event of type typ for conversation key, with fields
// keyed by the stream's JSON pointers, and writes what it changed.
func (w *chatWorld) decide(t *rapid.T, key, typ string, fields map[string]any) {
	w.n++
	id := fmt.Sprintf("%s-e%d", key, w.n)
	fields[w.s.EventID], fields[w.s.Type.Field], fields[w.s.Key] = id, typ, key
	obj := map[string]any{}
	for pointer, v := range fields {
		obj[strings.TrimPrefix(pointer, "/")] = v
	}
	body, _ := json.Marshal(obj)
	c := w.convs[key]
	if c == nil {
		c = &conversation{revision: -1, Members: []string{}, Membership: map[string][]interval{}, Cursors: map[string]map[string]int64{}}
		w.convs[key] = c
	}
	a := &w.s.Assign
	o := record.Outcome{Stream: "chat", Key: key, EventID: id, EventType: typ, Version: c.LastSeq, Outcome: record.Applied,
		ReceivedAtMs: int64(1000 + w.n), Payload: body}
	switch role := a.Roles()[typ]; role {
	case config.RoleMemberAdded:
		if u := fields[a.Members.User].(string); !slices.Contains(c.Members, u) {
			c.Members = append(c.Members, u)
			slices.Sort(c.Members)
			c.Membership[u] = append(c.Membership[u], interval{From: c.LastSeq + 1})
		}
	case config.RoleMemberRemoved:
		if u := fields[a.Members.User].(string); slices.Contains(c.Members, u) {
			c.Members = slices.DeleteFunc(c.Members, func(m string) bool { return m == u })
			ivs := c.Membership[u]
			if ivs[len(ivs)-1].To = c.LastSeq; c.LastSeq < ivs[len(ivs)-1].From {
				ivs = ivs[:len(ivs)-1]
			}
			if c.Membership[u] = ivs; len(ivs) == 0 {
				delete(c.Membership, u)
			}
		}
	case config.RoleSend:
		if !slices.Contains(c.Members, fields[a.Send.Sender].(string)) {
			o.Outcome, o.Reason = record.Rejected, record.ReasonNotMember
			break
		}
		c.LastSeq++
		o.Version, o.MessageID, c.LastMessage = c.LastSeq, a.MessageIDOf(key, c.LastSeq), body
	default: // a receipt: read or delivered, per user
		u, seq := fields[a.Receipts.User].(string), fields[a.Receipts.Sequence].(int64)
		cursor := map[config.AssignRole]string{config.RoleReceiptRead: "read", config.RoleReceiptDelivered: "delivered"}[role]
		o.Version = seq
		switch {
		case !slices.Contains(c.Members, u):
			o.Outcome, o.Reason = record.Rejected, record.ReasonNotMember
		case seq > c.LastSeq:
			o.Outcome, o.Reason = record.Rejected, record.ReasonAheadOfConversation
		case seq <= c.Cursors[u][cursor]:
			o.Outcome = record.Stale
		default:
			if c.Cursors[u] == nil {
				c.Cursors[u] = map[string]int64{}
			}
			c.Cursors[u][cursor] = seq
		}
	}
	topics := naming.Prefixes{}.For("chat")
	recs := []*kgo.Record{{Topic: topics.Outcomes, Key: []byte(key), Value: record.AppendOutcome(nil, &o)}}
	if o.Outcome == record.Applied {
		c.revision++
		state, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, stateRecord("chat", key, c.revision, string(state)))
	}
	results := w.e.cl.ProduceSync(w.e.ctx, recs...)
	if err := results.FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Record.Topic == topics.State {
			w.written[r.Record.Partition] = max(w.written[r.Record.Partition], r.Record.Offset+1)
		}
	}
}

// state is conversation key's last public state as written.
func (w *chatWorld) state(t *rapid.T, key string) publicChat {
	c := w.convs[key]
	if c == nil {
		t.Fatalf("no conversation %s", key)
	}
	return publicChat{LastSeq: c.LastSeq, Members: c.Members, Membership: c.Membership}
}

// applied waits until the bridge has read every state written, as a
// snapshot's cursor (read before its first page) shows.
func (w *chatWorld) applied(t *rapid.T, observer string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var page snapshotPage
		if w.e.get("/v1/streams/chat/snapshot?limit=1", observer, &page) == http.StatusOK {
			pos, err := realtime.ParseCursor(page.Cursor)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(slices.Collect(maps.Keys(w.written)), func(p int32) bool { return pos.Offsets[p] < w.written[p] }) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bridge did not read the states written (%v)", w.written)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// publicChat is what the test reads of a conversation's public state.
type publicChat struct {
	LastSeq    int64                 `json:"last_seq"`
	Members    []string              `json:"members"`
	Membership map[string][]interval `json:"membership"`
}

type interval struct {
	From int64 `json:"from"`
	To   int64 `json:"to,omitempty"`
}

// mayRead says whether a user with intervals ivs (as the state writes
// them) may read seq under the history policy.
func mayRead(ivs []interval, seq int64, history string) bool {
	if len(ivs) == 0 {
		return false
	}
	if history == config.HistoryShared {
		return ivs[len(ivs)-1].To == 0 || seq <= ivs[len(ivs)-1].To
	}
	return slices.ContainsFunc(ivs, func(iv interval) bool { return seq >= iv.From && (iv.To == 0 || seq <= iv.To) })
}

// heldConv is what a client holds of one conversation: its state (nil once
// told it left, with the last sequence it may read), the intervals it was
// told, and the messages it holds, contiguous up to pos.
type heldConv struct {
	version int64
	state   json.RawMessage
	left    int64
	ivs     []interval
	msgs    map[int64]string
	pos     int64
}

// target is the last sequence the client should hold messages up to.
func (c *heldConv) target() int64 {
	if c.state == nil {
		return c.left
	}
	var st publicChat
	_ = json.Unmarshal(c.state, &st)
	return st.LastSeq
}

// merge adds messages and keeps only those of the intervals told.
func (c *heldConv) merge(msgs []syncMessage, ivs []interval) {
	c.ivs = ivs
	for _, m := range msgs {
		c.msgs[m.Seq] = m.MessageID + " " + m.SenderID + ": " + m.Body
	}
	for seq := range c.msgs {
		if !slices.ContainsFunc(ivs, func(iv interval) bool { return seq >= iv.From && (iv.To == 0 || seq <= iv.To) }) {
			delete(c.msgs, seq)
		}
	}
}

type syncMessage struct {
	Seq       int64  `json:"conversation_seq"`
	MessageID string `json:"message_id"`
	SenderID  string `json:"sender_id"`
	Body      string `json:"body"`
}

type syncAnswer struct {
	Next          string `json:"next"`
	Conversations []struct {
		Key          string `json:"key"`
		Limited      bool   `json:"limited"`
		Gap          bool   `json:"gap"`
		AfterSeq     int64  `json:"after_seq"`
		NextAfterSeq int64  `json:"next_after_seq"`
		// A current member's conversation, or a former member's boundary.
		Entity *entityJSON `json:"entity"`
		Left   *struct {
			ReadableUntilSeq int64 `json:"readable_until_seq"`
		} `json:"left"`
		Intervals []interval    `json:"intervals"`
		Messages  []syncMessage `json:"messages"`
	} `json:"conversations"`
}

type messagesAnswer struct {
	Messages     []syncMessage `json:"messages"`
	NextAfterSeq int64         `json:"next_after_seq"`
	Limited      bool          `json:"limited"`
	Intervals    []interval    `json:"intervals"`
}

// chatClient is one client's conversations.
type chatClient struct {
	e     *bridgeEnv
	tok   string
	convs map[string]*heldConv
}

func (c *chatClient) conv(key string) *heldConv {
	h := c.convs[key]
	if h == nil {
		h = &heldConv{version: -1, msgs: map[int64]string{}}
		c.convs[key] = h
	}
	return h
}

// pageOn reads conversation key's messages from the messages endpoint
// until it holds them up to its target; false once it may no longer read
// them (403).
func (c *chatClient) pageOn(t *rapid.T, key string, limit int) bool {
	h := c.convs[key]
	for first := true; first || h.pos < h.target(); first = false {
		var page messagesAnswer
		switch status := c.e.get(fmt.Sprintf("/v1/streams/chat/entities/%s/messages?after_seq=%d&limit=%d", key, h.pos, limit), c.tok, &page); status {
		case http.StatusForbidden:
			return false
		case http.StatusOK:
		default:
			t.Fatalf("messages of %s after %d: %d", key, h.pos, status)
		}
		if page.Limited {
			t.Fatalf("messages of %s after %d: limited", key, h.pos)
		}
		if len(page.Messages) == 0 && page.NextAfterSeq <= h.pos && h.pos < h.target() {
			t.Fatalf("messages of %s stop at %d, before %d", key, h.pos, h.target())
		}
		h.merge(page.Messages, page.Intervals)
		h.pos = max(h.pos, page.NextAfterSeq)
	}
	return true
}

// sync asks for what changed since the client's token, on 410 for
// everything, applies the answer, pages on every limited conversation,
// then keeps the answer's token; it returns the status of the first ask.
func (c *chatClient) sync(t *rapid.T, since string, limit int) (int, string) {
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if since != "" {
		q.Set("since", since)
	}
	var ans syncAnswer
	var p problemBody
	status := c.e.get("/v1/streams/chat/sync?"+q.Encode(), c.tok, &ans)
	if status == http.StatusGone {
		c.e.get("/v1/streams/chat/sync?"+q.Encode(), c.tok, &p)
		if p.Type != "https://driftguard.dev/problems/cursor-gone" {
			t.Fatalf("410 of type %q", p.Type)
		}
		q.Del("since")
		since = ""
		if s := c.e.get("/v1/streams/chat/sync?"+q.Encode(), c.tok, &ans); s != http.StatusOK {
			t.Fatalf("a sync without a token: %d", s)
		}
	} else if status != http.StatusOK {
		t.Fatalf("sync: %d", status)
	}
	keys := map[string]bool{}
	for i, a := range ans.Conversations {
		keys[a.Key] = true
		if i > 0 && ans.Conversations[i-1].Key >= a.Key {
			t.Fatalf("sync answered %s after %s", a.Key, ans.Conversations[i-1].Key)
		}
		if len(a.Messages) > limit {
			t.Fatalf("%s: %d messages over the limit %d", a.Key, len(a.Messages), limit)
		}
		if (a.Entity == nil) == (a.Left == nil) {
			t.Fatalf("%s: an entity and left, or neither: %+v", a.Key, a)
		}
		if a.Left != nil && a.Left.ReadableUntilSeq == 0 {
			delete(c.convs, a.Key)
			continue
		}
		h := c.conv(a.Key)
		if a.AfterSeq > h.pos {
			t.Fatalf("%s: the sync took the client to hold messages up to %d, it holds them up to %d", a.Key, a.AfterSeq, h.pos)
		}
		if a.Entity != nil {
			if a.Entity.Version < h.version {
				t.Fatalf("%s: version %d after %d", a.Key, a.Entity.Version, h.version)
			}
			h.version, h.state, h.left = a.Entity.Version, a.Entity.State, 0
		} else {
			h.state, h.left = nil, a.Left.ReadableUntilSeq
		}
		if a.Gap {
			t.Fatalf("%s: a gap, with every message held", a.Key)
		}
		h.merge(a.Messages, a.Intervals)
		h.pos = max(h.pos, a.NextAfterSeq)
		if a.Limited != (a.NextAfterSeq < h.target()) {
			t.Fatalf("%s: limited %v with messages up to %d of %d", a.Key, a.Limited, a.NextAfterSeq, h.target())
		}
		if a.Limited && !c.pageOn(t, a.Key, limit) {
			t.Fatalf("%s: the messages endpoint refused a conversation the sync answered", a.Key)
		}
	}
	if since == "" {
		// Everything the user may read is in an answer without a token.
		for key := range c.convs {
			if !keys[key] {
				delete(c.convs, key)
			}
		}
	}
	return status, ans.Next
}

// followSSE applies the events of a whole-stream connection until
// conversation key reaches version.
func (c *chatClient) followSSE(t *rapid.T, s *sse, key string, version int64) {
	timeout := time.After(10 * time.Second)
	for {
		var ev sseEvent
		select {
		case e, ok := <-s.events:
			if !ok {
				t.Fatalf("the events ended")
			}
			ev = e
		case <-timeout:
			t.Fatalf("no event of %s at version %d", key, version)
		}
		switch ev.event {
		case "state":
			var ent entityJSON
			if err := json.Unmarshal([]byte(ev.data), &ent); err != nil {
				t.Fatal(err)
			}
			h := c.conv(ent.Key)
			if ent.Version > h.version {
				h.version, h.state, h.left = ent.Version, ent.State, 0
			}
			if ent.Key == key && ent.Version >= version {
				return
			}
		case "left":
			var l struct {
				Key              string `json:"key"`
				ReadableUntilSeq int64  `json:"readable_until_seq"`
			}
			if err := json.Unmarshal([]byte(ev.data), &l); err != nil {
				t.Fatal(err)
			}
			h := c.conv(l.Key)
			h.state, h.left = nil, l.ReadableUntilSeq
		default:
			t.Fatalf("event %+v", ev)
		}
	}
}

// A client that alternates sync and disconnects ends with exactly what a
// client that never disconnected holds: the conversations, their states,
// and the messages, each of the user's intervals only. Conversations are
// decided through the shipped rules: joins, leaves, re-joins, sends and
// receipts. Between batches of events the connected client follows the
// whole stream's events and the messages endpoint; the other syncs,
// sometimes with a small limit (it pages on), sometimes with an older
// token, sometimes after a long absence, when its token is gone from the
// bridge's small log (410, then a sync without a token).
func TestSyncEndsWhereAClientThatNeverLeftIs(t *testing.T) {
	// A bridge for each history policy; each history draws one.
	worlds := map[string]*chatWorld{}
	policies := []string{config.HistoryJoined, config.HistoryShared}
	for _, history := range policies {
		worlds[history] = newChatWorld(newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) {
			c.Bridge.Window = 6 // the log: 18 changes over 3 partitions
			c.Streams["chat"].Assign.History = history
		}, "chat"))
	}
	checks, gone := map[string]int{}, map[string]int{}
	rapid.Check(t, func(rt *rapid.T) {
		history := rapid.SampledFrom(policies).Draw(rt, "history")
		w := worlds[history]
		e := w.e
		observer := e.token("observer", "chat")
		checks[history]++
		a := &w.s.Assign
		p := fmt.Sprintf("h%d", checks[history])
		users := []string{p + "-alice", p + "-bob", p + "-carol"}
		alice := users[0]
		tok := e.token(alice, "chat")
		convs := []string{p + "-a", p + "-b"}
		mark := p + "-mark"
		w.decide(rt, mark, a.Members.Added[0], map[string]any{a.Members.User: alice})

		cursor, _ := e.snapshot("chat", tok, 100)
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		live, status := e.open(ctx, "chat", tok, cursor, "")
		if status != http.StatusOK {
			rt.Fatalf("events: %d", status)
		}
		defer live.close()
		ref := &chatClient{e: e, tok: tok, convs: map[string]*heldConv{}}
		syncer := &chatClient{e: e, tok: tok, convs: map[string]*heldConv{}}
		var next string
		var tokens []string
		doSync := func(since string, limit int) {
			status, n := syncer.sync(rt, since, limit)
			if status == http.StatusGone {
				gone[history]++
			}
			next = n
		}
		marks := 0
		for range rapid.IntRange(1, 8).Draw(rt, "batches") {
			client := rapid.IntRange(0, 5).Draw(rt, "client")
			if client == 5 {
				// A long absence: more changes than the log holds, a
				// few at a time, so the connected client keeps up.
				for i := range 3*e.cfg.Bridge.Window + 1 {
					w.decide(rt, mark, a.Send.Types[0], map[string]any{a.Send.Sender: alice, a.Send.Device: "phone",
						a.Send.ClientMessageID: fmt.Sprintf("away%d", w.n), a.Send.Body: "while away"})
					if i%4 == 3 {
						ref.followSSE(rt, live, mark, w.convs[mark].revision)
					}
				}
			}
			for range rapid.IntRange(1, 6).Draw(rt, "events") {
				key := rapid.SampledFrom(convs).Draw(rt, "conversation")
				// Mostly the user whose clients are compared.
				u := rapid.SampledFrom(append([]string{alice, alice}, users...)).Draw(rt, "user")
				switch op := rapid.IntRange(0, 6).Draw(rt, "op"); {
				case op == 0:
					w.decide(rt, key, a.Members.Added[0], map[string]any{a.Members.User: u})
				case op == 1:
					w.decide(rt, key, a.Members.Removed[0], map[string]any{a.Members.User: u})
				case op <= 4:
					w.decide(rt, key, a.Send.Types[0], map[string]any{a.Send.Sender: u, a.Send.Device: u + "-phone",
						a.Send.ClientMessageID: fmt.Sprintf("m%d", w.n), a.Send.Body: fmt.Sprintf("text %d", w.n)})
				default:
					typ := a.Receipts.Read[0]
					if op == 6 && len(a.Receipts.Delivered) > 0 {
						typ = a.Receipts.Delivered[0]
					}
					fields := map[string]any{a.Receipts.User: u, a.Receipts.Sequence: rapid.Int64Range(1, 6).Draw(rt, "receipt seq")}
					if a.Receipts.Device != "" {
						fields[a.Receipts.Device] = rapid.SampledFrom([]string{"phone", "laptop"}).Draw(rt, "device")
					}
					w.decide(rt, key, typ, fields)
				}
			}
			// The connected client: every change read, then the
			// messages of each conversation it holds.
			w.applied(rt, observer)
			marks++
			w.decide(rt, mark, a.Send.Types[0], map[string]any{a.Send.Sender: alice, a.Send.Device: "phone",
				a.Send.ClientMessageID: fmt.Sprintf("mark%d", marks), a.Send.Body: "mark"})
			ref.followSSE(rt, live, mark, w.convs[mark].revision)
			for _, key := range slices.Sorted(maps.Keys(ref.convs)) {
				if !ref.pageOn(rt, key, 1000) {
					delete(ref.convs, key)
				}
			}
			// The other: away, or a sync.
			switch client {
			case 0, 1, 5:
			case 2:
				doSync(next, 1000)
			case 3:
				doSync(next, rapid.IntRange(1, 3).Draw(rt, "limit"))
			case 4:
				if len(tokens) > 0 {
					doSync(rapid.SampledFrom(tokens).Draw(rt, "older token"), 1000)
				}
			}
			if next != "" {
				tokens = append(tokens, next)
			}
		}
		doSync(next, rapid.IntRange(1, 1000).Draw(rt, "last limit"))

		// Both hold what the states written say the user may read.
		want := map[string][]int64{}
		for _, key := range append(convs, mark) {
			if w.convs[key] == nil {
				continue
			}
			st := w.state(rt, key)
			ivs := st.Membership[alice]
			if len(ivs) == 0 && !slices.Contains(st.Members, alice) {
				continue
			}
			want[key] = []int64{}
			for seq := int64(1); seq <= st.LastSeq; seq++ {
				if mayRead(ivs, seq, history) {
					want[key] = append(want[key], seq)
				}
			}
		}
		for name, c := range map[string]*chatClient{"the connected client": ref, "the syncing client": syncer} {
			if got := slices.Sorted(maps.Keys(c.convs)); !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
				rt.Fatalf("%s holds conversations %v, want %v", name, got, slices.Sorted(maps.Keys(want)))
			}
			for key, seqs := range want {
				if got := slices.Sorted(maps.Keys(c.convs[key].msgs)); !slices.Equal(got, seqs) {
					rt.Fatalf("%s holds messages %v of %s, want %v (state %s)", name, got, key, seqs, c.convs[key].state)
				}
			}
		}
		for key, r := range ref.convs {
			s := syncer.convs[key]
			if r.version != s.version && r.state != nil || string(r.state) != string(s.state) || r.left != s.left || !maps.Equal(r.msgs, s.msgs) {
				rt.Fatalf("%s: the connected client holds version %d %s left %d %v\nthe syncing client version %d %s left %d %v",
					key, r.version, r.state, r.left, r.msgs, s.version, s.state, s.left, s.msgs)
			}
			st := w.state(rt, key)
			if r.state != nil && (!slices.Contains(st.Members, alice) || r.version != w.convs[key].revision) {
				rt.Fatalf("%s: the clients hold version %d as a member, the last is %d with members %v", key, r.version, w.convs[key].revision, st.Members)
			}
			if ivs := st.Membership[alice]; r.state == nil && (slices.Contains(st.Members, alice) || r.left != ivs[len(ivs)-1].To) {
				rt.Fatalf("%s: the clients hold that the user left, readable until %d; the state says %v", key, r.left, st.Membership)
			}
		}
	})
	for _, history := range policies {
		if gone[history] == 0 {
			t.Errorf("%s: no sync token went (410) in %d histories: the test did not try a sync after a long absence", history, checks[history])
		}
		t.Logf("%s: %d histories, %d tokens gone", history, checks[history], gone[history])
	}
}

// The sync call's refusals: a token it cannot resume is 410 cursor-gone
// (malformed, an events cursor, of another epoch or partition count, ahead
// of the log end, older than the bridge's log), as are its tokens given to
// the events; 401 and 403 as for the other endpoints; 404 not_assign on a
// stream that is not assign. A token that resumes answers only what
// changed after it.
func TestSyncTokensThatCannotResumeAreGone(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) { c.Bridge.Window = 2 }, "chat", "presence")
	alice := e.token("alice", "chat")
	e.publish("chat", "room", 1, `{"last_seq":0,"members":["alice"],"membership":{"alice":[{"from":1}]}}`)
	e.publish("chat", "other", 1, `{"last_seq":0,"members":["bob"],"membership":{"bob":[{"from":1}]}}`)
	e.sent("left", 1, "bob", "one")
	e.sent("left", 2, "alice", "two")
	e.sent("left", 3, "bob", "three")
	e.publish("chat", "left", 4, `{"last_seq":3,"members":["bob"],"membership":{"alice":[{"from":2,"to":2}],"bob":[{"from":1}]}}`)
	var ans syncAnswer
	testenv.WaitFor(t, e.ctx, "alice's conversations", func() bool {
		return e.get("/v1/streams/chat/sync", alice, &ans) == http.StatusOK && len(ans.Conversations) == 2
	})
	if a := ans.Conversations[1]; a.Key != "room" || a.Entity == nil || a.Entity.Version != 1 || a.Left != nil || len(a.Messages) != 0 || a.Limited {
		t.Fatalf("alice's initial sync: %+v", ans)
	}
	if a := ans.Conversations[0]; a.Key != "left" || a.Entity != nil || a.Left == nil || a.Left.ReadableUntilSeq != 2 ||
		len(a.Messages) != 1 || a.Messages[0].Seq != 2 || a.NextAfterSeq != 2 || a.Limited {
		t.Fatalf("the conversation alice left: %+v", a)
	}
	// The answer is as docs/openapi.yaml describes it.
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var answer any
	if status := e.get("/v1/streams/chat/sync", alice, &answer); status != http.StatusOK {
		t.Fatalf("sync: %d", status)
	}
	if err := doc.Components.Schemas["SyncAnswer"].Value.VisitJSON(answer); err != nil {
		t.Errorf("the answer is not docs/openapi.yaml's SyncAnswer: %v", err)
	}
	var again syncAnswer
	if status := e.get("/v1/streams/chat/sync?since="+ans.Next, alice, &again); status != http.StatusOK || len(again.Conversations) != 0 || again.Next != ans.Next {
		t.Fatalf("a sync with nothing new: %d %+v", status, again)
	}

	// The token is the events' cursor but for its first byte.
	raw, err := base64.RawURLEncoding.DecodeString(ans.Next)
	if err != nil || raw[0] != 2 {
		t.Fatalf("token %q: %v", ans.Next, err)
	}
	asCursor := base64.RawURLEncoding.EncodeToString(append([]byte{1}, raw[1:]...))
	pos, err := realtime.ParseCursor(asCursor)
	if err != nil {
		t.Fatal(err)
	}
	token := func(c realtime.Cursor) string {
		b, _ := base64.RawURLEncoding.DecodeString(c.String())
		b[0] = 2
		return base64.RawURLEncoding.EncodeToString(b)
	}
	if token(pos) != ans.Next {
		t.Fatalf("the token %s is not the cursor %s with another first byte", ans.Next, asCursor)
	}
	other, fewer, ahead := pos.Clone(), pos.Clone(), pos.Clone()
	other.Epoch[0] ^= 0xff
	fewer.Offsets = fewer.Offsets[:2]
	for p := range ahead.Offsets {
		ahead.Offsets[p] += 1000
	}
	// Enough changes that the log (two a partition) no longer holds those
	// after the token.
	for v := range int64(12) {
		e.publish("chat", fmt.Sprintf("k%d", v), 1, `{"last_seq":0,"members":["bob"]}`)
	}
	testenv.WaitFor(t, e.ctx, "the changes read", func() bool {
		var page snapshotPage
		return e.get("/v1/streams/chat/snapshot", e.token("bob", "chat"), &page) == http.StatusOK && len(page.Entities) == 14 // other, left and the twelve
	})
	gone := "https://driftguard.dev/problems/cursor-gone"
	for name, tc := range map[string]struct {
		path, tok string
		status    int
		problem   string
	}{
		"malformed":                {"/v1/streams/chat/sync?since=not-a-token", alice, http.StatusGone, gone},
		"an events cursor":         {"/v1/streams/chat/sync?since=" + asCursor, alice, http.StatusGone, gone},
		"another epoch":            {"/v1/streams/chat/sync?since=" + token(other), alice, http.StatusGone, gone},
		"another partition count":  {"/v1/streams/chat/sync?since=" + token(fewer), alice, http.StatusGone, gone},
		"ahead of the log end":     {"/v1/streams/chat/sync?since=" + token(ahead), alice, http.StatusGone, gone},
		"older than the log":       {"/v1/streams/chat/sync?since=" + ans.Next, alice, http.StatusGone, gone},
		"a token given the events": {"/v1/streams/chat/events?cursor=" + ans.Next, alice, http.StatusGone, gone},
		"no token":                 {"/v1/streams/chat/sync", "", http.StatusUnauthorized, "https://driftguard.dev/problems/unauthorized"},
		"a token for presence":     {"/v1/streams/chat/sync", e.token("alice", "presence"), http.StatusForbidden, "https://driftguard.dev/problems/forbidden"},
		"not assign":               {"/v1/streams/presence/sync", e.token("alice", "*"), http.StatusNotFound, "https://driftguard.dev/problems/not_assign"},
		"a limit over 1000":        {"/v1/streams/chat/sync?limit=1001", alice, http.StatusBadRequest, "https://driftguard.dev/problems/bad_request"},
	} {
		var p problemBody
		if status := e.get(tc.path, tc.tok, &p); status != tc.status || p.Type != tc.problem {
			t.Errorf("%s: %d %s (%s), want %d %s", name, status, p.Type, p.Detail, tc.status, tc.problem)
		}
	}
}

// A client may sync with an older token than its last (a copy kept
// before the last answer): a conversation it learned of after that token
// and may now read none of (removed before anything was sent) is still
// told as left, readable until 0.
func TestSyncWithAnOlderTokenTellsALeave(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "chat")
	alice := e.token("alice", "chat")
	var first, second, third syncAnswer
	if status := e.get("/v1/streams/chat/sync", alice, &first); status != http.StatusOK || len(first.Conversations) != 0 {
		t.Fatalf("a sync with nothing: %d %+v", status, first)
	}
	e.publish("chat", "room", 1, `{"last_seq":0,"members":["alice","bob"],"membership":{"alice":[{"from":1}],"bob":[{"from":1}]}}`)
	testenv.WaitFor(t, e.ctx, "alice in the room", func() bool {
		return e.get("/v1/streams/chat/sync?since="+first.Next, alice, &second) == http.StatusOK && len(second.Conversations) == 1
	})
	e.publish("chat", "room", 2, `{"last_seq":0,"members":["bob"],"membership":{"bob":[{"from":1}]}}`)
	testenv.WaitFor(t, e.ctx, "alice out of the room", func() bool {
		var ent entityJSON
		return e.get("/v1/streams/chat/entities/room", e.token("bob", "chat"), &ent) == http.StatusOK && ent.Version == 2
	})
	if status := e.get("/v1/streams/chat/sync?since="+first.Next, alice, &third); status != http.StatusOK || len(third.Conversations) != 1 {
		t.Fatalf("the older token: %d %+v", status, third)
	}
	if a := third.Conversations[0]; a.Key != "room" || a.Entity != nil || a.Left == nil || a.Left.ReadableUntilSeq != 0 || len(a.Messages) != 0 {
		t.Errorf("the room alice was taken out of: %+v", a)
	}
}
