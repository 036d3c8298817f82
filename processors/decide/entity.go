package decide

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"slices"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// Row is one versioned claim: the entity's own, or one of its devices'.
type Row struct {
	// Applied is false until the first event is applied.
	Applied bool `json:"applied"`
	// Version is the last applied version.
	Version     int64 `json:"version"`
	UpdatedAtMs int64 `json:"updated_at_ms"`
	// ExpiresAtMs is when the applied claim goes stale, 0 for never.
	ExpiresAtMs int64 `json:"expires_at_ms,omitempty"`
	// Recent remembers recent event ids in the order first seen, each with
	// the received_at of its first sight, so a redelivery is recognised as
	// a duplicate: for limits.dedup_window, unless limits.dedup_ids newer
	// ids push it out first (see firstSight).
	Recent EventIDs `json:"recent,omitempty"`
}

// EventIDs are a row's dedup memory. An id is kept as its 64-bit FNV-1a
// hash, 8 bytes whatever the id's length (the table codec adds a varint of
// its seen time, about 3 bytes). Two ids of one row would have to collide
// in 64 bits among the 256 remembered for a new event to be taken for a
// duplicate (odds about 1e-17 per event).
type EventIDs []SeenID

// SeenID is one remembered event id.
type SeenID struct {
	Hash uint64 `json:"h"`
	// AtMs is the received_at of the id's first sight, or SeenUnknown.
	AtMs int64 `json:"t"`
}

// SeenUnknown is the seen time of an id read from a table of an earlier
// release, which remembered ids without one, until DateSeenUnknown dates
// it.
const SeenUnknown int64 = math.MinInt64

// idHash is an event id's hash in an EventIDs.
func idHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// UnmarshalJSON reads the memory as JSON tables of earlier releases wrote
// it, a list of the ids themselves or of their hashes (seen at
// SeenUnknown), as well as a list of SeenIDs.
func (m *EventIDs) UnmarshalJSON(data []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*m = make(EventIDs, len(raw))
	for i, r := range raw {
		var id string
		if err := json.Unmarshal(r, &id); err == nil {
			(*m)[i] = SeenID{Hash: idHash(id), AtMs: SeenUnknown}
		} else if err := json.Unmarshal(r, &(*m)[i].Hash); err == nil {
			(*m)[i].AtMs = SeenUnknown
		} else if err := json.Unmarshal(r, &(*m)[i]); err != nil {
			return err
		}
	}
	return nil
}

// Entity is what the rules keep per key: the state of one entity, stored
// in the group table `<stream>-table` (with the runtime's redelivery
// memory beside it).
type Entity struct {
	// Row is the entity's own claim: events without a device id.
	Row
	// State is the public state: the applied event's body.
	State json.RawMessage `json:"state,omitempty"`
	// NextRevision is the least version the next `<stream>.state` record
	// may carry (see revise).
	NextRevision int64 `json:"next_revision,omitempty"`
	// Devices are the device rows (latest streams with devices), bounded
	// by limits.devices.
	Devices map[string]*Device `json:"devices,omitempty"`
	// DeadlineMs is the earliest pending timer (unix ms), 0 for none.
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	// GapSinceMs is when the open gap was first seen (gapless), 0 for none.
	GapSinceMs int64 `json:"gap_since_ms,omitempty"`
	// Terminal is set once a terminal status is applied, or the entity
	// is abandoned.
	Terminal bool `json:"terminal,omitempty"`
	// Abandoned is set by an operator's abandon (Rules.Act): the entity
	// is terminal, and its public state says "abandoned": true.
	Abandoned bool `json:"abandoned,omitempty"`
	// Buffer holds events ahead of a gap in sequence order (gapless),
	// bounded by limits.buffer and limits.buffer_bytes.
	Buffer []Event `json:"buffer,omitempty"`
	// Chat is the conversation of an assign stream.
	Chat *Conversation `json:"chat,omitempty"`
	// ParentSeen is set once a parent event is applied (parent join).
	ParentSeen bool `json:"parent_seen,omitempty"`
	// Quarantine holds children waiting for their parent, in arrival order,
	// bounded by parent.buffer and limits.buffer_bytes.
	Quarantine []Event `json:"quarantine,omitempty"`

	// evicted counts the ids the decision under way pushed out of a dedup
	// memory early; Rules.Decide moves it to the effects. Never stored.
	evicted int
}

// heldEventOverhead is what a held event's field names, numbers and flags
// take in the encoded table value (JSON), at most.
const heldEventOverhead = 320

// heldBytes is at least what an event held in a buffer adds to the table
// value: its body (compacted, never escaped), its strings (escaped, at
// worst six bytes a byte) and its fixed fields. Counting bodies alone
// would let many small events (limits.buffer up to 100000) grow a value
// past Kafka's 1 MiB message limit.
func heldBytes(ev Event) int {
	return len(ev.Body) + 6*(len(ev.Key)+len(ev.EventID)+len(ev.Type)+len(ev.Device)+len(ev.Value)+
		len(ev.Member)+len(ev.ClientKey)+len(ev.RedriveOf)) + heldEventOverhead
}

// heldSize is what the held events add to the table value.
func heldSize(events []Event) int {
	n := 0
	for _, ev := range events {
		n += heldBytes(ev)
	}
	return n
}

func overflow(held []Event, ev Event, maxEvents, maxBytes int) (effects Effects, full bool) {
	if len(held) < maxEvents && heldSize(held)+heldBytes(ev) <= maxBytes {
		return Effects{}, false
	}
	effects = one(ev, record.Rejected, record.ReasonBufferFull, ev.Version)
	effects.Decisions[0].BufferDepth = len(held)
	effects.Decisions[0].DeadLetter = record.ReasonBufferFull
	return effects, true
}

// dedup is a stream's bounds on the dedup memory of each row.
type dedup struct {
	// ids is limits.dedup_ids, windowMs limits.dedup_window.
	ids      int
	windowMs int64
}

func dedupOf(s *config.Stream) dedup {
	return dedup{ids: s.Limits.DedupIDs, windowMs: s.Limits.DedupWindow.Milliseconds()}
}

// firstSight is the dedup step every policy starts with, on row r of e
// (the entity's own or one of its devices'). It forgets the ids seen more
// than the window before ev's received_at, reports whether ev's id is new
// and, when it is, remembers it at that received_at. Measured so, an id
// seen at t is a duplicate through t + window, and forgotten once an
// event received later than that reaches its row: the memory is the ids
// within the window of the newest event the row has seen. When the count
// bound then pushes out the oldest ids, each is still inside its window,
// and is counted in e.evicted: an early eviction.
func (e *Entity) firstSight(r *Row, ev Event, d dedup) bool {
	h := idHash(ev.identity())
	cutoff := ev.ReceivedAtMs - d.windowMs
	kept, found := r.Recent[:0], false
	for _, id := range r.Recent {
		if id.AtMs < cutoff {
			continue
		}
		kept = append(kept, id)
		found = found || id.Hash == h
	}
	r.Recent = kept
	if found {
		return false
	}
	r.Recent = append(r.Recent, SeenID{Hash: h, AtMs: ev.ReceivedAtMs})
	if over := len(r.Recent) - d.ids; over > 0 {
		r.Recent = slices.Delete(r.Recent, 0, over)
		e.evicted += over
	}
	return true
}

// Remembers reports whether id is in the row's memory of recent event ids.
func (r *Row) Remembers(id string) bool {
	h := idHash(id)
	return slices.ContainsFunc(r.Recent, func(s SeenID) bool { return s.Hash == h })
}

// DateSeenUnknown gives the ids that a table of an earlier release
// remembered without a seen time the newest time the entity holds (its
// rows' last updates, its buffered and quarantined events, its
// conversation's sends), so they are kept for a full window from about
// the upgrade, deterministically. The table codec calls it on such values.
func (e *Entity) DateSeenUnknown() {
	newest := e.LastUpdate()
	for _, ev := range e.Buffer {
		newest = max(newest, ev.ReceivedAtMs)
	}
	for _, ev := range e.Quarantine {
		newest = max(newest, ev.ReceivedAtMs)
	}
	if e.Chat != nil {
		for _, m := range e.Chat.Sent {
			newest = max(newest, m.AtMs)
		}
	}
	date := func(ids EventIDs) {
		for i := range ids {
			if ids[i].AtMs == SeenUnknown {
				ids[i].AtMs = newest
			}
		}
	}
	date(e.Recent)
	for _, d := range e.Devices {
		date(d.Recent)
	}
}

// startRevisions gives an entity stored before revisions existed the
// revision it implicitly had, its version, so its next state record still
// replaces the last one in entity_state. Call it before deciding.
func (e *Entity) startRevisions() {
	if e.NextRevision == 0 && e.Applied {
		e.NextRevision = e.Version + 1
	}
}

// revised gives each decision of effects that changed the public state
// its revision, in order.
func (e *Entity) revised(effects Effects) Effects {
	for _, d := range effects.Decisions {
		if d.ChangesState() {
			e.revise(d.Version)
		}
	}
	return effects
}

// Revision is the entity's current revision: the version of its last
// `<stream>.state` record, the one its current state carries.
func (e *Entity) Revision() int64 { return e.NextRevision - 1 }

// Due reports whether a timer of the entity is due at nowMs.
func (e *Entity) Due(nowMs int64) bool { return e.DeadlineMs != 0 && e.DeadlineMs <= nowMs }

// LastUpdate is when the entity last changed: its own row's or a device
// row's received_at, whichever is later.
func (e *Entity) LastUpdate() int64 {
	last := e.UpdatedAtMs
	for _, d := range e.Devices {
		last = max(last, d.UpdatedAtMs)
	}
	return last
}

// revise returns the state version of an applied change at version: one
// more than the last, or version when that is higher. State versions thus
// grow with every applied change (a device row, a read cursor) as
// entity_state's ReplacingMergeTree needs, and equal the source version
// while only the entity's own versioned claims apply.
func (e *Entity) revise(version int64) int64 {
	rev := max(e.NextRevision, version)
	e.NextRevision = rev + 1
	return rev
}
