package realtime_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/testenv"
)

// A snapshot, then the events from its cursor: every change after it,
// once, with ids that resume where they stand.
func TestSnapshotThenEvents(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "presence")
	for i := range 10 {
		e.publish("presence", fmt.Sprintf("u%d", i), 1, `{"presence":"ONLINE"}`)
	}
	tok := e.token("alice", "presence")
	testenv.WaitFor(t, e.ctx, "ten entities", func() bool {
		_, ents := e.snapshot("presence", tok, 3)
		return len(ents) == 10
	})
	cursor, ents := e.snapshot("presence", tok, 3)
	for i, ent := range ents {
		if want := fmt.Sprintf("u%d", i); ent.Key != want || ent.Version != 1 {
			t.Fatalf("entity %d: %+v, want %s at 1", i, ent, want)
		}
	}
	s, status := e.open(e.ctx, "presence", tok, cursor, "")
	if status != http.StatusOK {
		t.Fatalf("events: %d", status)
	}
	defer s.close()
	e.publish("presence", "u3", 2, `{"presence":"AWAY"}`)
	e.publish("presence", "u3", 1, `{"presence":"STALE"}`) // lower: never sent
	e.publish("presence", "u4", 2, `{"presence":"BUSY"}`)
	var last string
	for _, want := range []string{"u3@2", "u4@2"} {
		ev, _ := s.next(t, 10*time.Second)
		var ent entityJSON
		if err := json.Unmarshal([]byte(ev.data), &ent); err != nil || ev.event != "state" {
			t.Fatalf("event %+v: %v", ev, err)
		}
		if got := fmt.Sprintf("%s@%d", ent.Key, ent.Version); got != want {
			t.Fatalf("event %s, want %s", got, want)
		}
		last = ev.id
	}
	s.close()
	// Resuming from the last id sends only what came after it.
	e.publish("presence", "u5", 2, `{"presence":"AWAY"}`)
	s2, status := e.open(e.ctx, "presence", tok, last, "")
	if status != http.StatusOK {
		t.Fatalf("resume: %d", status)
	}
	defer s2.close()
	ev, _ := s2.next(t, 10*time.Second)
	var ent entityJSON
	_ = json.Unmarshal([]byte(ev.data), &ent)
	if ent.Key != "u5" || ent.Version != 2 {
		t.Fatalf("after resuming: %s", ev.data)
	}
}
