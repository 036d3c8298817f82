package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// presenceEvent is a presence webhook in the seed's shape, with the
// optional device and expiry.
type presenceEvent struct {
	EventID   string `json:"event_id"`
	UserID    string `json:"user_id"`
	DeviceID  string `json:"device_id,omitempty"`
	Presence  string `json:"presence"`
	Sequence  int64  `json:"sequence_number"`
	Timestamp int64  `json:"timestamp"`
	ExpiresAt int64  `json:"expires_at,omitempty"`
}

var statuses = []string{"ONLINE", "BUSY", "AWAY", "OFFLINE"}

// presenceVersions returns n claims of ev's member, or of its device, from
// version ev.Sequence on, in order, a second apart from ev.Timestamp, each
// with its own event id and a presence drawn at random. Each expires as
// long after its timestamp as ev does (never, when ev has no expires_at).
func presenceVersions(rng *rand.Rand, ev presenceEvent, n int) []delivery {
	who := ev.UserID
	if ev.DeviceID != "" {
		who = ev.DeviceID
	}
	out := make([]delivery, n)
	for i := range out {
		e := ev
		e.Sequence += int64(i)
		e.Timestamp += int64(i)
		if e.ExpiresAt != 0 {
			e.ExpiresAt += int64(i)
		}
		e.EventID = demoID(rng, fmt.Sprintf("%s-v%d", who, e.Sequence))
		e.Presence = statuses[rng.IntN(len(statuses))]
		out[i] = newDelivery(e.EventID, e.UserID, e.Sequence, e.Presence, e)
	}
	return out
}

// How long a demo device's claims last, in seconds after their timestamp:
// a live device's outlast the wait for its next round; the last claim
// before a device goes quiet is short, so the page shows it gray within a
// minute, and the silence is longer still.
const (
	presenceLife      = 60 // plus up to 30
	presenceQuietLife = 20 // plus up to 20
	presenceQuiet     = 60 // plus up to 60
)

// presenceDemo is the demo team's presence, a row per device: each round
// every device that is not quiet moves a version or two on, and the round
// is delivered shuffled and partly twice (so some versions come out stale
// and some duplicate). Each round one device goes quiet while fewer than a
// quarter are, and comes back when its silence is over.
type presenceDemo struct {
	rng     *rand.Rand
	devices []*demoDevice
}

// demoDevice is one device of a team member.
type demoDevice struct {
	user, id string
	// next is its next version.
	next int64
	// quietUntil: it sends nothing before then.
	quietUntil time.Time
}

// newPresenceDemo starts every device's versions at now in unix seconds:
// a device moves on less than a version a second, so a demo restarted
// against a broker that kept its topics goes on from above the last run's
// versions instead of being stale.
func newPresenceDemo(rng *rand.Rand, now time.Time) *presenceDemo {
	p := &presenceDemo{rng: rng}
	for _, m := range demoTeam {
		for _, id := range m.devices {
			p.devices = append(p.devices, &demoDevice{user: m.user, id: id, next: now.Unix()})
		}
	}
	return p
}

func (p *presenceDemo) next(now time.Time) []delivery {
	var live []*demoDevice
	for _, d := range p.devices {
		if !now.Before(d.quietUntil) {
			live = append(live, d)
		}
	}
	var quiet *demoDevice
	if len(p.devices)-len(live) < len(p.devices)/4 && len(live) > 0 {
		quiet = live[p.rng.IntN(len(live))]
	}
	var claims []delivery
	for _, d := range live {
		n := 1 + p.rng.IntN(2)
		life := presenceLife + p.rng.Int64N(30)
		if d == quiet {
			life = presenceQuietLife + p.rng.Int64N(20)
			d.quietUntil = now.Add(time.Duration(presenceQuiet+p.rng.IntN(60)) * time.Second)
		}
		ts := now.Unix() - int64(n-1)
		claims = append(claims, presenceVersions(p.rng, presenceEvent{UserID: d.user, DeviceID: d.id, Sequence: d.next, Timestamp: ts, ExpiresAt: ts + life}, n)...)
		d.next += int64(n)
	}
	return disorder(p.rng, claims, 0.3)
}
