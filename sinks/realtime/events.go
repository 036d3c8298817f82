package realtime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/problem"
)

// aheadWait is how long a cursor from a bridge that has read further
// waits for this one to catch up.
const aheadWait = 10 * time.Second

// events serves every change after a cursor, then live, as server-sent
// events: `id:` is the cursor covering the change, `event: state`, `data:`
// the Entity. A cursor that cannot resume is 410 Gone, never a partial
// replay.
func (b *Bridge) events(q *request) {
	raw := q.r.URL.Query().Get("cursor")
	if raw == "" {
		raw = q.r.Header.Get("Last-Event-ID")
	}
	if raw == "" {
		problem.Write(q.w, http.StatusBadRequest, "cursor_required", "events resume from a cursor: take a snapshot first, then ask for its cursor's events", nil)
		return
	}
	// Admission (admission.go): every events request is a reconnect,
	// counted by outcome.
	rec := &reconnect{m: b.metrics.admission, stream: q.stream.cfg.Name, arrived: time.Now()}
	if !b.admit(q, rec) {
		return
	}
	defer b.admission.leave(q.user.Subject, q.user.token())
	s := q.stream.store.Load()
	answered := *q
	answered.w = &statusWriter{ResponseWriter: q.w}
	pos, ok := b.resumeFrom(&answered, s, raw, cursorVersion, "the cursor", retakeSnapshot)
	if !ok {
		rec.end(reconnectOutcome(answered.w.(*statusWriter).status))
		return
	}
	key := q.r.URL.Query().Get("key")
	if key != "" && q.stream.cfg.Policy == config.PolicyAssign {
		if e, ok := s.get(key); !ok || !q.visible(e) {
			b.forbid(q.w, q.stream.cfg.Name, "only a member of the conversation may follow it")
			return
		}
	}
	h := q.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies pass each message on as it comes
	q.w.WriteHeader(http.StatusOK)
	name := q.stream.cfg.Name
	c := &client{b: b, q: q, s: s, pos: pos, key: key, rc: http.NewResponseController(q.w),
		sentTotal: b.metrics.sent.WithLabelValues(name), delivery: b.metrics.delivery.WithLabelValues(name), clock: time.Now(), rec: rec}
	// Following typing before the client has its answer, and before it
	// is counted: a typing signal read once it is connected reaches it
	// (queued until run writes it).
	defer b.followTyping(c)()
	if c.flush() != nil {
		return
	}
	b.metrics.clients.WithLabelValues(name).Inc()
	defer b.metrics.clients.WithLabelValues(name).Dec()
	// The stream lasts as long as its token: at its expiry (and the
	// leeway) the client is told so and gets a new token to resume with.
	valid, stop := context.WithDeadline(q.r.Context(), b.tokenEnd(q.user))
	defer stop()
	err := c.run(valid)
	if q.r.Context().Err() == nil && errors.Is(valid.Err(), context.DeadlineExceeded) {
		err = c.end(reasonTokenExpired)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// A client that took nothing for writeTimeout is as good as
		// reset: its connection ends the same way.
		b.metrics.resets.WithLabelValues(name).Inc()
	}
	if err != nil && q.r.Context().Err() == nil {
		b.log.Debug("events client ended", "stream", name, "err", err)
	}
}

// resumeFrom decodes a position a client handed back, what (a cursor, of
// version cursorVersion, or a sync token), and checks that it can resume
// on s; false once it has answered: 410 when it cannot (advice says what
// the client does then), 503 when that cannot be told now.
func (b *Bridge) resumeFrom(q *request, s *store, raw string, version byte, what, advice string) (Cursor, bool) {
	pos, err := parseAs(raw, version)
	if err != nil {
		b.gone(q, errors.New(what+" is malformed"), advice)
		return Cursor{}, false
	}
	if err := b.resumable(q.r.Context(), q.stream, s, pos); err != nil {
		var g goneError
		if errors.As(err, &g) {
			b.gone(q, err, advice)
			return Cursor{}, false
		}
		q.w.Header().Set("Retry-After", "1")
		problem.Write(q.w, http.StatusServiceUnavailable, "unavailable", err.Error(), nil)
		return Cursor{}, false
	}
	return pos, true
}

// resumable checks a cursor against the stream: its epoch and partition
// count, and each offset between the log's start and its end. A cursor
// ahead of what this bridge has read but not of the log (another bridge
// read further) waits for this one to catch up.
func (b *Bridge) resumable(ctx context.Context, st *stream, s *store, c Cursor) error {
	s.mu.RLock()
	epoch, next, floor := s.epoch, slices.Clone(s.next), slices.Clone(s.floor)
	s.mu.RUnlock()
	switch {
	case c.Epoch != epoch:
		return gone("the cursor is of another epoch of the stream (its topic was created again)")
	case len(c.Offsets) != len(next):
		return gone("the cursor has %d partitions, the stream %d", len(c.Offsets), len(next))
	}
	var below, ahead bool
	for p, o := range c.Offsets {
		below = below || o < floor[p]
		ahead = ahead || o > next[p]
	}
	if below {
		starts, err := b.adm.ListStartOffsets(ctx, st.topic)
		if err != nil {
			return fmt.Errorf("reading the log start: %w", err)
		}
		var err2 error
		starts.Each(func(o kadm.ListedOffset) {
			if int(o.Partition) < len(c.Offsets) && c.Offsets[o.Partition] < o.Offset {
				err2 = gone("the cursor is below the log start of partition %d (%d < %d)", o.Partition, c.Offsets[o.Partition], o.Offset)
			}
		})
		if err2 != nil {
			return err2
		}
	}
	if !ahead {
		return nil
	}
	ends, err := b.adm.ListEndOffsets(ctx, st.topic)
	if err != nil {
		return fmt.Errorf("reading the log end: %w", err)
	}
	var err2 error
	ends.Each(func(o kadm.ListedOffset) {
		if int(o.Partition) < len(c.Offsets) && c.Offsets[o.Partition] > o.Offset {
			err2 = gone("the cursor is ahead of the log end of partition %d (%d > %d)", o.Partition, c.Offsets[o.Partition], o.Offset)
		}
	})
	if err2 != nil {
		return err2
	}
	until := time.After(aheadWait)
	for {
		s.mu.RLock()
		reached, wake := true, s.wake
		for p, o := range c.Offsets {
			reached = reached && o <= s.next[p]
		}
		s.mu.RUnlock()
		if reached {
			return nil
		}
		select {
		case <-wake:
		case <-until:
			return errors.New("the bridge has not read the stream as far as the cursor yet")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
