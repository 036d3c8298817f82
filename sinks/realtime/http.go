package realtime

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/problem"
)

// Limits of one snapshot page and one page of messages.
const (
	defaultSnapshotLimit = 1000
	maxSnapshotLimit     = 10000
	defaultMessageLimit  = 100
	maxMessageLimit      = 1000
)

// visible reports whether the user may see entity e: anyone with the
// stream in their token, but for assign streams only a current member of
// the conversation.
func (q *request) visible(e *entity) bool {
	return e.access == nil || e.access.member(q.user.Subject)
}

// shown is entity e as the user is shown it: a conversation's member who
// may not read its last message (they joined after it) gets the state
// without it. Most are shown e itself, shared by every client.
func (q *request) shown(e *entity) *entity {
	if e.access == nil || e.access.lastSeq == 0 || readable(q.readable(e), e.access.lastSeq) {
		return e
	}
	return withoutLastMessage(e)
}

// readable are the sequences of conversation e the user may read, under
// the stream's history policy.
func (q *request) readable(e *entity) []interval {
	return e.access.intervals(q.user.Subject, q.stream.cfg.Assign.History)
}

// intParam reads a query parameter that must be an integer in [lo, hi],
// def when absent; ok is false once it has answered 400.
func (q *request) intParam(name string, def, lo, hi int64) (int64, bool) {
	v := q.r.URL.Query().Get(name)
	if v == "" {
		return def, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		problem.Write(q.w, http.StatusBadRequest, "bad_request", fmt.Sprintf("%s must be an integer from %d to %d, got %q", name, lo, hi, v), nil)
		return 0, false
	}
	return n, true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// retakeSnapshot is what a client does with a cursor that is gone.
const retakeSnapshot = "take a new snapshot"

// gone answers 410 for a position that cannot resume; advice says what
// the client does instead.
func (b *Bridge) gone(q *request, err error, advice string) {
	b.metrics.gone.WithLabelValues(q.stream.cfg.Name).Inc()
	problem.Write(q.w, http.StatusGone, "cursor-gone", err.Error()+"; "+advice, nil)
}

// snapshot serves one page of the stream's entities in key order, with
// the cursor read before the first page: a client applies the pages, then
// resumes the events from that cursor, and misses nothing published while
// it paged (design §6).
func (b *Bridge) snapshot(q *request) {
	limit, ok := q.intParam("limit", defaultSnapshotLimit, 1, maxSnapshotLimit)
	if !ok {
		return
	}
	s := q.stream.store.Load()
	var pos Cursor
	var after string
	if tok := q.r.URL.Query().Get("page_token"); tok != "" {
		var err error
		if pos, after, err = parsePageToken(tok); err != nil {
			problem.Write(q.w, http.StatusBadRequest, "bad_request", "page_token is malformed", nil)
			return
		}
		if pos.Epoch != s.epoch {
			b.gone(q, errors.New("the snapshot began on another epoch of the stream"), retakeSnapshot)
			return
		}
	} else {
		pos = s.position()
	}
	nowMs := b.now().UnixMilli()
	page := make([]entityJSON, 0, min(limit, 64))
	more := false
	s.mu.RLock()
	s.entities.AscendGreaterOrEqual(&entity{key: after}, func(e *entity) bool {
		if e.key == after && after != "" || !q.visible(e) {
			return true
		}
		if int64(len(page)) == limit {
			more = true
			return false
		}
		page = append(page, q.shown(e).json(nowMs))
		return true
	})
	s.mu.RUnlock()
	var next *string
	if more {
		t := pageToken(pos, page[len(page)-1].Key)
		next = &t
	}
	b.metrics.snapshot.WithLabelValues(q.stream.cfg.Name).Observe(float64(len(page)))
	writeJSON(q.w, struct {
		Stream        string       `json:"stream"`
		Cursor        string       `json:"cursor"`
		Entities      []entityJSON `json:"entities"`
		NextPageToken *string      `json:"next_page_token"`
	}{q.stream.cfg.Name, pos.String(), page, next})
}

// pageToken is the snapshot's cursor and the last key served.
func pageToken(pos Cursor, lastKey string) string {
	return pos.String() + "." + base64.RawURLEncoding.EncodeToString([]byte(lastKey))
}

func parsePageToken(tok string) (Cursor, string, error) {
	c, key, ok := strings.Cut(tok, ".")
	if !ok {
		return Cursor{}, "", errMalformedCursor
	}
	pos, err := ParseCursor(c)
	if err != nil {
		return Cursor{}, "", err
	}
	last, err := base64.RawURLEncoding.DecodeString(key)
	return pos, string(last), err
}

// entity serves one entity, with expired as of now.
func (b *Bridge) entity(q *request) {
	e, ok := q.stream.store.Load().get(q.r.PathValue("key"))
	switch {
	case q.stream.chat != nil && ok && !q.visible(e) && e.access.boundary(q.user.Subject) > 0:
		b.forbid(q.w, q.stream.cfg.Name, fmt.Sprintf("you left the conversation after message %d: the messages up to it stay readable at its messages", e.access.boundary(q.user.Subject)))
	case q.stream.chat != nil && (!ok || !q.visible(e)):
		// Alike whether the conversation exists or not, so that its id
		// tells a non-member nothing.
		b.forbid(q.w, q.stream.cfg.Name, "only a member of the conversation may read it")
	case !ok:
		problem.Write(q.w, http.StatusNotFound, "not_found", "the key has no state", nil)
	default:
		writeJSON(q.w, q.shown(e).json(b.now().UnixMilli()))
	}
}

func (s *store) get(key string) (*entity, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.entities.Get(&entity{key: key})
}

// messageWait bounds how long chat catch-up waits for the outcomes reader
// to hold the messages the conversation's state says were sent.
const messageWait = 2 * time.Second

// messages serves a conversation's applied sends after after_seq that the
// user may read, in order, each sequence once (assign streams), with the
// intervals they may read: a current member's, or a former member's up to
// the boundary of their removal.
func (b *Bridge) messages(q *request) {
	c := q.stream.chat
	if c == nil {
		problem.Write(q.w, http.StatusNotFound, "not_assign", fmt.Sprintf("stream %q does not assign sequences: it has no messages", q.stream.cfg.Name), nil)
		return
	}
	after, ok := q.intParam("after_seq", 0, 0, 1<<53)
	if !ok {
		return
	}
	limit, ok := q.intParam("limit", defaultMessageLimit, 1, maxMessageLimit)
	if !ok {
		return
	}
	key := q.r.PathValue("key")
	e, found := q.stream.store.Load().get(key)
	var ivs []interval
	if found {
		ivs = q.readable(e)
	}
	if len(ivs) == 0 {
		b.forbid(q.w, q.stream.cfg.Name, "only a member of the conversation may read its messages")
		return
	}
	// The state may be ahead of the outcomes read so far.
	last := e.access.lastSeq
	if end := ivs[len(ivs)-1].To; end != 0 {
		last = min(last, end)
	}
	gone, ok := c.await(q.r.Context(), key, last, time.Now().Add(messageWait))
	if !ok {
		return
	}
	msgs, next, limited, err := c.readUpTo(q.r.Context(), key, after, int(limit), ivs, last, gone)
	if err != nil {
		q.w.Header().Set("Retry-After", "1")
		problem.Write(q.w, http.StatusServiceUnavailable, "unavailable", "reading the conversation's messages: "+err.Error(), nil)
		return
	}
	if msgs == nil {
		msgs = []message{}
	}
	writeJSON(q.w, struct {
		Messages     []message  `json:"messages"`
		NextAfterSeq int64      `json:"next_after_seq"`
		Limited      bool       `json:"limited"`
		Intervals    []interval `json:"intervals"`
	}{msgs, next, limited, ivs})
}

// await waits until the messages held of conversation key reach
// sequence last, or until; ok is false when ctx ended first. It stops
// early, gone, once the reader has read the conversation's partition to
// where it ended when the wait began: the state that names last was
// committed with its outcomes, which lie below that end, so a sequence up
// to last not held by then never will be (older than where the reader
// started, or deleted by retention).
func (c *chat) await(ctx context.Context, key string, last int64, until time.Time) (gone, ok bool) {
	if top, _ := c.highest(key); top >= last {
		return false, true
	}
	p, end := c.partitionOf(key), int64(-1) // unknown: wait for the messages alone
	if p >= 0 && c.end != nil {
		if at, err := c.end(ctx, p); err == nil {
			end = at
		}
	}
	for {
		top, wake := c.highest(key)
		if top >= last {
			return false, true
		}
		if end >= 0 && c.readThrough(p, end) {
			return true, true
		}
		if !time.Now().Before(until) {
			return false, true
		}
		select {
		case <-wake:
		case <-time.After(time.Until(until)):
		case <-ctx.Done():
			return false, false
		}
	}
}

// readUpTo reads up to limit messages of conversation key after `after`
// that a user with intervals ivs may read, up to last, the last sequence
// the conversation's state names that they may read. A sequence above it
// is neither given nor counted as looked at (next stays at most last): the
// state may be behind the outcomes, and under `shared` a member added
// back may later read what was sent while they were out.
//
// With gone (see await), the sequences up to last above what is held are
// held nowhere: a page that reaches them is limited if the user may read
// one, and goes on past them to last.
func (c *chat) readUpTo(ctx context.Context, key string, after int64, limit int, ivs []interval, last int64, gone bool) (msgs []message, next int64, limited bool, err error) {
	// Nothing before the user's first interval is theirs to read: reading
	// starts at it, not at every sequence the store no longer holds.
	from := max(after, ivs[0].From-1)
	top, _ := c.highest(key)
	msgs, next, limited, err = c.read(ctx, key, from, limit, func(seq int64) bool { return seq <= last && readable(ivs, seq) })
	if err == nil && gone && next >= min(top, last) && last > max(next, from) {
		limited = limited || readableIn(ivs, max(next, from)+1, last)
		next = last
	}
	return msgs, max(from, min(next, last)), limited, err
}
