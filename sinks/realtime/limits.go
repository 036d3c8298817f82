package realtime

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/driftguard/driftguard/internal/connlimit"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/source"
)

// publicLimits are what the bridge's public listener holds each source
// to, before any token is looked at: its connections
// (bridge.max_tcp_connections and …_per_source, the one idle the longest
// closed at the cap) and its requests a second (bridge.source_rate). The
// limits per token and per user are admission's.
type publicLimits struct {
	trusted []netip.Prefix
	conns   *connlimit.Limit
	rate    *buckets
	limited prometheus.Counter
}

func (b *Bridge) newPublicLimits() (*publicLimits, error) {
	trusted, err := b.cfg.TrustedPrefixes()
	if err != nil {
		return nil, err
	}
	l := &publicLimits{
		trusted: trusted,
		conns:   connlimit.New(b.cfg.MaxTCPConnections, b.cfg.MaxTCPConnectionsPerSource, trusted),
		rate:    newBuckets(b.cfg.SourceRate, b.now),
		limited: prometheus.NewCounter(prometheus.CounterOpts{Name: "driftguard_bridge_rate_limited_total",
			Help: "Requests of the public port answered 429 rate_limited: their source was over bridge.source_rate."}),
	}
	b.ops.Registry.MustRegister(append(l.conns.Collectors("bridge", "bridge.max_tcp_connections"), l.limited)...)
	return l, nil
}

// listen is ln under the connection caps.
func (l *publicLimits) listen(ln net.Listener) net.Listener { return l.conns.Listen(ln) }

// perSource answers 429 rate_limited to a request whose source is over
// its rate, and closes its connection: a client that keeps asking is
// made to pay a new connection for each request.
func (l *publicLimits) perSource(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		src := source.Key(source.ClientAddr(r, l.trusted))
		if ok, wait := l.rate.take(src.String()); !ok {
			l.limited.Inc()
			w.Header().Set("Retry-After", retryAfter(wait))
			w.Header().Set("Connection", "close")
			problem.Write(w, http.StatusTooManyRequests, "rate_limited",
				"this address sends more requests than bridge.source_rate allows; come back after Retry-After", nil)
			return
		}
		next.ServeHTTP(w, r)
	})
}
