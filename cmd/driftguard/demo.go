package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/driftguard/driftguard/internal/webhook"
)

// delivery is one webhook as a publisher sends it.
type delivery struct {
	ID      string
	User    string
	Version int64
	Status  string
	Body    []byte
}

var statuses = []string{"ONLINE", "BUSY", "AWAY", "OFFLINE"}

// presenceEvent is a presence webhook in the seed's shape.
type presenceEvent struct {
	EventID   string `json:"event_id"`
	UserID    string `json:"user_id"`
	Presence  string `json:"presence"`
	Sequence  int64  `json:"sequence_number"`
	Timestamp int64  `json:"timestamp"`
}

// presenceHistory returns n versions of user's presence from version
// first, in order, each with its own event id.
func presenceHistory(rng *rand.Rand, user string, first int64, n int) []delivery {
	out := make([]delivery, n)
	for i := range out {
		v := first + int64(i)
		id := fmt.Sprintf("%s-v%d-%08x", user, v, rng.Uint32())
		status := statuses[rng.IntN(len(statuses))]
		body, _ := json.Marshal(presenceEvent{EventID: id, UserID: user, Presence: status, Sequence: v, Timestamp: 1_700_000_000 + v})
		out[i] = delivery{ID: id, User: user, Version: v, Status: status, Body: body}
	}
	return out
}

// disorder shuffles deliveries and repeats some of them, as retrying
// publishers and queues do: each delivery is sent once and, with
// probability dupRate, once more.
func disorder(rng *rand.Rand, in []delivery, dupRate float64) []delivery {
	out := append([]delivery(nil), in...)
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
		var batch []delivery
		for u := range demoUsers {
			batch = append(batch, presenceHistory(rng, fmt.Sprintf("user-%d", u+1), next[u], demoPerRound)...)
			next[u] += demoPerRound
		}
		for _, del := range disorder(rng, batch, 0.3) {
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
