package decide

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The member shows only live claims: a laptop whose ONLINE expired before
// the phone spoke does not count, and the member goes unknown when the
// phone's claim does.
func TestDevicesDeriveFromLiveClaims(t *testing.T) {
	s := testenv.Shipped(t, "presence")
	p := For(s)
	var e Entity
	laptop := deviceEvent("l1", "laptop", 1, "ONLINE", 1_000, 61_000)
	phone := deviceEvent("p1", "phone", 1, "AWAY", 3_600_000, 0)
	for _, ev := range []Event{laptop, phone} {
		if d := p.Decide(&e, ev).Decisions[0]; !d.Applied() {
			t.Fatalf("%s: %s", ev.EventID, d.Outcome)
		}
	}
	state, expires, err := p.PublicState(&e, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(state, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["presence"] != "AWAY" || doc["user_id"] != "alice" {
		t.Errorf("member state %s, want AWAY: the laptop's ONLINE expired", state)
	}
	// The phone had no expires_at: its timestamp plus the stream's TTL.
	if want := int64(3_600_000 + 300_000); expires != want {
		t.Errorf("member expires_at_ms %d, want %d", expires, want)
	}
	if e.Devices["laptop"].ExpiresAtMs != 61_000 {
		t.Errorf("laptop expires_at_ms %d, want the payload's 61000", e.Devices["laptop"].ExpiresAtMs)
	}
}

// deviceEvent is a decoded presence event about one device at clock ms
// (occurred and received); expiresAt 0 leaves it to the TTL.
func deviceEvent(id, device string, version int64, status string, clock, expiresAt int64) Event {
	return Event{
		Fields: envelope.Fields{Key: "alice", EventID: id, Version: version, HasVersion: true, OccurredAtMs: clock, ExpiresAtMs: expiresAt},
		Body: testenv.Presence{EventID: id, User: "alice", Device: device, Status: status, Version: version,
			Timestamp: clock / 1000, ExpiresAt: expiresAt / 1000}.Body(),
		ReceivedAtMs: clock,
		Device:       device, Value: status,
	}
}

// A new device beyond limits.devices evicts the row that expired first,
// else the one updated longest ago.
func TestDevicesAreBounded(t *testing.T) {
	s := testenv.Shipped(t, "presence")
	s.Limits.Devices = 2
	p := For(s)
	var e Entity
	for _, ev := range []Event{
		deviceEvent("a", "d1", 1, "ONLINE", 1_000, 5_000),
		deviceEvent("b", "d2", 1, "ONLINE", 2_000, 0),
		deviceEvent("c", "d3", 1, "ONLINE", 6_000, 0), // d1 expired at 5000
	} {
		p.Decide(&e, ev)
	}
	if got := slices.Sorted(maps.Keys(e.Devices)); !slices.Equal(got, []string{"d2", "d3"}) {
		t.Fatalf("devices %v, want d2 d3: the expired d1 goes first", got)
	}
	p.Decide(&e, deviceEvent("d", "d4", 1, "ONLINE", 7_000, 0))
	if got := slices.Sorted(maps.Keys(e.Devices)); !slices.Equal(got, []string{"d3", "d4"}) {
		t.Fatalf("devices %v, want d3 d4: none expired, so the oldest update goes", got)
	}
}

// State versions: an entity stored before revisions existed continues
// above its last state version; a change that carries a higher version
// jumps to it; any other applied change (a device row) still moves it up.
func TestStateVersionsGrowWithEveryAppliedChange(t *testing.T) {
	var e Entity
	if err := json.Unmarshal([]byte(`{"applied":true,"version":844,"state":{"presence":"ONLINE"},"recent":["a"]}`), &e); err != nil {
		t.Fatal(err)
	}
	p := For(testenv.Shipped(t, "presence"))
	want := []int64{845, 846, 900}
	for i, ev := range []Event{
		deviceEvent("l1", "laptop", 1, "ONLINE", 1_000, 0), // a device's own version 1
		deviceEvent("l2", "laptop", 2, "AWAY", 2_000, 0),
		latestEvent("m900", 900),
	} {
		d := p.Decide(&e, ev).Decisions[0]
		if !d.Applied() {
			t.Fatalf("%s: %s", ev.EventID, d.Outcome)
		}
		if rev := e.Revision(); rev != want[i] {
			t.Errorf("%s: state version %d, want %d", ev.EventID, rev, want[i])
		}
	}
}
