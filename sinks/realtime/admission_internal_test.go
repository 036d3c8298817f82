package realtime

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A crowd of clients arriving at once at a bridge's accept rate: each
// refused client comes back when its Retry-After says (plus up to a
// second of its own jitter), as the page does. Every client gets in, in
// about the time the rate takes to let the crowd through; the refused
// are told times that spread them at the rate (never more than the rate
// and the burst in any second up to a given one), and every Retry-After
// is a whole number of seconds from 1 to 60.
func TestRefusedClientsAreSpreadAndGetIn(t *testing.T) {
	testenv.FewerChecks(t, 30)
	rapid.Check(t, func(rt *rapid.T) {
		perSec := rapid.IntRange(10, 500).Draw(rt, "accept rate")
		burst := rapid.IntRange((perSec+1)/2, 2*perSec).Draw(rt, "burst")
		crowd := rapid.IntRange(1, 1000).Draw(rt, "clients")
		a := newAdmission(config.Bridge{MaxConnections: crowd, MaxConnectionsPerUser: crowd, MaxStreamsPerToken: crowd, AcceptRate: float64(perSec), AcceptBurst: burst})
		start := time.Unix(1_700_000_000, 0)
		jitter := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "jitter seed"), 0))
		a.jitter = func(n time.Duration) time.Duration { return time.Duration(jitter.Int64N(int64(n))) }
		// The arrivals to come, by when; everyone arrives at start.
		type arrival struct {
			at time.Time
			n  int
		}
		pending := []arrival{{start, crowd}}
		var last time.Time
		refusals, firstRound := 0, map[time.Duration]int{}
		for len(pending) > 0 {
			next := 0
			for i, p := range pending {
				if p.at.Before(pending[next].at) {
					next = i
				}
			}
			p := pending[next]
			pending = append(pending[:next], pending[next+1:]...)
			for range p.n {
				r := a.enter("u", "token", p.at)
				if r == nil {
					last = p.at
					continue
				}
				refusals++
				if r.status != http.StatusServiceUnavailable || r.reason != refusedBusy {
					rt.Fatalf("refused %d %s, want 503 busy", r.status, r.reason)
				}
				if r.retryAfter < time.Second || r.retryAfter > maxRetryAfter || r.retryAfter%time.Second != 0 {
					rt.Fatalf("Retry-After %s", r.retryAfter)
				}
				if p.at.Equal(start) {
					firstRound[r.retryAfter]++
				}
				pending = append(pending, arrival{p.at.Add(r.retryAfter + time.Duration(jitter.Int64N(int64(time.Second)))), 1})
			}
		}
		// Told in the first round: no more than the rate lets in by then,
		// up to the minute the promises reach (a larger crowd is told
		// times spread evenly over the minute).
		told, withinMinute := 0, crowd <= perSec*int(maxRetryAfter/time.Second)
		for s := time.Second; s <= maxRetryAfter && withinMinute; s += time.Second {
			told += firstRound[s]
			if limit := perSec*int(s/time.Second+1) + 1; told > limit && s < maxRetryAfter {
				rt.Fatalf("%d clients told to come back within %s at %d a second", told, s, perSec)
			}
		}
		// Everyone got in, at about the rate: the crowd beyond the burst
		// takes (crowd-burst)/rate, and the clients' own jitter and the
		// whole seconds of Retry-After add a few. A burst below a second's
		// worth (half of it here) wastes the bucket's tokens while
		// returning clients clump within their second, and so does a rate
		// of a few a second, where the whole seconds are coarse: up to
		// half of the rate is then lost.
		took, factor := last.Sub(start), 1.1
		if burst < perSec || perSec < 20 {
			factor = 2
		}
		if bound := time.Duration(factor*float64(max(0, crowd-burst))/float64(perSec)*float64(time.Second)) + 3*time.Second; took > bound {
			rt.Fatalf("%d clients at %d/s (burst %d) took %s to get in, over %s", crowd, perSec, burst, took, bound)
		}
		if withinMinute && refusals > 4*crowd {
			rt.Fatalf("%d refusals for %d clients", refusals, crowd)
		}
	})
}

// The caps: a token's streams over bridge.max_streams_per_token and a
// user's over bridge.max_connections_per_user are 429, the bridge's over
// bridge.max_connections 503, none spends the bucket, and a stream that
// ends frees its place.
func TestCapsRefuseAndFree(t *testing.T) {
	a := newAdmission(config.Bridge{MaxConnections: 3, MaxConnectionsPerUser: 2, MaxStreamsPerToken: 1, AcceptRate: 1000, AcceptBurst: 4})
	now := time.Unix(1_700_000_000, 0)
	for _, s := range [][2]string{{"ann", "ann-1"}, {"ann", "ann-2"}, {"ben", "ben-1"}} {
		if r := a.enter(s[0], s[1], now); r != nil {
			t.Fatalf("%s refused: %+v", s, r)
		}
	}
	if r := a.enter("ben", "ben-1", now); r == nil || r.status != http.StatusTooManyRequests || r.reason != refusedToken {
		t.Fatalf("over the token's cap: %+v, want 429 too_many_streams", r)
	}
	if r := a.enter("cat", "cat-1", now); r == nil || r.status != http.StatusServiceUnavailable || r.reason != refusedFull {
		t.Fatalf("over the bridge's cap: %+v, want 503 full", r)
	}
	a.leave("ben", "ben-1")
	if r := a.enter("ann", "ann-3", now); r == nil || r.status != http.StatusTooManyRequests || r.reason != refusedUser {
		t.Fatalf("over the user's cap: %+v, want 429", r)
	}
	if r := a.enter("cat", "cat-1", now); r != nil {
		t.Fatalf("cat after ben left: %+v", r)
	}
	// Four of the burst's tokens went to four admissions; refusals took
	// none, so the burst is spent only now.
	a.leave("cat", "cat-1")
	if r := a.enter("cat", "cat-1", now); r == nil || r.reason != refusedBusy {
		t.Fatalf("the fifth in the same instant with a burst of 4: %+v, want busy", r)
	}
	if len(a.perUser.open) != 1 || a.perUser.open["ann"] != 2 || a.total.open[""] != 2 || len(a.perToken.open) != 2 {
		t.Fatalf("open: %v, %v, %v", a.perUser.open, a.total.open, a.perToken.open)
	}
}
