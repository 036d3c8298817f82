package realtime

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/driftguard/driftguard/internal/config"
)

// buckets limit events per key (a user, a conversation) with a token
// bucket each: rate tokens a second, up to burst. A bucket that has
// refilled is the same as none, so the buckets held are only those of
// keys active in the last burst/rate seconds: they are swept out once
// the map has doubled since the last sweep.
type buckets struct {
	rate, burst float64
	now         func() time.Time

	mu        sync.Mutex
	held      map[string]*bucket
	sweepOver int
}

// bucket is one key's tokens as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

// minSweep is the fewest buckets held before any is swept.
const minSweep = 1024

// newBuckets returns the buckets of limit, nil when it is off.
func newBuckets(limit config.TokenBucket, now func() time.Time) *buckets {
	if !limit.On() {
		return nil
	}
	return &buckets{rate: limit.Rate, burst: float64(max(1, limit.Burst)), now: now,
		held: map[string]*bucket{}, sweepOver: minSweep}
}

// take takes a token of key's bucket; when there is none, ok is false and
// wait is how long until there is one. Nil buckets allow everything.
func (b *buckets) take(key string) (ok bool, wait time.Duration) {
	if b == nil {
		return true, 0
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.held[key]
	if k == nil {
		b.sweep(now)
		k = &bucket{tokens: b.burst, at: now}
		b.held[key] = k
	}
	k.refill(now, b.rate, b.burst)
	if k.tokens < 1 {
		// Rounded up: a bucket a hair short of a token (floating point)
		// must not name a wait of 0.
		return false, max(1, time.Duration(math.Ceil((1-k.tokens)/b.rate*float64(time.Second))))
	}
	k.tokens--
	return true, 0
}

// give returns a token taken from key's bucket, for an event another
// limit refused.
func (b *buckets) give(key string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if k := b.held[key]; k != nil {
		k.tokens = min(b.burst, k.tokens+1)
	}
}

func (k *bucket) refill(now time.Time, rate, burst float64) {
	if d := now.Sub(k.at); d > 0 {
		k.tokens = min(burst, k.tokens+d.Seconds()*rate)
		k.at = now
	}
}

// sweep forgets the full buckets once the map has doubled since the last
// sweep, so that the cost of sweeping stays a constant per key added.
func (b *buckets) sweep(now time.Time) {
	if len(b.held) < b.sweepOver {
		return
	}
	for key, k := range b.held {
		if k.refill(now, b.rate, b.burst); k.tokens >= b.burst {
			delete(b.held, key)
		}
	}
	b.sweepOver = max(minSweep, 2*len(b.held))
}

// size is how many buckets are held.
func (b *buckets) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// retryAfter is a wait in whole seconds, rounded up, at least 1, for the
// Retry-After header.
func retryAfter(wait time.Duration) string {
	return strconv.FormatInt(max(1, int64(math.Ceil(wait.Seconds()))), 10)
}
