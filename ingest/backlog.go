package ingest

import (
	"sync"
	"time"
)

// backlog is what the producer holds for the edge: the records handed to
// it and not yet done with (acked, or failed for good), counted by when
// they were sent. Every 503's Retry-After comes from it: how long the
// oldest of them has waited. That is what a publisher's retry would meet.
// A healthy broker acks in milliseconds, and the hint is the least, a
// second; a slow one makes records queue, and the oldest one's wait is
// what the queue costs (the newest waits about as long at a steady pace);
// a broker that stopped acking makes it grow with the outage, so that
// publishers back off as long as it lasts instead of retrying into it.
type backlog struct {
	now   func() time.Time
	start time.Time

	mu    sync.Mutex
	bytes int64
	// sentIn counts the pending records sent in each of the last
	// backlogSlots slots; newest is the number of the newest slot, counted
	// from start; older counts those sent before the oldest slot.
	sentIn [backlogSlots]int64
	newest int64
	older  int64
}

// Records are counted per quarter second over the longest hint given.
const (
	backlogSlot  = 250 * time.Millisecond
	backlogSlots = int64(maxRetryAfter / backlogSlot)
)

// The Retry-After given is between these: a second is the protocol's
// unit, and past a minute a publisher's own back-off is as good a guess.
const (
	minRetryAfter = time.Second
	maxRetryAfter = time.Minute
)

func newBacklog(now func() time.Time) *backlog {
	return &backlog{now: now, start: now()}
}

// sent counts a record of n bytes handed to the producer, and returns the
// slot to give done.
func (b *backlog) sent(n int64) int64 {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	b.sentIn[b.newest%backlogSlots]++
	b.bytes += n
	return b.newest
}

// done counts out a record of n bytes sent in slot.
func (b *backlog) done(slot, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if slot <= b.newest-backlogSlots {
		b.older--
	} else {
		b.sentIn[slot%backlogSlots]--
	}
	b.bytes -= n
}

// advance makes the slot of now the newest; the records of the slots it
// reuses are older than the oldest slot from then on.
func (b *backlog) advance(now time.Time) {
	slot := int64(now.Sub(b.start) / backlogSlot)
	for s := b.newest + 1; s <= slot && s <= b.newest+backlogSlots; s++ {
		b.older += b.sentIn[s%backlogSlots]
		b.sentIn[s%backlogSlots] = 0
	}
	b.newest = max(b.newest, slot)
}

// retryAfter is how long the oldest pending record has waited, to the
// start of its slot; at least minRetryAfter, at most maxRetryAfter.
func (b *backlog) retryAfter() time.Duration {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	if b.older > 0 {
		return maxRetryAfter
	}
	for s := max(0, b.newest-backlogSlots+1); s <= b.newest; s++ {
		if b.sentIn[s%backlogSlots] > 0 {
			waited := now.Sub(b.start.Add(time.Duration(s) * backlogSlot))
			return min(max(waited, minRetryAfter), maxRetryAfter)
		}
	}
	return minRetryAfter
}

// pendingBytes is what the producer holds for the edge.
func (b *backlog) pendingBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytes
}
