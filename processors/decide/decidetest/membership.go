package decidetest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// Interval is a run of sequences a user was a member for, From to To
// inclusive, To 0 while open.
type Interval struct {
	From int64 `json:"from"`
	To   int64 `json:"to,omitempty"`
}

// Chat is the model's account of one conversation after a Membership
// history: its last sequence and each user's intervals, from which
// MayRead says who reads what.
type Chat struct {
	LastSeq   int64
	Intervals map[string][]Interval
	// Members are the members at the end, sorted.
	Members []string
	// Users are every user the history spoke of, members or not.
	Users []string
}

// MayRead is the sequences user may read under the history policy:
// with joined those of their intervals; with shared every one up to the
// end of their last interval.
func (c Chat) MayRead(user, history string) []int64 {
	ivs := c.Intervals[user]
	var out []int64
	for seq := int64(1); seq <= c.LastSeq; seq++ {
		if c.mayRead(ivs, seq, history) {
			out = append(out, seq)
		}
	}
	return out
}

func (c Chat) mayRead(ivs []Interval, seq int64, history string) bool {
	if len(ivs) == 0 {
		return false
	}
	if history == config.HistoryShared {
		last := ivs[len(ivs)-1]
		return last.To == 0 || seq <= last.To
	}
	return slices.ContainsFunc(ivs, func(iv Interval) bool { return seq >= iv.From && (iv.To == 0 || seq <= iv.To) })
}

// maxIntervals is the rules' bound on the intervals kept per user.
const maxIntervals = 16

// Membership draws a history of an assign stream s for conversation key
// in decision order: users join, leave and join again, members and
// strangers send, and members, removed members and strangers send read
// and delivery receipts from their devices, some behind, some ahead. The
// model: a send is applied (and numbered) only from a member; a member
// joining after message n reads from n+1, and leaving after message m up
// to m; a receipt counts only from a member, read per user and delivered
// per device (the user's delivered being the highest of their devices),
// each only forward and never past the last message. The check holds the
// decisions and the final state to it; Chat says who may read what.
func Membership(t *rapid.T, s *config.Stream, key string) (History, *Chat) {
	a := &s.Assign
	users := []string{key + "-ann", key + "-ben", key + "-cat", key + "-dan"}
	devices := []string{"phone", "laptop", "tablet"}
	event := func(id, typ string, fields map[string]any) []byte {
		fields[s.EventID], fields[s.Type.Field], fields[s.Key] = id, typ, key
		return body(fields)
	}
	chat := &Chat{Intervals: map[string][]Interval{}, Users: users}
	member := map[string]bool{}
	type cursor struct{ read, delivered int64 }
	cursors := map[string]*cursor{}
	deviceAt := map[[2]string]int64{}
	want := map[string]Outcome{}
	var steps []Step
	for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
		u := rapid.SampledFrom(users).Draw(t, "user")
		id := fmt.Sprintf("%s-%d", key, i)
		var b []byte
		switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
		case op <= 1 || len(a.Members.Removed) == 0 && op <= 2:
			b = event(id, a.Members.Added[0], map[string]any{a.Members.User: u})
			want[id] = Outcome{Outcome: record.Applied, Version: chat.LastSeq}
			if !member[u] {
				member[u] = true
				ivs := append(chat.Intervals[u], Interval{From: chat.LastSeq + 1})
				chat.Intervals[u] = ivs[max(0, len(ivs)-maxIntervals):]
			}
		case op == 2:
			b = event(id, a.Members.Removed[0], map[string]any{a.Members.User: u})
			want[id] = Outcome{Outcome: record.Applied, Version: chat.LastSeq}
			if member[u] {
				member[u] = false
				ivs := chat.Intervals[u]
				if ivs[len(ivs)-1].To = chat.LastSeq; chat.LastSeq < ivs[len(ivs)-1].From {
					ivs = ivs[:len(ivs)-1]
				}
				chat.Intervals[u] = ivs
				if len(ivs) == 0 {
					delete(chat.Intervals, u)
				}
			}
		case op <= 5:
			fields := map[string]any{a.Send.Sender: u, a.Send.Device: u + "-phone", a.Send.ClientMessageID: id}
			if a.Send.Body != "" {
				fields[a.Send.Body] = "message " + id
			}
			b = event(id, a.Send.Types[0], fields)
			if member[u] {
				chat.LastSeq++
				want[id] = Outcome{Outcome: record.Applied, Version: chat.LastSeq, MessageID: a.MessageIDOf(key, chat.LastSeq)}
			} else {
				want[id] = Outcome{Outcome: record.Rejected, Reason: record.ReasonNotMember, Version: chat.LastSeq}
			}
		default:
			read := op <= 7 || len(a.Receipts.Delivered) == 0
			typ := a.Receipts.Delivered
			if read {
				typ = a.Receipts.Read
			}
			if len(typ) == 0 {
				continue
			}
			device := rapid.SampledFrom(devices).Draw(t, "device")
			seq := rapid.Int64Range(1, chat.LastSeq+2).Draw(t, "receipt seq")
			fields := map[string]any{a.Receipts.User: u, a.Receipts.Sequence: seq}
			if a.Receipts.Device != "" {
				fields[a.Receipts.Device] = device
			}
			b = event(id, typ[0], fields)
			c := cursors[u]
			if c == nil {
				c = &cursor{}
			}
			at := &c.delivered
			if read {
				at = &c.read
			} else if a.Receipts.Device != "" {
				v := deviceAt[[2]string{u, device}]
				at = &v
			}
			switch {
			case !member[u]:
				want[id] = Outcome{Outcome: record.Rejected, Reason: record.ReasonNotMember, Version: seq}
			case seq > chat.LastSeq:
				want[id] = Outcome{Outcome: record.Rejected, Reason: record.ReasonAheadOfConversation, Version: seq}
			case seq <= *at:
				want[id] = Outcome{Outcome: record.Stale, Version: seq}
			default:
				want[id] = Outcome{Outcome: record.Applied, Version: seq}
				*at = seq
				if !read && a.Receipts.Device != "" {
					deviceAt[[2]string{u, device}] = seq
					c.delivered = max(c.delivered, seq)
				}
				cursors[u] = c
			}
		}
		steps = append(steps, Step{Body: b, AtMs: int64(1_700_000_000_000 + i)})
	}
	for u, in := range member {
		if in {
			chat.Members = append(chat.Members, u)
		}
	}
	slices.Sort(chat.Members)
	h := History{Key: key, Steps: steps}
	h.Check = func(t *rapid.T, outs []Outcome, last State) {
		if len(outs) != len(want) {
			t.Fatalf("%d decisions for %d events", len(outs), len(want))
		}
		for _, o := range outs {
			w, ok := want[o.EventID]
			if !ok || o.Outcome != w.Outcome || o.Reason != w.Reason || o.Version != w.Version || o.MessageID != w.MessageID {
				t.Fatalf("%s: %s/%s at %d %q, the model says %s/%s at %d %q", o.EventID, o.Outcome, o.Reason, o.Version, o.MessageID, w.Outcome, w.Reason, w.Version, w.MessageID)
			}
		}
		if last.JSON == nil {
			if len(member) > 0 {
				t.Fatalf("no state, though %d users joined", len(member))
			}
			return
		}
		var state struct {
			LastSeq    int64                 `json:"last_seq"`
			Members    []string              `json:"members"`
			Membership map[string][]Interval `json:"membership"`
			Cursors    map[string]struct {
				Read      int64 `json:"read"`
				Delivered int64 `json:"delivered"`
				Devices   map[string]struct {
					Delivered int64 `json:"delivered"`
				} `json:"devices"`
			} `json:"cursors"`
		}
		if err := json.Unmarshal(last.JSON, &state); err != nil {
			t.Fatal(err)
		}
		if state.LastSeq != chat.LastSeq || !slices.Equal(state.Members, chat.Members) {
			t.Fatalf("final state %s: want last_seq %d, members %v", last.JSON, chat.LastSeq, chat.Members)
		}
		for _, u := range sortedKeys(chat.Intervals) {
			if !slices.Equal(state.Membership[u], chat.Intervals[u]) {
				t.Fatalf("final state %s: %s's intervals, want %v", last.JSON, u, chat.Intervals[u])
			}
		}
		if len(state.Membership) != len(chat.Intervals) {
			t.Fatalf("final state %s: membership of %v, want %v", last.JSON, slices.Sorted(maps.Keys(state.Membership)), sortedKeys(chat.Intervals))
		}
		for _, u := range users {
			got, c := state.Cursors[u], cursors[u]
			if c == nil {
				c = &cursor{}
			}
			if got.Read != c.read || got.Delivered != c.delivered {
				t.Fatalf("final state %s: %s read %d delivered %d, want %d %d", last.JSON, u, got.Read, got.Delivered, c.read, c.delivered)
			}
			for _, d := range devices {
				if got.Devices[d].Delivered != deviceAt[[2]string{u, d}] {
					t.Fatalf("final state %s: %s's %s delivered %d, want %d", last.JSON, u, d, got.Devices[d].Delivered, deviceAt[[2]string{u, d}])
				}
			}
		}
	}
	return h, chat
}
