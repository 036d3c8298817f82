package decidetest

import (
	"encoding/json"
	"fmt"
	"slices"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// claim is one presence event of the model.
type claim struct {
	id, row, status             string
	version                     int64
	atMs, occurredMs, expiresMs int64
}

// Presence draws a history of the shipped presence stream s (latest, with
// device rows) for user key: versions of the member and of up to three
// devices, each with its own clocks, redelivered and retried in any order.
// The model: no event, and no row's version, applies twice; and the user
// ends in the state computed from each row's highest version alone.
func Presence(t *rapid.T, s *config.Stream, key string) History {
	rows := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"", "laptop", "phone", "tablet"}), 1, 4, rapid.ID[string]).Draw(t, "rows")
	claims := map[string]claim{} // by event id, retries included
	top := map[string]claim{}    // each row's highest version
	var originals [][]byte
	var retries [][]byte
	for _, row := range rows {
		version := rapid.Int64Range(0, 5).Draw(t, "first version")
		for i := range rapid.IntRange(1, 6).Draw(t, "events") {
			version += rapid.Int64Range(1, 3).Draw(t, "step")
			c := claim{id: fmt.Sprintf("%s-%s-%d", key, row, i), row: row, version: version,
				status: rapid.SampledFrom(s.Devices.Rank).Draw(t, "presence"),
				atMs:   rapid.Int64Range(1, 10_000).Draw(t, "clock s") * 1000}
			c.occurredMs = c.atMs
			if rapid.Bool().Draw(t, "expires_at in the payload") {
				c.expiresMs = c.atMs + rapid.Int64Range(-5_000, 5_000).Draw(t, "lifetime s")*1000
			}
			retry := c
			retry.id += "-retry"
			claims[c.id], claims[retry.id] = c, retry
			top[row] = c
			originals = append(originals, presenceBody(key, c))
			retries = append(retries, presenceBody(key, retry))
		}
	}
	delivered := deliveries(t, originals, func(i int) []byte { return retries[i] })
	var ids []string
	for _, b := range delivered {
		ids = append(ids, idOf(t, s, b))
	}
	bodies := map[string][]byte{}
	for i := range originals {
		bodies[idOf(t, s, originals[i])], bodies[idOf(t, s, retries[i])] = originals[i], retries[i]
	}
	h := History{Key: key, Steps: steps(delivered, func(i int) int64 { return claims[ids[i]].atMs })}
	h.Check = func(t *rapid.T, outs []Outcome, last State) {
		everyDecided(t, ids, outs)
		applied := map[string]int{}
		final := map[string]claim{} // each row's applied top version, as delivered
		for _, o := range outs {
			if o.Outcome != record.Applied {
				continue
			}
			c := claims[o.EventID]
			applied[o.EventID]++
			applied[fmt.Sprintf("%s@%d", c.row, c.version)]++
			if c.version == top[c.row].version {
				final[c.row] = c
			}
		}
		for what, n := range applied {
			if n > 1 {
				t.Fatalf("%s applied %d times", what, n)
			}
		}
		for _, row := range rows {
			if _, ok := final[row]; !ok {
				t.Fatalf("row %q: its highest version %d never applied", row, top[row].version)
			}
		}
		want, wantExpires := presenceModel(t, s, key, final, bodies)
		if !testenv.SameJSON(last.JSON, want) || last.ExpiresAtMs != wantExpires {
			t.Fatalf("state %s expiring %d; the model gives %s expiring %d", last.JSON, last.ExpiresAtMs, want, wantExpires)
		}
	}
	return h
}

// presenceBody is c as key's webhook; the member's own claim has no
// device_id, and one without expires_at none.
func presenceBody(key string, c claim) []byte {
	return testenv.Presence{EventID: c.id, User: key, Device: c.row, Status: c.status, Version: c.version,
		Timestamp: c.occurredMs / 1000, ExpiresAt: c.expiresMs / 1000}.Body()
}

// presenceModel is the user's public state from each row's last claim:
// the member's own body (or just the user id) with its presence the
// best-ranked among the claims still live when the newest was received,
// and each device's row; without device rows, the member's body.
func presenceModel(t *rapid.T, s *config.Stream, key string, final map[string]claim, bodies map[string][]byte) ([]byte, int64) {
	expiry := func(c claim) int64 {
		if c.expiresMs != 0 {
			return c.expiresMs
		}
		return c.occurredMs + s.TTL.Milliseconds()
	}
	member, hasMember := final[""]
	if len(final) == 1 && hasMember {
		return bodies[member.id], expiry(member)
	}
	doc := map[string]any{"user_id": key}
	if hasMember {
		if err := json.Unmarshal(bodies[member.id], &doc); err != nil {
			t.Fatal(err)
		}
	}
	var newest int64
	for _, c := range final {
		newest = max(newest, c.atMs)
	}
	var live []claim
	for _, c := range final {
		if expiry(c) > newest {
			live = append(live, c)
		}
	}
	if len(live) == 0 {
		for _, row := range sortedKeys(final) {
			live = append(live, final[row])
		}
	}
	rank := s.Devices.Rank
	best := len(rank)
	for _, c := range live {
		best = min(best, slices.Index(rank, c.status))
	}
	var expires int64
	for _, c := range live {
		if slices.Index(rank, c.status) == best {
			expires = max(expires, expiry(c))
		}
	}
	devices := map[string]any{}
	for row, c := range final {
		if row != "" {
			devices[row] = map[string]any{"presence": c.status, "version": c.version, "updated_at_ms": c.atMs, "expires_at_ms": expiry(c)}
		}
	}
	doc["presence"], doc["devices"] = rank[best], devices
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out, expires
}
