package realtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Bounds of one client's connection.
const (
	// writeTimeout is the longest one write may block: a client whose
	// connection takes nothing for that long is cut off (and counted as
	// reset). It is above lagGrace, so a client that reads, but slower
	// than the stream, is told to reset first.
	writeTimeout = 10 * time.Second
	// deadlineSlack is how old the write deadline may be before a write
	// sets it again, so a write may block from writeTimeout less
	// deadlineSlack (still above lagGrace) to writeTimeout. Setting it
	// rearms a runtime timer, which for every message cost more than the
	// message's write.
	deadlineSlack = time.Second
	// batchChanges bounds the changes a client takes from the log under
	// one read lock.
	batchChanges = 256
	// lagGrace is how long a client may stay more than bridge.client_lag
	// changes behind before it is reset: a burst read from Kafka puts
	// every client behind for a moment.
	lagGrace = 5 * time.Second
)

// client is one connection's events. Until it has caught up with the log's
// head its position is its own (pos, and each message's id is pos); from
// then on, unless it follows one key, it is live: each change's id is the
// stream's position after it, and the message is the same bytes for every
// live client.
type client struct {
	b    *Bridge
	q    *request
	s    *store
	pos  Cursor
	seq  uint64
	live bool
	key  string
	rc   *http.ResponseController
	buf  []byte
	sent int
	// sentTotal is the stream's series of messages sent, looked up once:
	// a lookup per message costs more than the message's write; delivery
	// its delivery latency's.
	sentTotal prometheus.Counter
	delivery  prometheus.Observer
	// clock is when the client started; the times below are durations
	// since, read from the monotonic clock alone (time.Since) once per
	// message and shared by the lag check and the write deadline: clock
	// readings, time.Now's of both clocks all the more, cost as much as
	// a message's write.
	clock time.Time
	// withinLag is when the client was last within client_lag of the head.
	withinLag time.Duration
	// deadlineSet is when the write deadline was last set, if armed.
	deadlineSet time.Duration
	armed       bool
	// queued is the block holding the live messages queued to be written
	// at once, from runStart to runEnd, runLen of them; nil when none.
	queued                   *frameBlock
	runStart, runEnd, runLen int
	// told are the conversations the client was told it left.
	told map[string]bool
	// typing brings the typing signals the client may see (typing_read.go);
	// nil on a stream without typing.
	typing chan *typingSignal
	// rec counts how the client's reconnect ended (admission.go).
	rec *reconnect
}

// tooFarBehind reports whether the client, behind changes from the head
// at at (since clock), has been more than client_lag behind for longer
// than lagGrace.
func (c *client) tooFarBehind(behind uint64, at time.Duration) bool {
	if behind <= uint64(c.b.cfg.ClientLag) {
		c.withinLag = at
		return false
	}
	return at-c.withinLag > lagGrace
}

// run sends the changes after the client's cursor, then every new one,
// until the client goes, falls too far behind (reset), or, following a
// conversation, stops being one of its members.
func (c *client) run(ctx context.Context) error {
	if err := c.catchUpFromKafka(ctx); err != nil {
		return err
	}
	heartbeat := time.NewTicker(c.b.cfg.Heartbeat)
	defer heartbeat.Stop()
	c.withinLag = time.Since(c.clock)
	for {
		batch, upto, head, next, wake, behind, left := c.take()
		if left && !c.live {
			// Not live yet: the log moved past the client's position
			// while it caught up, as it does right after a catch-up
			// from the topic, which ends where the log begins. The rest
			// comes from the topic again, rather than a new snapshot.
			if err := c.catchUpFromKafka(ctx); err != nil {
				return err
			}
			continue
		}
		if left || c.tooFarBehind(behind, time.Since(c.clock)) {
			return c.reset(fmt.Sprintf("the client is %d changes behind the stream; take a new snapshot", behind))
		}
		nowMs := c.b.now().UnixMilli()
		for _, ch := range batch {
			// A slow reader's writes block: how far behind it is, is
			// looked at before each.
			at := time.Since(c.clock)
			if behind := c.s.headNow.Load() - ch.seq; c.tooFarBehind(behind, at) {
				return c.reset(fmt.Sprintf("the client is %d changes behind the stream; take a new snapshot", behind))
			}
			ok, err := c.send(ch, nowMs, at)
			if err != nil || !ok {
				return err
			}
		}
		c.seq = upto
		if len(batch) > 0 {
			if err := c.flush(); err != nil {
				return err
			}
		}
		if c.seq < head {
			continue
		}
		c.rec.end(outcomeResumed) // caught up: live from here
		if !c.live {
			// Every change the log holds after the cursor has been sent
			// (of its key, for a client following one); records it
			// passed over were superseded. From here on each message's
			// id is the stream's position after its change, the same
			// bytes for every live client: for one following a key too,
			// since every change of that key before it has been sent.
			c.pos.Offsets, c.live = next, true
			c.b.metrics.catchUp.WithLabelValues(c.q.stream.cfg.Name).Observe(float64(c.sent))
		}
		select {
		case <-wake:
		case <-c.s.retired:
			return c.reset("the bridge is reading the stream anew; take a new snapshot")
		case sig := <-c.typing:
			if err := c.sendTyping(sig); err != nil {
				return err
			}
		case <-heartbeat.C:
			if _, err := c.q.w.Write([]byte(":\n\n")); err != nil {
				return err
			}
			if err := c.flush(); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// take returns the next changes for the client from the log, the
// sequence number the client has looked through once it has sent them,
// the log's head and position, the channel closed on the next change (of
// its key, for a client following one), how far behind the head the
// client is, and whether the log has dropped changes the client has not
// been sent (it is then reset).
func (c *client) take() (batch []*change, upto, head uint64, next []int64, wake <-chan struct{}, behind uint64, left bool) {
	s := c.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	head, wake = s.head, s.wake
	if tail := s.tail(); c.seq < tail {
		// The log dropped changes the client had not come to. A live
		// client needed them; one still catching up may not have (they
		// were before its cursor), and then starts from the tail. A
		// client following a key needed only that key's.
		switch {
		case c.key != "" && !s.keyEvictedSince(c.key, c.seq):
		case c.live || c.missed():
			return nil, c.seq, head, nil, wake, head - c.seq, true
		}
		c.seq = tail
	}
	if c.key != "" {
		// Only the key's changes, from the log's index by key; the
		// others are passed over without being looked at.
		wake = s.keys.wake(c.key)
		batch = s.keyChangesFrom(c.key, c.seq, batchChanges)
		upto = head
		if len(batch) == batchChanges {
			upto = batch[len(batch)-1].seq + 1
		}
	} else {
		for seq := c.seq; seq < head && len(batch) < batchChanges; seq++ {
			batch = append(batch, s.at(seq))
		}
		upto = c.seq + uint64(len(batch))
	}
	if upto == head && !c.live {
		next = slices.Clone(s.next) // only going live needs it
	}
	return batch, upto, head, next, wake, head - c.seq, false
}

// missed reports whether the log no longer holds a change at or after the
// client's position (the store's lock held).
func (c *client) missed() bool { return !c.s.holdsFrom(c.pos.Offsets) }

// send writes one change when the client should see it, expired as of
// nowMs, at at (since clock); ok is false when the client must stop (it
// left the conversation it follows).
func (c *client) send(ch *change, nowMs int64, at time.Duration) (ok bool, err error) {
	if !c.live {
		if ch.offset < c.pos.Offsets[ch.partition] {
			return true, nil // before the cursor
		}
		c.pos.Offsets[ch.partition] = ch.offset + 1
	}
	if c.key != "" && ch.ent.key != c.key {
		return true, nil
	}
	if !c.q.visible(ch.ent) {
		// A member removed from the conversation receives nothing decided
		// after the removal, only the boundary of what they may still
		// read, once; following it, the connection ends.
		if end := ch.ent.access.boundary(c.q.user.Subject); end > 0 && !c.told[ch.ent.key] {
			if c.told == nil {
				c.told = map[string]bool{}
			}
			c.told[ch.ent.key] = true
			c.buf = fmt.Appendf(c.buf[:0], "event: left\ndata: {\"key\":%s,\"readable_until_seq\":%d}\n\n", quoteJSON(ch.ent.key), end)
			if err := c.write(c.buf, at); err != nil {
				return false, err
			}
		}
		return c.key == "", nil
	}
	// A member again (added back): a later removal is told again.
	delete(c.told, ch.ent.key)
	expired := isExpired(ch.ent, nowMs)
	shown := c.q.shown(ch.ent)
	if c.live {
		// The state's updated_at_ms is when its event was accepted; the
		// batch's clock reading (nowMs) stands for the write's.
		c.delivery.Observe(float64(nowMs-ch.ent.updatedAt) / 1e3)
	}
	switch {
	case c.live && !expired && shown == ch.ent:
		return true, c.queue(ch, at)
	case c.live && shown == ch.ent:
		return true, c.write(ch.expired(), at)
	}
	id := c.pos.String()
	if c.live {
		id = ch.after
	}
	c.buf = appendFrame(c.buf[:0], id, shown, expired)
	return true, c.write(c.buf, at)
}

// quoteJSON is s as a JSON string.
func quoteJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// maxRun bounds the bytes of live messages a client writes at once. The
// kernel must take each write before the write deadline (writeTimeout,
// less at most deadlineSlack), so a client whose buffers are full is cut
// off unless it reads maxRun in that time, about 3 KiB a second.
const maxRun = 32 << 10

// queue adds a change's live message to the run the client writes next;
// the messages of consecutive changes lie end to end in their block, so
// a run is written at once, not in a write per message.
func (c *client) queue(ch *change, at time.Duration) error {
	ch.block.build()
	if c.queued != nil && ch.follows(c.queued, c.runEnd) && ch.end-c.runStart <= maxRun {
		c.runEnd, c.runLen = ch.end, c.runLen+1
		return nil
	}
	if err := c.writeRun(at); err != nil {
		return err
	}
	c.queued, c.runStart, c.runEnd, c.runLen = ch.block, ch.start, ch.end, 1
	return nil
}

// writeRun writes the queued run, if any.
func (c *client) writeRun(at time.Duration) error {
	if c.queued == nil {
		return nil
	}
	run := c.queued.b[c.runStart:c.runEnd]
	c.queued = nil
	return c.writeMessages(run, c.runLen, at)
}

// write writes one message, after the queued run.
func (c *client) write(frame []byte, at time.Duration) error {
	if err := c.writeRun(at); err != nil {
		return err
	}
	return c.writeMessages(frame, 1, at)
}

func (c *client) writeMessages(b []byte, n int, at time.Duration) error {
	c.extendDeadline(at)
	if _, err := c.q.w.Write(b); err != nil {
		return err
	}
	c.sent += n
	c.sentTotal.Add(float64(n))
	return nil
}

func (c *client) flush() error {
	at := time.Since(c.clock)
	if err := c.writeRun(at); err != nil {
		return err
	}
	c.extendDeadline(at)
	return c.rc.Flush()
}

// extendDeadline gives the writes that follow, at at (since clock),
// writeTimeout from now, unless the deadline was set less than
// deadlineSlack before.
func (c *client) extendDeadline(at time.Duration) {
	if c.armed && at-c.deadlineSet < deadlineSlack {
		return
	}
	c.deadlineSet, c.armed = at, true
	_ = c.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
}

// reset tells a client that fell behind to take a new snapshot, and ends
// its connection: memory per client stays bounded.
func (c *client) reset(reason string) error {
	c.b.metrics.resets.WithLabelValues(c.q.stream.cfg.Name).Inc()
	return c.end(reason)
}

// reasonTokenExpired is the reason of the reset that ends a stream whose
// token expired: the client resumes from its last id with a new token,
// no new snapshot needed.
const reasonTokenExpired = "token_expired"

// end sends what is queued and `event: reset` with reason, and ends the
// connection.
func (c *client) end(reason string) error {
	c.rec.end(outcomeReset)
	_ = c.writeRun(time.Since(c.clock))
	_ = c.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, _ = fmt.Fprintf(c.q.w, "event: reset\ndata: {\"reason\":%q}\n\n", reason)
	_ = c.rc.Flush()
	return errors.New(reason)
}

// tokenEnd is when a stream on the token of user ends: its expiry plus
// bridge.tokens.leeway, on the bridge's clock, as a time of the system's.
func (b *Bridge) tokenEnd(user *claims) time.Time {
	left := user.ExpiresAt.Add(b.cfg.Tokens.Leeway).Sub(b.now())
	return time.Now().Add(left)
}
