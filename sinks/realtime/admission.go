package realtime

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/problem"
)

// Retry-After bounds of a refused stream. A second is the header's unit;
// past a minute a client's own back-off is as good a guess.
const (
	minRetryAfter = time.Second
	maxRetryAfter = time.Minute
	// capRetrySpread is the range the Retry-After of a stream refused at a
	// cap is drawn from: a cap frees as streams end, which no one can
	// foretell, so the refused are spread evenly over it.
	capRetrySpread = 10 * time.Second
)

// Why a stream was refused, as problem types and metric labels.
const (
	refusedBusy = "busy"                 // over bridge.accept_rate: 503
	refusedFull = "full"                 // at bridge.max_connections: 503
	refusedUser = "too_many_connections" // at bridge.max_connections_per_user: 429
	// refusedToken is at bridge.max_streams_per_token: 429.
	refusedToken = "too_many_streams"
)

// admission decides which new SSE streams the bridge takes: at most
// maxTotal open, maxPerUser of one user, maxPerToken on one token, and
// new ones at the accept rate. A refused client is told when to come back, so that a storm of
// reconnects (every client of a restarted bridge at once) is spread over
// the seconds that follow rather than answered in one crowd that comes
// back together.
//
// Each limit is a count of open streams by a key (the bridge's one,
// the user), so that another key (a source address, a token) is another
// streamCount.
type admission struct {
	bucket   *rate.Limiter
	perSec   float64
	mu       sync.Mutex
	total    streamCount
	perUser  streamCount
	perToken streamCount
	// jitter draws a duration in [0, n); rand.N, or a test's.
	jitter func(n time.Duration) time.Duration
	// promised is the latest time a client refused by the rate was told
	// to come back: each refusal is promised the next free 1/rate after
	// the previous one, so the refused come back at the rate the bucket
	// lets in, not all at once.
	promised time.Time
}

func newAdmission(cfg config.Bridge) *admission {
	return &admission{
		bucket: rate.NewLimiter(rate.Limit(cfg.AcceptRate), cfg.AcceptBurst), perSec: cfg.AcceptRate,
		total: streamCount{max: cfg.MaxConnections}, perUser: streamCount{max: cfg.MaxConnectionsPerUser},
		perToken: streamCount{max: cfg.MaxStreamsPerToken},
		jitter:   rand.N[time.Duration],
	}
}

// streamCount counts open streams by key, at most max a key.
type streamCount struct {
	max  int
	open map[string]int
}

func (c *streamCount) full(key string) bool { return c.open[key] >= c.max }

func (c *streamCount) add(key string, n int) {
	if c.open == nil {
		c.open = map[string]int{}
	}
	if c.open[key] += n; c.open[key] <= 0 {
		delete(c.open, key)
	}
}

// refusal is why a stream was not admitted, and when to try again.
type refusal struct {
	status     int
	reason     string
	detail     string
	retryAfter time.Duration
}

// write answers the refusal as problem+json with its Retry-After.
func (r *refusal) write(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(int(r.retryAfter/time.Second)))
	problem.Write(w, r.status, r.reason, r.detail, nil)
}

// enter admits a stream of user on token at now, or says why not; an
// admitted stream is matched by leave(user, token). The caps are looked
// at first, so that a refusal at a cap does not spend the bucket; the
// token's and the user's first, so that a client over its own share hears
// so (429) even when the bridge is full.
func (a *admission) enter(user, token string, now time.Time) *refusal {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.perToken.full(token):
		return &refusal{http.StatusTooManyRequests, refusedToken,
			fmt.Sprintf("the token holds bridge.max_streams_per_token (%d) streams on this bridge; close one first", a.perToken.max), a.spread(capRetrySpread)}
	case a.perUser.full(user):
		return &refusal{http.StatusTooManyRequests, refusedUser,
			fmt.Sprintf("the user holds bridge.max_connections_per_user (%d) streams on this bridge; close one first", a.perUser.max), a.spread(capRetrySpread)}
	case a.total.full(""):
		return &refusal{http.StatusServiceUnavailable, refusedFull,
			fmt.Sprintf("the bridge holds bridge.max_connections (%d) streams; try again later, or another bridge", a.total.max), a.spread(capRetrySpread)}
	case !a.bucket.AllowN(now, 1):
		return &refusal{http.StatusServiceUnavailable, refusedBusy,
			fmt.Sprintf("the bridge takes %g new streams a second (bridge.accept_rate) and more are arriving; come back after Retry-After", a.perSec), a.comeBack(now)}
	}
	a.total.add("", 1)
	a.perUser.add(user, 1)
	a.perToken.add(token, 1)
	return nil
}

// leave gives back an admitted stream of user on token.
func (a *admission) leave(user, token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total.add("", -1)
	a.perUser.add(user, -1)
	a.perToken.add(token, -1)
}

// comeBack is when a client refused by the rate at now should try again:
// the next slot of 1/rate after the last one promised, plus up to a
// second of jitter (Retry-After counts whole seconds, and clients told
// the same second would otherwise come at its start together). Past
// maxRetryAfter no slot is promised: the client is told a time drawn
// evenly from the minute, and comes back with those refused before it.
func (a *admission) comeBack(now time.Time) time.Duration {
	next := a.promised
	if next.Before(now) {
		next = now
	}
	next = next.Add(time.Duration(float64(time.Second) / a.perSec))
	if next.Sub(now) > maxRetryAfter {
		return a.spread(maxRetryAfter)
	}
	a.promised = next
	return wholeSeconds(next.Sub(now) + a.jitter(time.Second))
}

// spread is a Retry-After drawn evenly from minRetryAfter to d.
func (a *admission) spread(d time.Duration) time.Duration {
	return wholeSeconds(minRetryAfter + a.jitter(d-minRetryAfter+time.Second))
}

// wholeSeconds is d rounded down to whole seconds, from minRetryAfter to
// maxRetryAfter.
func wholeSeconds(d time.Duration) time.Duration {
	return min(max(d.Truncate(time.Second), minRetryAfter), maxRetryAfter)
}

// The outcomes of an events request (driftguard_bridge_reconnects_total).
// Every events request resumes from a cursor, a snapshot's or a
// message's id, so each is counted as a reconnect.
const (
	outcomeResumed = "resumed" // caught up and live
	outcomeGone    = "gone"    // 410: the cursor cannot resume
	outcomeReset   = "reset"   // event: reset before it was live
	outcomeRefused = "refused" // 503 or 429: try again later
)

// reconnect follows one events request from its arrival to its outcome.
type reconnect struct {
	m       *admissionMetrics
	stream  string
	arrived time.Time
	ended   bool
}

// end counts the request's outcome, once: the first one stands (a client
// reset after it went live was resumed).
func (r *reconnect) end(outcome string) {
	if r.ended {
		return
	}
	r.ended = true
	r.m.reconnects.WithLabelValues(r.stream, outcome).Inc()
	if outcome == outcomeResumed {
		r.m.liveSeconds.WithLabelValues(r.stream).Observe(time.Since(r.arrived).Seconds())
	}
}

// reconnectOutcome is the outcome of a request answered status before it
// served any event.
func reconnectOutcome(status int) string {
	if status == http.StatusGone {
		return outcomeGone
	}
	return outcomeRefused
}

// admit takes an events request through admission; false once it has
// answered the refusal. An admitted request is matched by leave.
func (b *Bridge) admit(q *request, rec *reconnect) bool {
	r := b.admission.enter(q.user.Subject, q.user.token(), time.Now())
	if r == nil {
		return true
	}
	b.metrics.admission.refused.WithLabelValues(q.stream.cfg.Name, r.reason).Inc()
	rec.end(outcomeRefused)
	r.write(q.w)
	return false
}

// statusWriter records the status of an answer, for the outcome of a
// request answered by code shared with other endpoints.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
