package devmode

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/driftguard/driftguard/internal/webhook"
)

// Delivery is one webhook as a publisher sends it.
type Delivery struct {
	ID      string
	User    string
	Version int64
	Status  string
	Body    []byte
}

var statuses = []string{"ONLINE", "BUSY", "AWAY", "OFFLINE"}

// PresenceBody is a presence webhook body in the seed's shape.
func PresenceBody(id, user string, version int64, status string, ts int64) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"user_id":%q,"presence":%q,"sequence_number":%d,"timestamp":%d}`,
		id, user, status, version, ts)
}

// PresenceHistory returns n versions of user's presence from version
// first, in order, each with its own event id.
func PresenceHistory(rng *rand.Rand, user string, first int64, n int) []Delivery {
	out := make([]Delivery, n)
	for i := range out {
		v := first + int64(i)
		id := fmt.Sprintf("%s-v%d-%08x", user, v, rng.Uint32())
		status := statuses[rng.IntN(len(statuses))]
		out[i] = Delivery{ID: id, User: user, Version: v, Status: status, Body: PresenceBody(id, user, v, status, 1_700_000_000+v)}
	}
	return out
}

// Disorder shuffles deliveries and repeats some of them, as retrying
// publishers and queues do: each delivery is sent once and, with
// probability dupRate, once more.
func Disorder(rng *rand.Rand, in []Delivery, dupRate float64) []Delivery {
	out := append([]Delivery(nil), in...)
	for _, d := range in {
		if rng.Float64() < dupRate {
			out = append(out, d)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// demo sends presence rounds to ingest: each round every demo user moves a
// few versions on, delivered shuffled and partly twice.
type demo struct {
	url    string
	secret string
	log    *slog.Logger
}

const (
	demoUsers    = 8
	demoPerRound = 4
	demoPace     = 40 * time.Millisecond
)

func (d *demo) Name() string { return "dev demo traffic" }

func (d *demo) Run(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	pub := &webhook.Publisher{URL: d.url, Secret: d.secret}
	next := make([]int64, demoUsers)
	for i := range next {
		next[i] = 1
	}
	for round := 0; ; round++ {
		var batch []Delivery
		for u := range demoUsers {
			batch = append(batch, PresenceHistory(rng, fmt.Sprintf("user-%d", u+1), next[u], demoPerRound)...)
			next[u] += demoPerRound
		}
		for _, del := range Disorder(rng, batch, 0.3) {
			resp, err := pub.Post(ctx, del.ID, del.Body)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil || resp.Status != 202 {
				d.log.Warn("demo webhook not accepted", "status", resp.Status, "err", err, "problem", string(resp.Body))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(demoPace):
			}
		}
	}
}
