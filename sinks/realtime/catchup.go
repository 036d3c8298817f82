package realtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Catch-up from the state topic. A client resuming from a cursor older
// than the store's log is sent the changes the log no longer holds from
// the topic itself. Such clients come together (every client of a bridge
// that restarted, or of a network that came back), so they share the
// reading: each stream has at most bridge.catchup_readers readers, and a
// reader takes every client waiting when it starts, reads each partition
// from the lowest of their positions up to where the log begins (a
// sweep), and hands the changes, decoded once, to every one of them.
// Each client writes them at its own pace, skipping those before its own
// position, so each gets exactly the changes after its cursor, once, in
// offset order per partition; then it goes on from the log, as one whose
// cursor the log held.
//
// Memory is bounded: a sweep keeps at most sweepAhead batches of changes
// ahead of its slowest client. A client that falls further behind, for
// longer than sweepWait, is let go by the sweep (not by the connection):
// it has been sent every change up to its position, and joins the next
// sweep from there, so one slow client holds up no one for long, and
// holds at most the batch it is writing. (Variables only so that a test
// can make them small.)
var (
	sweepAhead = 16
	sweepWait  = time.Second
)

// A batch ends at batchChanges changes or sweepBatchBytes of state.
const sweepBatchBytes = 64 << 10

// catchUps are the catch-up readers of one stream and the clients
// waiting for one.
type catchUps struct {
	b       *Bridge
	st      *stream
	readers int
	gauges  struct{ readers, waiting prometheus.Gauge }
	sweeps  prometheus.Observer

	mu      sync.Mutex
	running int
	waiting []*catchUpWaiter
}

func newCatchUps(b *Bridge, st *stream) *catchUps {
	p := &catchUps{b: b, st: st, readers: b.cfg.CatchupReaders}
	p.gauges.readers = b.metrics.admission.catchupReaders.WithLabelValues(st.cfg.Name)
	p.gauges.waiting = b.metrics.admission.catchupWaiting.WithLabelValues(st.cfg.Name)
	p.sweeps = b.metrics.admission.sweepClients.WithLabelValues(st.cfg.Name)
	return p
}

// catchUpWaiter is a client waiting for a sweep, at position pos of store
// s; got receives its place in the sweep that takes it.
type catchUpWaiter struct {
	s   *store
	pos []int64
	got chan *sweepMember
}

// join waits for a sweep to take a client at pos of s.
func (p *catchUps) join(ctx context.Context, s *store, pos []int64) (*sweepMember, error) {
	w := &catchUpWaiter{s: s, pos: pos, got: make(chan *sweepMember, 1)}
	p.mu.Lock()
	p.waiting = append(p.waiting, w)
	p.gauges.waiting.Set(float64(len(p.waiting)))
	if p.running < p.readers {
		p.running++
		p.gauges.readers.Set(float64(p.running))
		go p.run()
	}
	p.mu.Unlock()
	select {
	case m := <-w.got:
		return m, nil
	case <-ctx.Done():
		p.mu.Lock()
		waited := len(p.waiting)
		p.waiting = deleteWaiter(p.waiting, w)
		p.gauges.waiting.Set(float64(len(p.waiting)))
		p.mu.Unlock()
		if waited == len(p.waiting) {
			// A sweep took it in the meantime: its place is in got.
			(<-w.got).leave()
		}
		return nil, ctx.Err()
	}
}

func deleteWaiter(ws []*catchUpWaiter, w *catchUpWaiter) []*catchUpWaiter {
	for i, x := range ws {
		if x == w {
			return append(ws[:i], ws[i+1:]...)
		}
	}
	return ws
}

// run is one reader: it sweeps for the clients waiting, as long as some
// are.
func (p *catchUps) run() {
	for {
		p.mu.Lock()
		if len(p.waiting) == 0 {
			p.running--
			p.gauges.readers.Set(float64(p.running))
			p.mu.Unlock()
			return
		}
		sw := p.startSweep()
		p.gauges.waiting.Set(float64(len(p.waiting)))
		p.mu.Unlock()
		sw.read(p.b, p.st.topic)
	}
}

// startSweep takes the waiting clients of the first one's store (those of
// a store since retired wait for a sweep of their own, and are reset) and
// starts their sweep; p.mu held.
func (p *catchUps) startSweep() *sweep {
	s := p.waiting[0].s
	s.mu.RLock()
	to := map[int32]int64{}
	for part, floor := range s.floor {
		to[int32(part)] = floor
	}
	s.mu.RUnlock()
	ctx, cancel := context.WithCancel(context.Background())
	sw := &sweep{s: s, to: to, from: map[int32]int64{}, ctx: ctx, cancel: cancel, ring: make([]*sweepBatch, sweepAhead), wait: sweepWait,
		members: map[*sweepMember]bool{}, changed: make(chan struct{}), progressed: make(chan struct{}, 1)}
	rest, taken := p.waiting[:0], []*catchUpWaiter{}
	for _, w := range p.waiting {
		if w.s != s {
			rest = append(rest, w)
			continue
		}
		for part, o := range w.pos {
			if from, ok := sw.from[int32(part)]; o < to[int32(part)] && (!ok || o < from) {
				sw.from[int32(part)] = o
			}
		}
		taken = append(taken, w)
	}
	clear(p.waiting[len(rest):])
	p.waiting = rest
	p.sweeps.Observe(float64(len(taken)))
	members := make([]*sweepMember, len(taken))
	for i := range taken {
		members[i] = &sweepMember{sw: sw}
		sw.members[members[i]] = true
	}
	// Every member is in before any of them starts.
	for i, w := range taken {
		w.got <- members[i]
	}
	return sw
}

// sweep is one reading of the state topic from the lowest position of its
// clients to the store's floor when it started, shared by them.
type sweep struct {
	s        *store
	from, to map[int32]int64
	ctx      context.Context
	cancel   context.CancelFunc

	mu sync.Mutex
	// ring holds the last sweepAhead batches: batch i is ring[i%len(ring)]
	// while i >= produced-len(ring).
	ring     []*sweepBatch
	wait     time.Duration
	produced int
	done     bool
	err      error
	// changed is closed, and replaced, when a batch is added or the sweep
	// ends.
	changed chan struct{}
	// members are the clients still following the sweep, each true while
	// attached (false once let go for being too slow).
	members map[*sweepMember]bool
	// progressed is signalled when a member takes a batch or leaves.
	progressed chan struct{}
}

// sweepBatch is a run of changes read, each decoded once for every member.
type sweepBatch struct {
	changes []*change
	bytes   int
}

// sweepMember is one client's place in a sweep.
type sweepMember struct {
	sw *sweep
	// next is the next batch the member takes (sw.mu held).
	next int
}

// read reads the sweep's range and ends it.
func (sw *sweep) read(b *Bridge, topic string) {
	batch := &sweepBatch{}
	err := b.readRange(sw.ctx, topic, sw.from, sw.to, func(p int32, r stateRecord) error {
		batch.changes = append(batch.changes, &change{partition: p, offset: r.offset, ent: newEntity(p, r, sw.s.assign)})
		if batch.bytes += len(r.state); len(batch.changes) < batchChanges && batch.bytes < sweepBatchBytes {
			return nil
		}
		err := sw.publish(batch)
		batch = &sweepBatch{}
		return err
	})
	if err == nil && len(batch.changes) > 0 {
		err = sw.publish(batch)
	}
	sw.mu.Lock()
	sw.done, sw.err = true, err
	close(sw.changed)
	sw.mu.Unlock()
	sw.cancel()
}

// errNoMembers ends a sweep whose clients have all gone.
var errNoMembers = errors.New("every client of the sweep has gone")

// publish adds a batch once every attached member has taken the batch
// it replaces in the ring; members that have not within sweepWait are let
// go.
func (sw *sweep) publish(batch *sweepBatch) error {
	waitSince := time.Now()
	for {
		sw.mu.Lock()
		if len(sw.members) == 0 {
			sw.mu.Unlock()
			return errNoMembers
		}
		oldest, blocked := sw.produced-len(sw.ring), false
		for m, attached := range sw.members {
			if attached && m.next <= oldest {
				if time.Since(waitSince) < sw.wait {
					blocked = true
					break
				}
				sw.members[m] = false
			}
		}
		if !blocked {
			sw.ring[sw.produced%len(sw.ring)] = batch
			sw.produced++
			close(sw.changed)
			sw.changed = make(chan struct{})
			sw.mu.Unlock()
			return nil
		}
		sw.mu.Unlock()
		select {
		case <-sw.progressed:
		case <-time.After(sw.wait):
		case <-sw.ctx.Done():
			return sw.ctx.Err()
		}
	}
}

// take returns the member's next batch, or nil with the sweep's end: done
// when the sweep read its whole range, or false when the member was let
// go; wake is closed when there may be more.
func (m *sweepMember) take() (batch *sweepBatch, wake <-chan struct{}, finished, done bool, err error) {
	sw := m.sw
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if !sw.members[m] {
		return nil, nil, true, false, nil
	}
	if m.next < sw.produced {
		batch = sw.ring[m.next%len(sw.ring)]
		m.next++
		select {
		case sw.progressed <- struct{}{}:
		default:
		}
		return batch, nil, false, false, nil
	}
	if sw.done {
		return nil, nil, true, sw.err == nil, sw.err
	}
	return nil, sw.changed, false, false, nil
}

// leave takes the member out of the sweep; the last one out stops it.
func (m *sweepMember) leave() {
	sw := m.sw
	sw.mu.Lock()
	delete(sw.members, m)
	last := len(sw.members) == 0
	sw.mu.Unlock()
	select {
	case sw.progressed <- struct{}{}:
	default:
	}
	if last {
		sw.cancel()
	}
}

// catchUpFromKafka sends, from the state topic itself, the changes after
// the cursor that the log no longer holds, until the log holds the rest;
// the log's place to start is then its tail.
func (c *client) catchUpFromKafka(ctx context.Context) error {
	for {
		s := c.s
		s.mu.RLock()
		behind := !s.holdsFrom(c.pos.Offsets)
		c.seq = s.tail()
		s.mu.RUnlock()
		if !behind {
			return nil
		}
		m, err := c.q.stream.catchUps.join(ctx, s, c.pos.Offsets)
		if err != nil {
			return err
		}
		err = c.followSweep(ctx, m)
		m.leave()
		if err != nil {
			return err
		}
	}
}

// followSweep sends the changes of the member's sweep after the client's
// position, until the sweep ends or lets it go.
func (c *client) followSweep(ctx context.Context, m *sweepMember) error {
	nowMs := c.b.now().UnixMilli()
	for {
		batch, wake, finished, done, err := m.take()
		switch {
		case err != nil:
			return err
		case done:
			// Every change of the range after the client's position was
			// sent: what is left up to its end was passed over
			// (superseded, aborted, or a transaction's marker).
			for p, o := range m.sw.to {
				c.pos.Offsets[p] = max(c.pos.Offsets[p], o)
			}
			return c.flush()
		case finished:
			return c.flush()
		case batch == nil:
			select {
			case <-wake:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		for _, ch := range batch.changes {
			ok, err := c.send(ch, nowMs, time.Since(c.clock))
			if err == nil && !ok {
				err = errors.New("the client left the conversation")
			}
			if err != nil {
				return err
			}
		}
		if err := c.flush(); err != nil {
			return err
		}
	}
}

// catchUpFetchBytes bounds one fetch of a catch-up reader.
const catchUpFetchBytes = 1 << 20
