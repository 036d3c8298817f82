package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/driftguard/driftguard/internal/record"
)

// EventType is the type of the webhook the publisher receives.
const EventType = "replay.requested"

// Body is the JSON the publisher receives.
type Body struct {
	Type         string `json:"type"`
	Stream       string `json:"stream"`
	Key          string `json:"key"`
	FromSequence int64  `json:"from_sequence"`
	// RequestedAt is when the processor asked, RFC 3339 in UTC with
	// milliseconds.
	RequestedAt string `json:"requested_at"`
}

// outcome is what became of one delivery.
type outcome struct {
	result   string
	status   int
	attempts int
	detail   string
}

// deliver POSTs r until the publisher answers 2xx (delivered) or another
// 4xx than 429 (refused), retrying after a 5xx, a 429 or no answer with a
// capped, jittered back-off, or the answer's Retry-After when it asks for
// longer, until replay.give_up_after has passed. A zero outcome means ctx
// ended first.
func (l *loop) deliver(ctx context.Context, r *request) outcome {
	body, _ := json.Marshal(Body{
		Type: EventType, Stream: l.stream.Name, Key: string(r.rec.Key), FromSequence: r.req.FirstMissing,
		RequestedAt: time.UnixMilli(r.req.RequestedAtMs).UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	})
	cfg := l.stream.Replay
	giveUp := time.Now().Add(cfg.GiveUpAfter)
	name := l.stream.Name
	for attempt := 1; ; attempt++ {
		l.m.inFlight.WithLabelValues(name).Inc()
		resp, err := l.pub.Post(ctx, r.webhookID, body)
		l.m.inFlight.WithLabelValues(name).Dec()
		if ctx.Err() != nil {
			return outcome{}
		}
		status := resp.Status
		if err != nil {
			status = 0
		}
		switch {
		case err == nil && status >= 200 && status < 300:
			l.m.sent.WithLabelValues(name).Inc()
			return outcome{result: record.ReplayDelivered, status: status, attempts: attempt}
		case err == nil && status != http.StatusTooManyRequests && status < 500:
			l.m.failures.WithLabelValues(name, statusLabel(status)).Inc()
			l.m.refused.WithLabelValues(name).Inc()
			l.log.Warn("the publisher refused a replay request; sent to the DLQ", "key", r.rec.Key, "status", status)
			return outcome{result: record.ReplayRefused, status: status, attempts: attempt,
				detail: fmt.Sprintf("the publisher answered %d", status)}
		}
		l.m.failures.WithLabelValues(name, statusLabel(status)).Inc()
		wait := Backoff(cfg.MinBackoff, cfg.MaxBackoff, attempt, rand.Float64())
		if err == nil {
			// A publisher that says when to come back is taken at its word.
			wait = max(wait, resp.RetryAfter)
		}
		if time.Now().Add(wait).After(giveUp) {
			l.m.giveUps.WithLabelValues(name).Inc()
			last := strconv.Itoa(status)
			if err != nil {
				last = err.Error()
			}
			l.log.Warn("a replay request was not delivered in time; sent to the DLQ", "key", r.rec.Key, "attempts", attempt, "last", last)
			return outcome{result: record.ReplayGaveUp, status: status, attempts: attempt,
				detail: fmt.Sprintf("no 2xx in %d attempts over %s; the last: %s", attempt, cfg.GiveUpAfter, last)}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return outcome{}
		case <-t.C:
		}
	}
}

// statusLabel is the status label of a failure: the code, or "none" for
// a POST that got no answer (refused, reset, timed out).
func statusLabel(status int) string {
	if status == 0 {
		return "none"
	}
	return strconv.Itoa(status)
}

// Backoff is the wait before retry n (1 for the first) between least and
// most: least doubled n-1 times, capped at most, then scaled into its upper
// half by jitter (in [0, 1)), so that relays retrying together spread out
// while a wait never drops below half its step.
func Backoff(least, most time.Duration, n int, jitter float64) time.Duration {
	// Doubled step by step rather than shifted, so that no step overflows.
	step := least
	for i := 1; i < n && step < most; i++ {
		if step > most/2 {
			step = most
			break
		}
		step *= 2
	}
	step = min(step, most)
	return step/2 + time.Duration(jitter*float64(step/2))
}
