package main

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/internal/record"
)

// Mix shapes the presence events a run preloads: members with a few
// devices each, some far busier than others, whose webhooks arrive out of
// order, retried under the same id and now and then re-sent under a new
// one, as publishers do.
type Mix struct {
	// Events is how many deliveries the input holds.
	Events int `json:"events"`
	// Users is how many members publish; their activity is Zipf-skewed.
	Users int `json:"users"`
	// Duplicates is the share of events delivered once more under the
	// same event id (a publisher's retry), some deliveries later.
	Duplicates float64 `json:"duplicates"`
	// Resends is the share of events sent again under a new event id
	// (a publisher that lost track): stale when they arrive.
	Resends float64 `json:"resends"`
	// Window is the permutation window: a delivery may overtake up to
	// Window-1 deliveries sent before it.
	Window int `json:"window"`
	// RetryAfter bounds how many deliveries later a retry or resend comes.
	RetryAfter int `json:"retry_after"`
	// Seed makes the mix reproducible.
	Seed uint64 `json:"seed"`
}

// DefaultMix is the mix of a full run.
func DefaultMix(events int) Mix {
	return Mix{Events: events, Users: 5000, Duplicates: 0.08, Resends: 0.03, Window: 64, RetryAfter: 5000, Seed: 15}
}

// Delivery is one webhook in the input, in delivery order.
type Delivery struct {
	User     string
	EventID  string
	Version  int64
	Presence string
	Body     []byte
	// Expected is what the presence rules decide for it.
	Expected record.Result
}

// Expected is what deciding an input must leave: counts per outcome and
// each member's last applied presence.
type Expected struct {
	Outcomes map[record.Result]int
	Final    map[string]model.Presence
}

var presences = []string{"ONLINE", "BUSY", "AWAY", "OFFLINE"}

// devices are the clients a member publishes from; the claims are the
// member's (no device_id): one sequence per member, so its devices race
// each other, which is where most stale events come from.
var devices = []string{
	`{"app":"desktop","version":"4.12.3","os":"macOS 14.5"}`,
	`{"app":"mobile","version":"4.11.0","os":"iOS 17.5"}`,
	`{"app":"web","version":"2024.06.1","os":"Chrome 126"}`,
}

var statusTexts = []string{"", "In a meeting until 15:30", "Focus time", "Commuting", "On call this week"}

// Generate returns the deliveries of m in delivery order, each with the
// outcome the rules give it, and what they leave.
func Generate(m Mix) ([]Delivery, Expected) {
	rng := rand.New(rand.NewPCG(m.Seed, uint64(m.Events)))
	zipf := rand.NewZipf(rng, 1.07, 4, uint64(m.Users-1))
	type slot struct {
		at int64 // the delivery's place before the permutation window
		d  Delivery
	}
	versions := make([]int64, m.Users)
	userDevices := make([]int, m.Users)
	for u := range userDevices {
		userDevices[u] = 1 + rng.IntN(len(devices))
	}
	slots := make([]slot, 0, m.Events+m.Events/8)
	const baseTimestamp = 1_718_900_000
	for t := int64(0); len(slots) < m.Events; t++ {
		u := int(zipf.Uint64())
		// Mostly the next version; now and then a gap (a lost webhook).
		versions[u] += 1 + int64(rng.IntN(20)/19)*int64(1+rng.IntN(3))
		ts := baseTimestamp + t/100
		status := statusTexts[rng.IntN(len(statusTexts))]
		d := Delivery{
			User: fmt.Sprintf("usr_%05d", u), EventID: fmt.Sprintf("evt_%016x", rng.Uint64()),
			Version: versions[u], Presence: presences[rng.IntN(len(presences))],
		}
		d.Body = presenceBody(d, ts, devices[rng.IntN(userDevices[u])], status)
		jitter := func() int64 { return int64(rng.IntN(m.Window)) }
		slots = append(slots, slot{t + jitter(), d})
		if rng.Float64() < m.Duplicates {
			slots = append(slots, slot{t + int64(1+rng.IntN(m.RetryAfter)), d})
		}
		if rng.Float64() < m.Resends {
			r := d
			r.EventID = fmt.Sprintf("evt_%016x", rng.Uint64())
			r.Body = presenceBody(r, ts, devices[rng.IntN(userDevices[u])], status)
			slots = append(slots, slot{t + int64(1+rng.IntN(m.RetryAfter)), r})
		}
	}
	slices.SortStableFunc(slots, func(a, b slot) int { return int(a.at - b.at) })
	out := make([]Delivery, m.Events)
	for i := range out {
		out[i] = slots[i].d
	}
	return out, decideAll(out)
}

func presenceBody(d Delivery, ts int64, client, status string) []byte {
	b := fmt.Appendf(nil, `{"event_id":%q,"user_id":%q,"presence":%q,"sequence_number":%d,"timestamp":%d,"expires_at":%d,"client":%s`,
		d.EventID, d.User, d.Presence, d.Version, ts, ts+300, client)
	if status != "" {
		b = fmt.Appendf(b, `,"status_text":%q`, status)
	}
	return append(b, '}')
}

// dedupIDs is the shipped presence stream's limits.dedup_ids: how many
// recent event ids each member's memory holds. Every delivery of a run is
// received within its dedup window (7 days), so the count alone bounds it.
const dedupIDs = 256

// decideAll sets each delivery's expected outcome, per member in
// delivery order: a remembered id is a duplicate, a version not above the
// last applied one stale, anything else applied.
func decideAll(ds []Delivery) Expected {
	type member struct {
		applied bool
		version int64
		recent  []string
	}
	members := map[string]*member{}
	exp := Expected{Outcomes: map[record.Result]int{}, Final: map[string]model.Presence{}}
	for i := range ds {
		d := &ds[i]
		m := members[d.User]
		if m == nil {
			m = &member{}
			members[d.User] = m
		}
		switch {
		case slices.Contains(m.recent, d.EventID):
			d.Expected = record.Duplicate
		case m.applied && d.Version <= m.version:
			d.Expected = record.Stale
		default:
			d.Expected = record.Applied
			m.applied, m.version = true, d.Version
			exp.Final[d.User] = model.Presence{Presence: d.Presence, SequenceNumber: d.Version}
		}
		if d.Expected != record.Duplicate {
			m.recent = append(m.recent, d.EventID)
			if len(m.recent) > dedupIDs {
				m.recent = m.recent[1:]
			}
		}
		exp.Outcomes[d.Expected]++
	}
	return exp
}
