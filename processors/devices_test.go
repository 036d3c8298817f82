package processors

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/envelope"
)

// A member with a laptop and a phone, each versioned on its own, then a
// claim about the member itself: every outcome, the state records and the
// table through goka.
func TestProcessorPresenceDevices(t *testing.T) {
	tt, names := runTester(t)
	outQ := tt.NewQueueTracker(names.Outcomes)
	stateQ := tt.NewQueueTracker(names.State)
	headers := goka.Headers{envelope.HeaderReceivedAt: []byte("1700000000123")}
	const ts = 1_700_000_000
	deliveries := []struct {
		id, device string
		version    int64
		status     string
		want       string
		gap        int64
		member     string // the member's derived presence after it
	}{
		{"l5", "laptop", 5, "ONLINE", envelope.OutcomeApplied, 0, "ONLINE"},
		{"p2", "phone", 2, "AWAY", envelope.OutcomeApplied, 0, "ONLINE"},
		{"l5", "laptop", 5, "ONLINE", envelope.OutcomeDuplicate, 0, ""},
		{"l4", "laptop", 4, "AWAY", envelope.OutcomeStale, 0, ""},
		{"p4", "phone", 4, "BUSY", envelope.OutcomeApplied, 1, "ONLINE"},
		{"l6", "laptop", 6, "OFFLINE", envelope.OutcomeApplied, 0, "BUSY"},
		{"m100", "", 100, "AWAY", envelope.OutcomeApplied, 0, "BUSY"},
	}
	for _, d := range deliveries {
		body := deviceBody(d.id, "alice", d.device, d.version, d.status, ts, 0)
		if d.device == "" {
			body = presenceBody(d.id, "alice", d.version, d.status)
		}
		tt.Consume(names.In, "alice", body, tester.WithHeaders(headers))
	}
	got := outcomes(t, outQ)
	if len(got) != len(deliveries) {
		t.Fatalf("%d outcomes for %d deliveries", len(got), len(deliveries))
	}
	var wantMembers []string
	for i, d := range deliveries {
		if o := got[i]; o.Outcome != d.want || o.EventID != d.id || o.Version != d.version || o.Gap != d.gap {
			t.Errorf("delivery %d: outcome %s %s@%d gap %d, want %s %s@%d gap %d", i, o.Outcome, o.EventID, o.Version, o.Gap, d.want, d.id, d.version, d.gap)
		}
		if d.member != "" {
			wantMembers = append(wantMembers, d.member)
		}
	}

	states := records[envelope.State](t, stateQ)
	if len(states) != len(wantMembers) {
		t.Fatalf("%d state records for %d applied changes", len(states), len(wantMembers))
	}
	for i, st := range states {
		var doc struct {
			Presence string                     `json:"presence"`
			Devices  map[string]json.RawMessage `json:"devices"`
		}
		if err := json.Unmarshal(st.State, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Presence != wantMembers[i] {
			t.Errorf("state %d: member presence %q, want %q (%s)", i, doc.Presence, wantMembers[i], st.State)
		}
		if i > 0 && st.Version <= states[i-1].Version {
			t.Errorf("state %d: version %d after %d; entity_state needs it to grow", i, st.Version, states[i-1].Version)
		}
		if st.UpdatedAtMs != 1700000000123 {
			t.Errorf("state %d: updated_at_ms %d, want the applied event's received_at", i, st.UpdatedAtMs)
		}
		if st.ExpiresAtMs != (ts+300)*1000 {
			t.Errorf("state %d: expires_at_ms %d, want timestamp + ttl", i, st.ExpiresAtMs)
		}
	}
	wantFinal := fmt.Sprintf(`{"event_id":"m100","user_id":"alice","presence":"BUSY","sequence_number":100,"timestamp":%d,"devices":{
		"laptop":{"presence":"OFFLINE","version":6,"updated_at_ms":1700000000123,"expires_at_ms":%d},
		"phone":{"presence":"BUSY","version":4,"updated_at_ms":1700000000123,"expires_at_ms":%[2]d}}}`, ts, (ts+300)*1000)
	if last := states[len(states)-1]; !sameJSON(t, last.State, []byte(wantFinal)) || last.Version != 100 {
		t.Errorf("final state %d %s, want 100 %s", last.Version, last.State, wantFinal)
	}

	e := tt.TableValue(goka.GroupTable(goka.Group("presence")), "alice").(*Entity)
	if e.Version != 100 || e.Devices["laptop"].Version != 6 || e.Devices["phone"].Version != 4 ||
		len(e.Devices["laptop"].Recent) != 3 || e.NextRevision != 101 {
		t.Fatalf("table value %+v laptop %+v phone %+v", e, e.Devices["laptop"], e.Devices["phone"])
	}
}

// The member shows only live claims: a laptop whose ONLINE expired before
// the phone spoke does not count, and the member goes unknown when the
// phone's claim does.
func TestDevicesDeriveFromLiveClaims(t *testing.T) {
	s := presence(t)
	p := policyFor(s)
	var e Entity
	laptop := deviceEvent("l1", "laptop", 1, "ONLINE", 1_000, 61_000)
	phone := deviceEvent("p1", "phone", 1, "AWAY", 3_600_000, 0)
	for _, ev := range []Event{laptop, phone} {
		if d := p.decide(&e, ev).Decisions[0]; !d.Applied() {
			t.Fatalf("%s: %s", ev.EventID, d.Outcome)
		}
	}
	state, expires, err := publicState(s, &e, "alice")
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
		Body:   deviceBody(id, "alice", device, version, status, clock/1000, expiresAt/1000), ReceivedAtMs: clock,
		Device: device, Value: status,
	}
}

// A new device beyond limits.devices evicts the row that expired first,
// else the one updated longest ago.
func TestDevicesAreBounded(t *testing.T) {
	p := latest{dedupIDs: 8, maxDevices: 2}
	var e Entity
	for _, ev := range []Event{
		deviceEvent("a", "d1", 1, "ONLINE", 1_000, 5_000),
		deviceEvent("b", "d2", 1, "ONLINE", 2_000, 0),
		deviceEvent("c", "d3", 1, "ONLINE", 6_000, 0), // d1 expired at 5000
	} {
		p.decide(&e, ev)
	}
	if got := slices.Sorted(maps.Keys(e.Devices)); !slices.Equal(got, []string{"d2", "d3"}) {
		t.Fatalf("devices %v, want d2 d3: the expired d1 goes first", got)
	}
	p.decide(&e, deviceEvent("d", "d4", 1, "ONLINE", 7_000, 0))
	if got := slices.Sorted(maps.Keys(e.Devices)); !slices.Equal(got, []string{"d3", "d4"}) {
		t.Fatalf("devices %v, want d3 d4: none expired, so the oldest update goes", got)
	}
}

// Any permutation and duplication of histories across a member's devices
// (and the member itself), with retries under new event ids, ends in the
// state the model computes from each row's highest version; every event
// applies at most once and state versions only grow.
func TestDevicesConvergeUnderReorderAndDuplication(t *testing.T) {
	s := presence(t)
	ttl := s.TTL.Milliseconds()
	rapid.Check(t, func(t *rapid.T) {
		rows := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"", "laptop", "phone", "tablet"}), 1, 4, rapid.ID[string]).Draw(t, "rows")
		var deliveries []Event
		final := map[string]Event{} // the model: each row's highest version
		for _, row := range rows {
			version := rapid.Int64Range(0, 5).Draw(t, "first version")
			for i := range rapid.IntRange(1, 6).Draw(t, "events") {
				version += rapid.Int64Range(1, 3).Draw(t, "step")
				status := rapid.SampledFrom(s.Devices.Rank).Draw(t, "presence")
				clock := rapid.Int64Range(1, 10_000).Draw(t, "clock s") * 1000
				var expires int64
				if rapid.Bool().Draw(t, "expires_at in the payload") {
					expires = clock + rapid.Int64Range(-5_000, 5_000).Draw(t, "lifetime s")*1000
				}
				ev := deviceEvent(fmt.Sprintf("%s-%d", row, i), row, version, status, clock, expires)
				if row == "" {
					ev.Body, ev.Device, ev.Value = presenceBody(ev.EventID, "alice", version, status), "", ""
					ev.ExpiresAtMs, ev.OccurredAtMs = 0, 1_700_000_000_000
				}
				final[row] = ev
				deliveries = append(deliveries, redeliveries(t, ev)...)
			}
		}
		p := policyFor(s)
		var e Entity
		applied := map[string]int{}
		lastRevision := int64(-1)
		for _, ev := range rapid.Permutation(deliveries).Draw(t, "order") {
			for _, d := range p.decide(&e, ev).Decisions {
				if !d.Applied() {
					continue
				}
				applied[d.Event.EventID]++
				applied[fmt.Sprintf("%s@%d", d.Event.Device, d.Version)]++
				if rev := e.revise(d.Version); rev <= lastRevision {
					t.Fatalf("state version %d after %d", rev, lastRevision)
				} else {
					lastRevision = rev
				}
			}
		}
		for what, n := range applied {
			if n > 1 {
				t.Fatalf("%s applied %d times", what, n)
			}
		}
		state, expires, err := publicState(s, &e, "alice")
		if err != nil {
			t.Fatal(err)
		}
		want, wantExpires := modelDevicesState(final, s.Devices.Rank, ttl)
		if !sameJSON(t, state, want) || expires != wantExpires {
			t.Fatalf("state %s expiring %d; the model gives %s expiring %d", state, expires, want, wantExpires)
		}
	})
}

// modelDevicesState is the reference for the member's public state: each
// row's last event, the member's presence the best-ranked among the claims
// still live when the newest claim was received.
func modelDevicesState(final map[string]Event, rank []string, ttlMs int64) ([]byte, int64) {
	expiry := func(ev Event) int64 {
		if ev.ExpiresAtMs != 0 {
			return ev.ExpiresAtMs
		}
		return ev.OccurredAtMs + ttlMs
	}
	value := func(ev Event) string {
		var b struct{ Presence string }
		_ = json.Unmarshal(ev.Body, &b)
		return b.Presence
	}
	member, hasMember := final[""]
	if len(final) == 1 && hasMember {
		return member.Body, expiry(member)
	}
	doc := map[string]any{"user_id": "alice"}
	if hasMember {
		_ = json.Unmarshal(member.Body, &doc)
	}
	var newest int64
	for _, ev := range final {
		newest = max(newest, ev.ReceivedAtMs)
	}
	var live []Event
	for _, ev := range final {
		if expiry(ev) > newest {
			live = append(live, ev)
		}
	}
	if len(live) == 0 {
		live = slices.Collect(maps.Values(final))
	}
	best := len(rank)
	for _, ev := range live {
		best = min(best, slices.Index(rank, value(ev)))
	}
	var expires int64
	for _, ev := range live {
		if slices.Index(rank, value(ev)) == best {
			expires = max(expires, expiry(ev))
		}
	}
	devices := map[string]any{}
	for row, ev := range final {
		if row != "" {
			devices[row] = map[string]any{"presence": value(ev), "version": ev.Version, "updated_at_ms": ev.ReceivedAtMs, "expires_at_ms": expiry(ev)}
		}
	}
	doc["presence"], doc["devices"] = rank[best], devices
	out, _ := json.Marshal(doc)
	return out, expires
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t interface{ Fatal(...any) }, a, b []byte) bool {
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

// State versions: an entity stored before revisions existed continues
// above its last state version; a change that carries a higher version
// jumps to it; any other applied change (a device row) still moves it up.
func TestStateVersionsGrowWithEveryAppliedChange(t *testing.T) {
	v, err := entityCodec{}.Decode([]byte(`{"applied":true,"version":844,"state":{"presence":"ONLINE"},"recent":["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	e := v.(*Entity)
	e.startRevisions()
	p := policyFor(presence(t))
	want := []int64{845, 846, 900}
	for i, ev := range []Event{
		deviceEvent("l1", "laptop", 1, "ONLINE", 1_000, 0), // a device's own version 1
		deviceEvent("l2", "laptop", 2, "AWAY", 2_000, 0),
		latestEvent("m900", 900),
	} {
		d := p.decide(e, ev).Decisions[0]
		if !d.Applied() {
			t.Fatalf("%s: %s", ev.EventID, d.Outcome)
		}
		if rev := e.revise(d.Version); rev != want[i] {
			t.Errorf("%s: state version %d, want %d", ev.EventID, rev, want[i])
		}
	}
}
