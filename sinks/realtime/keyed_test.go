package realtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// TestFollowingAQuietKeyAcrossTheLog follows one key while the rest of the
// stream changes far more than the log holds: the follower, woken only by
// its key, gets each of its changes once and in order, is never reset for
// the changes of other keys the log dropped, and the id of a change
// resumes right after it.
func TestFollowingAQuietKeyAcrossTheLog(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), presenceAs("presence", func(cfg *config.Config) {
		cfg.Bridge.Window = 4 // 12 changes in the log, over 3 partitions
	}), "presence")
	tok := e.token("ann", "presence")
	cursor, _ := e.snapshot("presence", tok, 10)
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	quiet, status := e.open(ctx, "presence", tok, cursor, "quiet")
	if status != 200 {
		t.Fatalf("events: %d", status)
	}
	busy := int64(0)
	noise := func() {
		last := map[string]int64{}
		for i := range 60 {
			busy++
			key := fmt.Sprintf("busy-%d", i%7)
			e.publish("presence", key, busy, benchState)
			last[key] = busy
		}
		// The bridge reads the partitions side by side: until it has
		// applied all the noise, a change of quiet published next could
		// be applied before some of it, and be evicted by it before the
		// follower takes it (a reset, rightly, with a log this small).
		testenv.WaitFor(t, e.ctx, "the noise applied", func() bool {
			for key, v := range last {
				var ent entityJSON
				if e.get("/v1/streams/presence/entities/"+key, tok, &ent) != 200 || ent.Version != v {
					return false
				}
			}
			return true
		})
	}
	var ids []string
	for v := int64(1); v <= 3; v++ {
		noise()
		e.publish("presence", "quiet", v, benchState)
		ev, ok := quiet.next(t, 20*time.Second)
		var ent entityJSON
		if !ok || ev.event != "state" || json.Unmarshal([]byte(ev.data), &ent) != nil || ent.Key != "quiet" || ent.Version != v {
			t.Fatalf("following quiet, change %d: %+v", v, ev)
		}
		ids = append(ids, ev.id)
	}
	noise()
	// Nothing else came: no other key, no reset.
	e.publish("presence", "quiet", 4, benchState)
	if ev, _ := quiet.next(t, 20*time.Second); ev.event != "state" || !containsVersion(ev.data, 4) {
		t.Fatalf("following quiet, after the noise: %+v", ev)
	}
	quiet.close()

	// Resuming from the second change's id: the third and fourth, once.
	again, status := e.open(ctx, "presence", tok, ids[1], "quiet")
	if status != 200 {
		t.Fatalf("resuming: %d", status)
	}
	defer again.close()
	for _, v := range []int64{3, 4} {
		if ev, _ := again.next(t, 20*time.Second); ev.event != "state" || !containsVersion(ev.data, v) {
			t.Fatalf("resumed from change 2, want version %d: %+v", v, ev)
		}
	}
	e.publish("presence", "quiet", 5, benchState)
	if ev, _ := again.next(t, 20*time.Second); !containsVersion(ev.data, 5) {
		t.Fatalf("resumed, then live: %+v", ev)
	}
}

// containsVersion reports whether an event's data is an Entity of the
// version.
func containsVersion(data string, v int64) bool {
	var ent entityJSON
	return json.Unmarshal([]byte(data), &ent) == nil && ent.Version == v
}

// TestDeliveryLatencyCountsLiveWritesOnly: each change written to a live
// client counts once in driftguard_bridge_delivery_seconds, per client;
// the changes a resuming client is replayed do not.
func TestDeliveryLatencyCountsLiveWritesOnly(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), presenceAs("presence", nil), "presence")
	tok := e.token("ann", "presence")
	cursor, _ := e.snapshot("presence", tok, 10)
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	whole, _ := e.open(ctx, "presence", tok, cursor, "")
	keyed, _ := e.open(ctx, "presence", tok, cursor, "k1")
	defer whole.close()
	defer keyed.close()
	for v := int64(1); v <= 3; v++ {
		e.publish("presence", "k1", v, benchState)
		e.publish("presence", "k2", v, benchState)
	}
	for range 6 {
		whole.next(t, 20*time.Second)
	}
	for range 3 {
		keyed.next(t, 20*time.Second)
	}
	// 6 writes to one client, 3 to the other.
	if n := gathered(t, e, "driftguard_bridge_delivery_seconds"); n != 9 {
		t.Fatalf("%v deliveries counted, want 9", n)
	}
	// A client resuming from the first cursor is replayed the 6 changes,
	// then is live: only what comes after counts.
	again, _ := e.open(ctx, "presence", tok, cursor, "")
	defer again.close()
	for range 6 {
		again.next(t, 20*time.Second)
	}
	e.publish("presence", "k2", 4, benchState)
	for _, s := range []*sse{whole, again} {
		if ev, _ := s.next(t, 20*time.Second); !containsVersion(ev.data, 4) {
			t.Fatalf("after the replay: %+v", ev)
		}
	}
	if n := gathered(t, e, "driftguard_bridge_delivery_seconds"); n != 11 {
		t.Fatalf("%v deliveries counted after a replay of 6 and one live change to two clients, want 11", n)
	}
}
