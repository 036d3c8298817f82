package processors

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Entity is the per-key value of the group table `<stream>-table`.
type Entity struct {
	// Applied is false until the first event is applied.
	Applied bool `json:"applied"`
	// Version is the last applied version.
	Version int64 `json:"version"`
	// State is the public state: the applied event's body.
	State       json.RawMessage `json:"state,omitempty"`
	UpdatedAtMs int64           `json:"updated_at_ms"`
	ExpiresAtMs int64           `json:"expires_at_ms,omitempty"`
	// Recent holds the most recent event ids, oldest first, so a redelivery
	// is recognised as a duplicate. It is bounded by limits.dedup_ids.
	Recent []string `json:"recent,omitempty"`
	// DeadlineMs is the earliest pending timer (unix ms), 0 for none.
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	// GapSinceMs is when the open gap was first seen (gapless), 0 for none.
	GapSinceMs int64 `json:"gap_since_ms,omitempty"`
	// Terminal is set once a terminal status is applied (gapless).
	Terminal bool `json:"terminal,omitempty"`
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
	// NextInput is one past the input offset of the last record decided for
	// this key (a key's records share one partition), 0 before any.
	NextInput int64 `json:"next_input,omitempty"`
	// Decided is what the key's recent inputs decided, oldest first, to
	// answer their redelivery after a crash (redeliver.go).
	Decided []DecidedInput `json:"decided,omitempty"`
}

// bodiesSize is the size of the events' bodies, what a buffer adds to the
// table value.
func bodiesSize(events []Event) int {
	n := 0
	for _, ev := range events {
		n += len(ev.Body)
	}
	return n
}

// seen reports whether id is in the recent-ids memory.
func (e *Entity) seen(id string) bool { return slices.Contains(e.Recent, id) }

// remember adds id, forgetting the oldest ids beyond limit.
func (e *Entity) remember(id string, limit int) {
	e.Recent = append(e.Recent, id)
	if over := len(e.Recent) - limit; over > 0 {
		e.Recent = slices.Delete(e.Recent, 0, over)
	}
}

// entityCodec stores Entity as JSON: readable with any Kafka tool, and
// tolerant of fields added by later releases.
type entityCodec struct{}

func (entityCodec) Encode(value any) ([]byte, error) {
	e, ok := value.(*Entity)
	if !ok {
		return nil, fmt.Errorf("entity codec: got %T", value)
	}
	return json.Marshal(e)
}

func (entityCodec) Decode(data []byte) (any, error) {
	var e Entity
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("entity codec: %w", err)
	}
	return &e, nil
}
