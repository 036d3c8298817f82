package realtime

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/driftguard/driftguard/internal/config"
)

// interval is a run of a conversation's sequences, From to To inclusive;
// To 0 while open (the user is still a member).
type interval struct {
	From int64 `json:"from"`
	To   int64 `json:"to,omitempty"`
}

// covers reports whether seq lies in the interval.
func (iv interval) covers(seq int64) bool {
	return seq >= iv.From && (iv.To == 0 || seq <= iv.To)
}

// overlaps reports whether the interval holds a sequence from lo to hi.
func (iv interval) overlaps(lo, hi int64) bool {
	return max(lo, iv.From) <= hi && (iv.To == 0 || lo <= iv.To)
}

// readable reports whether seq lies in one of ivs.
func readable(ivs []interval, seq int64) bool {
	return slices.ContainsFunc(ivs, func(iv interval) bool { return iv.covers(seq) })
}

// readableIn reports whether one of ivs holds a sequence from lo to hi.
func readableIn(ivs []interval, lo, hi int64) bool {
	return slices.ContainsFunc(ivs, func(iv interval) bool { return iv.overlaps(lo, hi) })
}

// access is what the bridge keeps of a conversation's membership (an
// assign stream's public state): its current members, sorted, and every
// user's intervals of membership, oldest first.
type access struct {
	lastSeq    int64
	members    []string
	membership map[string][]interval
	// rawMembers and rawMembership are the state's members and
	// membership as written, for accessAfter.
	rawMembers, rawMembership json.RawMessage
}

// accessOf reads the membership of an assign stream's public state.
func accessOf(state json.RawMessage) access {
	a, _ := accessAfter(nil, state)
	return a
}

// accessAfter is accessOf(state) for a conversation whose membership was
// prev (nil for none): when the state's members and membership are
// prev's byte for byte, as after a message or a receipt, the parsed ones
// are shared, not parsed again (a membership of 20 users is a map of 20
// slices, built per state record it was, for every message), and same
// is true.
func accessAfter(prev *access, state json.RawMessage) (a access, same bool) {
	var s struct {
		LastSeq    int64           `json:"last_seq"`
		Members    json.RawMessage `json:"members"`
		Membership json.RawMessage `json:"membership"`
	}
	_ = json.Unmarshal(state, &s)
	a = access{lastSeq: s.LastSeq, rawMembers: s.Members, rawMembership: s.Membership}
	if prev != nil && bytes.Equal(s.Members, prev.rawMembers) && bytes.Equal(s.Membership, prev.rawMembership) {
		a.members, a.membership, a.rawMembers, a.rawMembership = prev.members, prev.membership, prev.rawMembers, prev.rawMembership
		return a, true
	}
	_ = json.Unmarshal(s.Members, &a.members)
	_ = json.Unmarshal(s.Membership, &a.membership)
	slices.Sort(a.members)
	return a, false
}

// users are the current and former members, sorted, each once.
func (a *access) users() []string {
	us := slices.Clone(a.members)
	for u := range a.membership {
		us = append(us, u)
	}
	slices.Sort(us)
	return slices.Compact(us)
}

// member reports whether user is a current member.
func (a *access) member(user string) bool {
	_, found := slices.BinarySearch(a.members, user)
	return found
}

// intervals are the sequences user may read under the history policy:
// with `joined` the intervals they were a member for; with `shared`
// everything up to the end of their last interval. None for a user who
// never was a member.
func (a *access) intervals(user string, history string) []interval {
	ivs := a.membership[user]
	if len(ivs) == 0 {
		if a.member(user) {
			// A state written before membership intervals: the member
			// reads everything, as then.
			return []interval{{From: 1}}
		}
		return nil
	}
	if history == config.HistoryShared {
		return []interval{{From: 1, To: ivs[len(ivs)-1].To}}
	}
	return ivs
}

// boundary is the last sequence a former member may read, 0 for a
// current member or a stranger.
func (a *access) boundary(user string) int64 {
	ivs := a.membership[user]
	if a.member(user) || len(ivs) == 0 {
		return 0
	}
	return ivs[len(ivs)-1].To
}

// withoutLastMessage is the conversation e without its last message: what
// a member who may not read that message is shown (under the joined
// policy, one who joined after it).
func withoutLastMessage(e *entity) *entity {
	var doc map[string]json.RawMessage
	if json.Unmarshal(e.state, &doc) != nil {
		return e
	}
	delete(doc, "last_message")
	state, err := json.Marshal(doc)
	if err != nil {
		return e
	}
	shown := *e
	shown.state = state
	return &shown
}
