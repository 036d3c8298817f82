package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/testenv"
)

// A second processor instance joins mid-stream and later leaves: partitions
// move twice, and still every delivery gets its outcome, no event is
// applied twice, and the final state is the ordered replay.
func TestProcessorRebalanceLosesAndDoublesNothing(t *testing.T) {
	ctx := testenv.Context(t, 3*time.Minute)

	stream := testenv.UniqueName("presence")
	h := newProcessHarness(t, ctx, "presence", stream, "streams:\n"+presenceStreamYAML(stream))

	// 60 users, each a shuffled, partly duplicated version history.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	var deliveries []delivery
	final := map[string]delivery{}
	for u := range 60 {
		user := fmt.Sprintf("u%02d", u)
		history := presenceHistory(rng, user, 1, 5+rng.IntN(10))
		final[user] = history[len(history)-1]
		deliveries = append(deliveries, disorder(rng, history, 0.3)...)
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	produce := func(ds []delivery) {
		for _, d := range ds {
			h.produce(d.Key, d.Body)
		}
	}
	q := h.count
	third := len(deliveries) / 3

	h.start("first")
	produce(deliveries[:third])
	testenv.WaitFor(t, ctx, "the first third decided", func() bool {
		return q("SELECT count() FROM %s.events WHERE stream = '%s'") >= uint64(third)
	})
	second := h.start("second") // joins: partitions move
	produce(deliveries[third : 2*third])
	testenv.WaitFor(t, ctx, "two thirds decided", func() bool {
		return q("SELECT count() FROM %s.events WHERE stream = '%s'") >= uint64(2*third)
	})
	if err := second.Process.Signal(syscall.SIGTERM); err != nil { // leaves: they move back
		t.Fatal(err)
	}
	_, _ = second.Process.Wait()
	produce(deliveries[2*third:])
	testenv.WaitFor(t, ctx, "every delivery decided", func() bool {
		return q("SELECT uniqExact(input_partition, input_offset) FROM %s.events WHERE stream = '%s'") == uint64(len(deliveries))
	})

	if n := q("SELECT count() FROM (SELECT event_id FROM %s.events WHERE stream = '%s' AND outcome = 'applied' GROUP BY event_id HAVING count() > 1)"); n != 0 {
		t.Errorf("%d events applied more than once", n)
	}
	testenv.WaitFor(t, ctx, "a state row per user", func() bool {
		return q("SELECT count() FROM %s.entity_state FINAL WHERE stream = '%s'") == uint64(len(final))
	})
	// The sink reads the state topic apart from the outcomes topic, so a
	// user's last state row may land after every decision has. Versions only
	// grow: give their sum a minute to reach the replay's, then compare each
	// row, which names any user that never got there.
	var versions uint64
	for _, want := range final {
		versions += uint64(want.Version)
	}
	settle, cancel := context.WithTimeout(ctx, time.Minute)
	testenv.Poll(settle, func() bool {
		return q("SELECT sum(version) FROM %s.entity_state FINAL WHERE stream = '%s'") == versions
	})
	cancel()
	rows, err := h.conn.Query(ctx, fmt.Sprintf("SELECT entity_key, version, state FROM %s.entity_state FINAL WHERE stream = '%s'", h.cfg.ClickHouse.Database, stream))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, state string
		var version uint64
		if err := rows.Scan(&key, &version, &state); err != nil {
			t.Fatal(err)
		}
		if want := final[key]; version != uint64(want.Version) || !testenv.SameJSON([]byte(state), want.Body) {
			t.Errorf("%s ends at %d %s; the ordered replay at %d %s", key, version, state, want.Version, want.Body)
		}
	}
}
