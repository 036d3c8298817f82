package decide

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/driftguard/driftguard/internal/config"
)

// Device is one device's row under an entity: its own version, dedup
// memory and clocks, and the value it claims.
type Device struct {
	Row
	// Value is the device's devices.derive field (its presence).
	Value string `json:"value"`
}

// decideDevice decides an event about one device of the entity. A device
// seen for the first time gets a row, evicting one when the entity is at
// limits.devices.
func (p latest) decideDevice(e *Entity, ev Event) Effects {
	d := e.Devices[ev.Device]
	if d == nil {
		if len(e.Devices) >= p.maxDevices {
			delete(e.Devices, evictee(e.Devices, ev.ReceivedAtMs))
		}
		if e.Devices == nil {
			e.Devices = map[string]*Device{}
		}
		d = &Device{}
		e.Devices[ev.Device] = d
	}
	effects := p.decideRow(e, &d.Row, ev)
	if effects.Decisions[0].Applied() {
		d.Value = ev.Value
	}
	return effects
}

// evictee is the device row to drop for a new one: the row that expired
// first as of nowMs, else the one updated longest ago (ties by id, so the
// choice is deterministic).
func evictee(devices map[string]*Device, nowMs int64) string {
	ids := slices.Collect(maps.Keys(devices))
	return slices.MinFunc(ids, func(a, b string) int {
		da, db := devices[a], devices[b]
		// Expired rows first (0 means live: it sorts after any time).
		ea, eb := da.expiredAt(nowMs), db.expiredAt(nowMs)
		if ea == 0 {
			ea = math.MaxInt64
		}
		if eb == 0 {
			eb = math.MaxInt64
		}
		return cmp.Or(
			cmp.Compare(ea, eb),
			cmp.Compare(da.UpdatedAtMs, db.UpdatedAtMs),
			strings.Compare(a, b))
	})
}

// expiredAt is when the row expired if that is at or before nowMs, else 0.
func (r *Row) expiredAt(nowMs int64) int64 {
	if r.ExpiresAtMs != 0 && r.ExpiresAtMs <= nowMs {
		return r.ExpiresAtMs
	}
	return 0
}

// claim is one row's contribution to the entity's derived value.
type claim struct {
	value       string
	updatedAtMs int64
	expiresAtMs int64
}

// derive is the entity's value from its rows' claims: the highest-ranked
// value among the live claims, and when that goes stale. A claim is live
// when it does not expire or expires after the newest claim was received:
// a laptop whose ONLINE expired an hour before the phone said AWAY is not
// counted. When no claim is live, all count (the entity is unknown after
// the returned expiry anyway). Only the rows' contents matter, not the
// order they were applied in, so any permutation of a history ends in the
// same value. The expiry is the latest among the live claims of the winning
// value, 0 when one of them never expires.
func derive(claims []claim, rank []string) (string, int64) {
	var newest int64
	for _, c := range claims {
		newest = max(newest, c.updatedAtMs)
	}
	live := slices.DeleteFunc(slices.Clone(claims), func(c claim) bool { return c.expiresAtMs != 0 && c.expiresAtMs <= newest })
	if len(live) == 0 {
		live = claims
	}
	position := func(v string) int {
		if i := slices.Index(rank, v); i >= 0 {
			return i
		}
		return len(rank)
	}
	best := slices.MinFunc(live, func(a, b claim) int {
		return cmp.Or(cmp.Compare(position(a.value), position(b.value)), strings.Compare(a.value, b.value))
	}).value
	var expires int64
	for _, c := range live {
		if c.value != best {
			continue
		}
		if c.expiresAtMs == 0 {
			return best, 0
		}
		expires = max(expires, c.expiresAtMs)
	}
	return best, expires
}

// PublicState is the entity's `<stream>.state` value and its expiry.
func (r *Rules) PublicState(e *Entity, key string) (json.RawMessage, int64, error) {
	state, expires, err := publicState(r.stream, e, key)
	if err != nil || !e.Abandoned {
		return state, expires, err
	}
	// An abandoned entity says so beside its last state, so a reader can
	// tell it from one that completed.
	doc := map[string]json.RawMessage{}
	if len(state) > 0 && string(state) != "null" {
		if err := json.Unmarshal(state, &doc); err != nil {
			return nil, 0, fmt.Errorf("abandoned entity's state: %w", err)
		}
	}
	doc["abandoned"] = json.RawMessage("true")
	state, err = json.Marshal(doc)
	return state, expires, err
}

// publicState is the entity's `<stream>.state` value and its expiry. Without
// device rows it is the applied body. With them it is the entity's own last
// body (or just the key field when only devices spoke), with the derive
// field replaced by the value derived from every row and a "devices" object
// holding each device's value, version and clocks:
//
//	{"user_id":"alice","presence":"ONLINE","devices":{"phone":{"presence":"AWAY","version":7,"updated_at_ms":…,"expires_at_ms":…},…}}
func publicState(s *config.Stream, e *Entity, key string) (json.RawMessage, int64, error) {
	if len(e.Devices) == 0 {
		return e.State, e.ExpiresAtMs, nil
	}
	field := s.Devices.Derive
	// Raw values keep the body's numbers exactly as sent.
	doc := map[string]any{}
	var claims []claim
	if e.Applied {
		var body map[string]json.RawMessage
		if err := json.Unmarshal(e.State, &body); err != nil {
			return nil, 0, fmt.Errorf("entity body: %w", err)
		}
		var own string
		_ = json.Unmarshal(body[field], &own) // not a string: ranks last
		for k, v := range body {
			doc[k] = v
		}
		claims = append(claims, claim{own, e.UpdatedAtMs, e.ExpiresAtMs})
	} else if name, ok := strings.CutPrefix(s.Key, "/"); ok && !strings.Contains(name, "/") {
		doc[name] = key
	}
	devices := make(map[string]any, len(e.Devices))
	for id, d := range e.Devices {
		claims = append(claims, claim{d.Value, d.UpdatedAtMs, d.ExpiresAtMs})
		devices[id] = map[string]any{field: d.Value, "version": d.Version, "updated_at_ms": d.UpdatedAtMs, "expires_at_ms": d.ExpiresAtMs}
	}
	value, expires := derive(claims, s.Devices.Rank)
	doc[field] = value
	doc["devices"] = devices
	state, err := json.Marshal(doc)
	return state, expires, err
}
