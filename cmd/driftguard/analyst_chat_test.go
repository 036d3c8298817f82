package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The chat queries of docs/analyst-queries.md (who could read message N,
// when did each device get it) are checked for every message of every
// conversation of the history, against the membership and receipts the
// test sent.

// chatMembership: a conversation with joins, a leave and a re-join, a
// join that changes nothing, a member added and removed with nothing sent
// in between, delivery receipts from two devices of a member (one stale),
// and receipts from a former member and a stranger, rejected.
func (h *history) chatMembership() {
	ago := int64(7900)
	next := func() int64 { ago -= 10; return ago }
	const conv = "conv-3"
	member := func(id, typ, user string) *sent {
		return h.send("chat", conv, id, typ, next(),
			fmt.Sprintf(`{"event_id":%q,"type":%q,"conversation_id":%q,"user_id":%q}`, id, typ, conv, user))
	}
	msg := func(id, sender, text string) *sent {
		return h.send("chat", conv, id, "message.send", next(), fmt.Sprintf(
			`{"event_id":%q,"type":"message.send","conversation_id":%q,"sender_id":%q,"sender_device_id":%q,"client_message_id":%q,"body":%q}`,
			id, conv, sender, sender+"-phone", id, text))
	}
	delivered := func(id, user, device string, seq int64) *sent {
		return h.send("chat", conv, id, "receipt.delivered", next(), fmt.Sprintf(
			`{"event_id":%q,"type":"receipt.delivered","conversation_id":%q,"user_id":%q,"device_id":%q,"conversation_seq":%d}`,
			id, conv, user, device, seq))
	}
	// A membership change's version is the last sequence when it is
	// decided, a receipt's the sequence it reached.
	h.decide(member("c3-add-alice", "member.added", "alice"), "applied", "", 0, 0)
	h.decide(member("c3-add-bob", "member.added", "bob"), "applied", "", 0, 0)
	h.decide(msg("c3-m1", "alice", "one"), "applied", "", 1, 0)
	h.decide(msg("c3-m2", "bob", "two"), "applied", "", 2, 0)
	h.decide(delivered("c3-d-bob-2", "bob", "bob-phone", 2), "applied", "", 2, 0)
	h.decide(member("c3-add-carol", "member.added", "carol"), "applied", "", 2, 0)
	h.decide(msg("c3-m3", "alice", "three"), "applied", "", 3, 0)
	h.decide(member("c3-remove-bob", "member.removed", "bob"), "applied", "", 3, 0)
	h.decide(delivered("c3-d-alice-laptop-1", "alice", "alice-laptop", 1), "applied", "", 1, 0)
	h.decide(delivered("c3-d-alice-phone-3", "alice", "alice-phone", 3), "applied", "", 3, 0)
	h.decide(msg("c3-m4", "carol", "four"), "applied", "", 4, 0)
	h.decide(delivered("c3-d-bob-4", "bob", "bob-phone", 4), "rejected", string(record.ReasonNotMember), 4, 0)
	h.decide(msg("c3-m5", "alice", "five"), "applied", "", 5, 0)
	h.decide(delivered("c3-d-carol-5", "carol", "carol-tablet", 5), "applied", "", 5, 0)
	h.decide(member("c3-readd-bob", "member.added", "bob"), "applied", "", 5, 0)
	h.decide(member("c3-readd-bob-again", "member.added", "bob"), "applied", "", 5, 0)
	h.decide(msg("c3-m6", "bob", "six"), "applied", "", 6, 0)
	h.decide(member("c3-remove-carol", "member.removed", "carol"), "applied", "", 6, 0)
	h.decide(member("c3-add-dave", "member.added", "dave"), "applied", "", 6, 0)
	h.decide(member("c3-remove-dave", "member.removed", "dave"), "applied", "", 6, 0)
	h.decide(msg("c3-m7", "alice", "seven"), "applied", "", 7, 0)
	h.decide(delivered("c3-d-alice-laptop-6", "alice", "alice-laptop", 6), "applied", "", 6, 0)
	h.decide(delivered("c3-d-alice-phone-2", "alice", "alice-phone", 2), "stale", "", 2, 0)
	h.decide(delivered("c3-d-bob-7", "bob", "bob-phone", 7), "applied", "", 7, 0)
	h.decide(delivered("c3-d-eve-7", "eve", "eve-phone", 7), "rejected", string(record.ReasonNotMember), 7, 0)
	h.decide(delivered("c3-d-alice-phone-7", "alice", "alice-phone", 7), "applied", "", 7, 0)
}

// chatModel is what the test's chat history implies, per conversation.
type chatModel struct {
	lastSeq int64
	// intervals per user, as the state keeps them: [from, to], to 0 open.
	intervals map[string][][2]int64
	// receipts are the applied delivery receipts, in decision order.
	receipts []chatReceipt
	// lastChangeMs is when the last applied decision was received: the
	// state's updated_at_ms once the sink holds its latest state.
	lastChangeMs int64
}

type chatReceipt struct {
	user, device string
	seq, atMs    int64
}

// chatModels replays the test's applied chat decisions by the rule of
// intervals: added when the last message was S, a user reads from S+1;
// removed when it was T, up to T; an interval with nothing in it is not
// kept.
func (h *history) chatModels() map[string]*chatModel {
	out := map[string]*chatModel{}
	for _, d := range h.decisionsOf("chat") {
		if d.outcome != "applied" {
			continue
		}
		m := out[d.ev.key]
		if m == nil {
			m = &chatModel{intervals: map[string][][2]int64{}}
			out[d.ev.key] = m
		}
		m.lastChangeMs = d.ev.receivedMs
		var body struct {
			User   string `json:"user_id"`
			Device string `json:"device_id"`
			Seq    int64  `json:"conversation_seq"`
		}
		if err := json.Unmarshal(d.ev.body, &body); err != nil {
			h.t.Fatal(err)
		}
		ivs := m.intervals[body.User]
		open := len(ivs) > 0 && ivs[len(ivs)-1][1] == 0
		switch d.ev.typ {
		case "message.send":
			m.lastSeq++
		case "member.added":
			if !open {
				m.intervals[body.User] = append(ivs, [2]int64{m.lastSeq + 1, 0})
			}
		case "member.removed":
			if !open {
				break
			}
			last := &ivs[len(ivs)-1]
			if last[1] = m.lastSeq; last[1] < last[0] {
				ivs = ivs[:len(ivs)-1]
			}
			if m.intervals[body.User] = ivs; len(ivs) == 0 {
				delete(m.intervals, body.User)
			}
		case "receipt.delivered":
			m.receipts = append(m.receipts, chatReceipt{user: body.User, device: body.Device, seq: body.Seq, atMs: d.ev.receivedMs})
		}
	}
	return out
}

// readers are the users who may read seq, with their intervals and
// whether they are a member now, sorted: under joined, those with an
// interval covering seq; under shared, those whose last interval ends at
// or after it, or is open.
func (m *chatModel) readers(seq int64, shared bool) [][]any {
	var out [][]any
	for _, user := range slices.Sorted(maps.Keys(m.intervals)) {
		ivs := m.intervals[user]
		last := ivs[len(ivs)-1]
		may := slices.ContainsFunc(ivs, func(iv [2]int64) bool { return iv[0] <= seq && (iv[1] == 0 || seq <= iv[1]) })
		if shared {
			may = last[1] == 0 || seq <= last[1]
		}
		if may {
			member := 0
			if last[1] == 0 {
				member = 1
			}
			out = append(out, []any{user, slices.Clone(ivs), member})
		}
	}
	return out
}

// delivered is, per device of a user who may read seq (joined), the
// first applied delivery receipt at or past seq and when it came.
func (m *chatModel) delivered(seq int64) [][]any {
	readers := map[string]bool{}
	for _, r := range m.readers(seq, false) {
		readers[r[0].(string)] = true
	}
	first := map[[2]string]chatReceipt{}
	for _, r := range m.receipts {
		k := [2]string{r.user, r.device}
		if _, seen := first[k]; !seen && readers[r.user] && r.seq >= seq {
			first[k] = r
		}
	}
	var out [][]any
	for _, k := range slices.SortedFunc(maps.Keys(first), func(a, b [2]string) int {
		return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1])
	}) {
		out = append(out, []any{k[0], k[1], first[k].seq, first[k].atMs})
	}
	return out
}

// waitForChatStates waits until entity_state's latest row of each chat
// conversation is the state of its last applied decision.
func (h *history) waitForChatStates() {
	for conv, m := range h.chatModels() {
		sql := fmt.Sprintf("SELECT updated_at_ms FROM %s.entity_state FINAL WHERE stream = '%s' AND entity_key = '%s'",
			h.cfg.ClickHouse.Database, h.streams["chat"], conv)
		testenv.WaitFor(h.t, h.ctx, fmt.Sprintf("the latest state of %s", conv), func() bool {
			rows := h.query(sql)
			return len(rows) == 1 && rows[0][0] == m.lastChangeMs
		})
	}
}

// The doc's chat queries name a conversation and a sequence; the test
// runs them for others.
var (
	docConversation = regexp.MustCompile(`entity_key = '([^']*)'`)
	docSeq          = regexp.MustCompile(`WITH (\d+) AS seq`)
)

// forMessage points a chat query at message seq of conversation conv.
func (h *history) forMessage(sql, conv string, seq int64) string {
	h.t.Helper()
	if !docConversation.MatchString(sql) || !docSeq.MatchString(sql) {
		h.t.Fatalf("the chat query names no conversation (entity_key = '…') or sequence (WITH N AS seq):\n%s", sql)
	}
	sql = docConversation.ReplaceAllLiteralString(sql, fmt.Sprintf("entity_key = '%s'", conv))
	return docSeq.ReplaceAllLiteralString(sql, fmt.Sprintf("WITH %d AS seq", seq))
}

// eachMessage runs the query named name for every message of every chat
// conversation and compares its rows with want's. got is the doc's own
// query's answer, for the conversation and sequence it names.
func (h *history) eachMessage(name string, got [][]any, want func(m *chatModel, seq int64) [][]any) {
	models := h.chatModels()
	doc := h.queries[name]
	conv, seq := "", int64(0)
	if m := docConversation.FindStringSubmatch(doc); m != nil {
		conv = m[1]
	}
	if m := docSeq.FindStringSubmatch(doc); m != nil {
		seq, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := models[conv]; m == nil || seq < 1 || seq > m.lastSeq {
		h.t.Errorf("%s names message %d of %s, which the test history does not have", name, seq, conv)
	} else {
		h.expect(got, want(m, seq))
	}
	for _, conv := range slices.Sorted(maps.Keys(models)) {
		m := models[conv]
		for seq := int64(1); seq <= m.lastSeq; seq++ {
			rows := h.query(h.forMessage(h.localize(doc), conv, seq))
			if w := want(m, seq); !sameRows(rows, w) {
				h.t.Errorf("%s for message %d of %s: got rows\n%s\nwant\n%s", name, seq, conv, formatRows(rows), formatRows(w))
			}
		}
	}
}

func (h *history) checkChatReaders(got [][]any) {
	h.eachMessage("chat_readers", got, func(m *chatModel, seq int64) [][]any { return m.readers(seq, false) })
	h.checkLegacyReaders()
	// The history covers a re-joined member who may not read what was sent
	// while they were out, a former member who may, and a member added and
	// removed with nothing sent (never a reader).
	if got := fmt.Sprint(h.chatModels()["conv-3"].readers(4, false)); got != "[[alice [[1 0]] 1] [carol [[3 6]] 0]]" {
		h.t.Errorf("the history no longer has a re-joined member and a former one around message 4 of conv-3: %s", got)
	}
}

func (h *history) checkChatReadersShared(got [][]any) {
	h.eachMessage("chat_readers_shared", got, func(m *chatModel, seq int64) [][]any { return m.readers(seq, true) })
	if got := fmt.Sprint(h.chatModels()["conv-3"].readers(1, true)); got != "[[alice [[1 0]] 1] [bob [[1 3] [6 0]] 1] [carol [[3 6]] 0]]" {
		h.t.Errorf("the history no longer has a later member who reads message 1 of conv-3 under shared: %s", got)
	}
}

func (h *history) checkChatDelivered(got [][]any) {
	h.eachMessage("chat_delivered", got, func(m *chatModel, seq int64) [][]any { return m.delivered(seq) })
	// Two devices of one member each got message 4 at its own time; bob's
	// later receipt does not deliver what was sent while he was out.
	d := h.chatModels()["conv-3"].delivered(4)
	var devices []string
	for _, r := range d {
		devices = append(devices, r[1].(string))
	}
	if fmt.Sprint(devices) != "[alice-laptop alice-phone carol-tablet]" {
		h.t.Errorf("the history no longer has two devices of a member and a former member's device for message 4 of conv-3: %v", d)
	}
}

// checkLegacyReaders: a conversation whose latest state was written before
// membership intervals (members, no membership) is read by its members,
// every message, as the bridge serves it.
func (h *history) checkLegacyReaders() {
	const conv = "conv-before-intervals"
	members := []string{"al]ice", `b"ob`}
	state, err := json.Marshal(map[string]any{"last_seq": 2, "members": members,
		"cursors": map[string]any{members[0]: map[string]int{"read": 1}}, "last_message": map[string]string{"body": "x"}})
	if err != nil {
		h.t.Fatal(err)
	}
	batch, err := h.conn.PrepareBatch(h.ctx, fmt.Sprintf("INSERT INTO %s.entity_state (stream, entity_key, version, state)", h.cfg.ClickHouse.Database))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := batch.Append(h.streams["chat"], conv, uint64(2), string(state)); err != nil {
		h.t.Fatal(err)
	}
	if err := batch.Send(); err != nil {
		h.t.Fatal(err)
	}
	var want [][]any
	for _, m := range members {
		want = append(want, []any{m, [][2]int64{{1, 0}}, 1})
	}
	slices.SortFunc(want, func(a, b []any) int { return strings.Compare(a[0].(string), b[0].(string)) })
	for seq := int64(1); seq <= 2; seq++ {
		if got := h.query(h.forMessage(h.localize(h.queries["chat_readers"]), conv, seq)); !sameRows(got, want) {
			h.t.Errorf("chat_readers for message %d of a state without membership: got rows\n%s\nwant\n%s", seq, formatRows(got), formatRows(want))
		}
	}
}
