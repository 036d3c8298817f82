package ingest

import (
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// refusalLog logs refused webhooks sampled: per reason, at most lines a
// interval (a token bucket, so a burst of lines after a quiet spell and
// then one every interval/lines), and the next line of a reason says how
// many of it were left out since the last. Forged webhooks cost an
// attacker nothing, so one line each would let them fill the disk and
// drown the logs; every refusal is counted in
// driftguard_ingest_rejections_total all the same. Reasons are the edge's
// own names, a bounded set, whatever the requests carry.
type refusalLog struct {
	log   *slog.Logger
	lines int
	every rate.Limit

	mu      sync.Mutex
	reasons map[string]*refusalReason
}

type refusalReason struct {
	limit      *rate.Limiter
	suppressed int64
}

// maxLoggedID bounds the webhook id logged, the limit the schemes
// accept: the header is the sender's, not ours.
const maxLoggedID = 256

func newRefusalLog(log *slog.Logger, lines int, interval time.Duration) *refusalLog {
	if lines <= 0 {
		lines = 10
	}
	if interval <= 0 {
		interval = time.Minute
	}
	return &refusalLog{log: log, lines: lines, every: rate.Every(interval / time.Duration(lines)),
		reasons: map[string]*refusalReason{}}
}

// refused logs, if its reason has room at now, that r was refused with
// status for reason. The line names the source address and the delivery
// id (webhook-id, or X-GitHub-Delivery), never the body or a signature.
func (l *refusalLog) refused(r *http.Request, source netip.Addr, stream string, status int, reason string, now time.Time) {
	l.mu.Lock()
	rr := l.reasons[reason]
	if rr == nil {
		rr = &refusalReason{limit: rate.NewLimiter(l.every, l.lines)}
		l.reasons[reason] = rr
	}
	if !rr.limit.AllowN(now, 1) {
		rr.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := rr.suppressed
	rr.suppressed = 0
	l.mu.Unlock()
	id := headerValue(r.Header, "Webhook-Id")
	if id == "" {
		id = headerValue(r.Header, "X-Github-Delivery")
	}
	if len(id) > maxLoggedID {
		id = id[:maxLoggedID]
	}
	src := "unknown"
	if source.IsValid() {
		src = source.String()
	}
	l.log.Info("webhook refused", "stream", stream, "status", status, "reason", reason,
		"source", src, "webhook_id", id, "suppressed", suppressed)
}
