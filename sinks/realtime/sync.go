package realtime

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/problem"
)

// Bounds of the messages one sync answers per conversation.
const (
	defaultSyncLimit = 50
	maxSyncLimit     = 1000
)

// resync is what a client does with a sync token that is gone.
const resync = "sync again without `since`"

// syncConversation is one conversation of a sync's answer.
type syncConversation struct {
	Key string `json:"key"`
	// Entity is the conversation as the user is shown it; null for a
	// former member, who is told Left instead.
	Entity *entityJSON `json:"entity"`
	Left   *syncLeft   `json:"left,omitempty"`
	// Intervals are the sequences the user may read (the messages
	// endpoint's).
	Intervals []interval `json:"intervals"`
	// AfterSeq is the sequence the messages follow: what the client held
	// at its token (0 without one).
	AfterSeq int64     `json:"after_seq"`
	Messages []message `json:"messages"`
	// NextAfterSeq is the last sequence the messages cover; Limited is
	// true while it is below the last one the user may read: the client
	// pages on at the messages endpoint from it.
	NextAfterSeq int64 `json:"next_after_seq"`
	Limited      bool  `json:"limited"`
	// Gap is the messages endpoint's `limited`: messages after AfterSeq
	// that the user may read are held nowhere any more.
	Gap bool `json:"gap"`
}

// syncLeft tells a former member the last sequence they may still read.
type syncLeft struct {
	ReadableUntilSeq int64 `json:"readable_until_seq"`
}

// syncPick is a conversation a sync answers, as the store held it at the
// sync's position: its entity, the membership of the entity the client
// held (nil when it held none), and whether in that one or in any state
// since the user was a current member (member), or a current or former
// one (knew): a client may hold what it learned from a later sync than
// the token's.
type syncPick struct {
	e            *entity
	before       *access
	member, knew bool
}

// knows reports whether membership a names user: a current or former
// member.
func knows(a *access, user string) bool {
	return a != nil && (a.member(user) || len(a.membership[user]) > 0)
}

// isMember reports whether membership a has user as a current member.
func isMember(a *access, user string) bool { return a != nil && a.member(user) }

// sync answers, for every conversation of the user that changed after the
// token `since` (every one without it), the conversation, the user's
// intervals and the messages after what the client held, and the token to
// ask with next (docs/bridge.md, "One sync call").
func (b *Bridge) sync(q *request) {
	c := q.stream.chat
	if c == nil {
		problem.Write(q.w, http.StatusNotFound, "not_assign", fmt.Sprintf("stream %q does not assign sequences: it has no conversations to sync", q.stream.cfg.Name), nil)
		return
	}
	limit, ok := q.intParam("limit", defaultSyncLimit, 1, maxSyncLimit)
	if !ok {
		return
	}
	s := q.stream.store.Load()
	var since []int64
	if raw := q.r.URL.Query().Get("since"); raw != "" {
		tok, ok := b.resumeFrom(q, s, raw, syncTokenVersion, "the sync token", resync)
		if !ok {
			return
		}
		since = tok.Offsets
	}
	pos, picks, ok := s.syncPicks(q.user.Subject, since)
	if !ok {
		b.gone(q, errors.New("the sync token is older than the changes the bridge holds"), resync)
		return
	}
	nowMs := b.now().UnixMilli()
	until := time.Now().Add(messageWait)
	out := make([]syncConversation, 0, len(picks))
	for _, p := range picks {
		sc, target, ok := q.syncConversation(p, since == nil, nowMs)
		if !ok {
			continue
		}
		if sc.AfterSeq < target {
			// The state may be ahead of the outcomes read so far.
			gone, ok := c.await(q.r.Context(), p.e.key, target, until)
			if !ok {
				return
			}
			msgs, next, gap, err := c.readUpTo(q.r.Context(), p.e.key, sc.AfterSeq, int(limit), sc.Intervals, target, gone)
			if err != nil {
				q.w.Header().Set("Retry-After", "1")
				problem.Write(q.w, http.StatusServiceUnavailable, "unavailable", "reading the messages of "+p.e.key+": "+err.Error(), nil)
				return
			}
			sc.Messages, sc.NextAfterSeq, sc.Gap, sc.Limited = msgs, next, gap, next < target
		}
		if sc.Messages == nil {
			sc.Messages = []message{}
		}
		out = append(out, sc)
	}
	writeJSON(q.w, struct {
		Next          string             `json:"next"`
		Conversations []syncConversation `json:"conversations"`
	}{string(pos.appendAs(nil, syncTokenVersion)), out})
}

// syncPicks reads, under one read lock, the store's position and the
// conversations of user a sync answers: those changed at or after the
// offsets since, or with since nil all of them, sorted by key. ok is false
// when the log no longer holds every change after since.
func (s *store) syncPicks(user string, since []int64) (pos Cursor, picks []syncPick, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	pos = Cursor{Epoch: s.epoch, Offsets: slices.Clone(s.next)}
	if since == nil {
		for _, key := range s.conversationsOf(user) {
			if e, found := s.entities.Get(&entity{key: key}); found {
				picks = append(picks, syncPick{e: e})
			}
		}
		return pos, picks, true
	}
	if !s.holdsFrom(since) {
		return pos, nil, false
	}
	// Newest first, so the change kept of each key is its first after
	// since: what it replaced is what the client held. A partition's
	// changes lie in the log in offset order, so once one of them is
	// below since, all before it are too, and the scan ends when every
	// partition is below: a recent token looks at the recent changes only.
	first := map[string]*change{}
	member, knew := map[string]bool{}, map[string]bool{}
	// A partition read no further than since has no change after it.
	below := make([]bool, len(since))
	passed := 0
	for p, o := range since {
		if o >= s.next[p] {
			below[p] = true
			passed++
		}
	}
	for seq := s.head; seq > s.tail() && passed < len(since); seq-- {
		ch := s.at(seq - 1)
		if ch.offset < since[ch.partition] {
			if !below[ch.partition] {
				below[ch.partition] = true
				passed++
			}
			continue
		}
		key := ch.ent.key
		first[key] = ch
		member[key] = member[key] || isMember(ch.ent.access, user) || isMember(ch.before, user)
		knew[key] = knew[key] || knows(ch.ent.access, user) || knows(ch.before, user)
	}
	for key, ch := range first {
		if e, found := s.entities.Get(&entity{key: key}); found {
			picks = append(picks, syncPick{e: e, before: ch.before, member: member[key], knew: knew[key]})
		}
	}
	slices.SortFunc(picks, func(a, b syncPick) int { return strings.Compare(a.e.key, b.e.key) })
	return pos, picks, true
}

// syncConversation is what the user is told of conversation p.e, less the
// messages (NextAfterSeq is AfterSeq, what the client held), and last, the
// last sequence the user may read of it; Entity, for a current member, is
// as they are shown it at nowMs. One who may read nothing of it any more,
// though they were a member at the token or since, is told Left with
// readable_until_seq 0. ok is false when the user is told nothing: they
// never were a member, or, with a token (initial false), they were a
// former member already at it and a member in no state since (a former
// member receives nothing decided after their removal).
func (q *request) syncConversation(p syncPick, initial bool, nowMs int64) (sc syncConversation, last int64, ok bool) {
	user, a := q.user.Subject, p.e.access
	ivs := q.readable(p.e)
	member := a.member(user)
	if len(ivs) == 0 {
		// Someone who was a member at the token or since (the client may
		// hold the conversation, even from a later sync than the token's)
		// and now may read none of it (removed before anything was sent
		// to them) is told they left it, and nothing else.
		if !initial && p.knew {
			return syncConversation{Key: p.e.key, Left: &syncLeft{}, Intervals: []interval{}, Messages: []message{}}, 0, true
		}
		return sc, 0, false
	}
	sc, last = syncConversation{Key: p.e.key, Intervals: ivs}, a.lastSeq
	if member {
		ent := q.shown(p.e).json(nowMs)
		sc.Entity = &ent
	} else {
		end := a.boundary(user)
		if end == 0 {
			return sc, 0, false
		}
		if !initial && !p.member {
			// A member in no state since the token: nothing of theirs
			// changed (their intervals change only with a membership).
			return sc, 0, false
		}
		sc.Left, last = &syncLeft{ReadableUntilSeq: end}, min(a.lastSeq, end)
	}
	if p.before != nil {
		// A member at the token held every message they could read up to
		// the conversation's last sequence then, a former member up to
		// their boundary, anyone else nothing.
		if p.before.member(user) {
			sc.AfterSeq = p.before.lastSeq
		} else {
			sc.AfterSeq = p.before.boundary(user)
		}
	}
	sc.NextAfterSeq = sc.AfterSeq
	return sc, last, true
}
