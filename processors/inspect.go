package processors

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/processors/decide"
	"github.com/driftguard/driftguard/processors/eos"
)

// Inspection is what a stream's processor holds for one key, read from
// its table value: the read-only view of `driftguard inspect` and the
// admin endpoint. Times are unix ms, 0 for none.
type Inspection struct {
	Stream string `json:"stream"`
	Key    string `json:"key"`
	Policy string `json:"policy"`
	// Applied is false until the key's first event is applied.
	Applied bool `json:"applied"`
	// Version is the last applied version (gapless: sequence; assign: the
	// last conversation_seq); Revision the version of the key's last
	// `<stream>.state` record.
	Version     int64           `json:"version"`
	Revision    int64           `json:"revision"`
	Terminal    bool            `json:"terminal"`
	UpdatedAtMs int64           `json:"updated_at_ms"`
	ExpiresAtMs int64           `json:"expires_at_ms"`
	State       json.RawMessage `json:"state,omitempty"`
	Dedup       DedupMemory     `json:"dedup"`
	// Devices are the device rows (streams with devices), by id.
	Devices []DeviceRow `json:"devices,omitempty"`
	// Buffered are the events held ahead of a gap (gapless), in sequence
	// order; Quarantined the children waiting for their parent, in
	// arrival order.
	Buffered    []HeldEvent `json:"buffered"`
	Quarantined []HeldEvent `json:"quarantined"`
	ParentSeen  bool        `json:"parent_seen,omitempty"`
	// GapSinceMs is when the open gap was first seen (gapless).
	GapSinceMs int64 `json:"gap_since_ms,omitempty"`
	// Timers are the pending deadlines, earliest first.
	Timers []Timer `json:"timers"`
	// Chat is an assign stream's conversation.
	Chat *ChatInspection `json:"chat,omitempty"`
}

// DedupMemory is one row's memory of recent event ids: how many it holds
// of at most Limit (limits.dedup_ids), each for WindowMs
// (limits.dedup_window), and the first sights of its oldest and newest.
type DedupMemory struct {
	Size     int   `json:"size"`
	Limit    int   `json:"limit"`
	WindowMs int64 `json:"window_ms"`
	OldestMs int64 `json:"oldest_ms,omitempty"`
	NewestMs int64 `json:"newest_ms,omitempty"`
}

// DeviceRow is one device row of the key.
type DeviceRow struct {
	Device      string      `json:"device"`
	Version     int64       `json:"version"`
	Value       string      `json:"value"`
	UpdatedAtMs int64       `json:"updated_at_ms"`
	ExpiresAtMs int64       `json:"expires_at_ms"`
	Dedup       DedupMemory `json:"dedup"`
}

// HeldEvent is an event the key holds, and where it sits in `<stream>.in`.
type HeldEvent struct {
	EventID        string `json:"event_id"`
	Type           string `json:"type"`
	Version        int64  `json:"version"`
	ReceivedAtMs   int64  `json:"received_at_ms"`
	InputPartition int32  `json:"input_partition"`
	InputOffset    int64  `json:"input_offset"`
	// RedriveOf is the dead letter it was redriven from, if it was.
	RedriveOf string `json:"redrive_of,omitempty"`
}

// Timer is one pending deadline: a gap's report (gap_timeout) or a
// quarantined child's expiry (orphan_ttl, with the child's event id).
// Timers fire at the input watermark, so a deadline is when a timer may
// fire at the earliest.
type Timer struct {
	Kind    record.Reason `json:"kind"`
	AtMs    int64         `json:"at_ms"`
	EventID string        `json:"event_id,omitempty"`
}

// ChatInspection is a conversation's part of the table value.
type ChatInspection struct {
	Members []string `json:"members"`
	// Membership holds each user's intervals of conversation_seq.
	Membership map[string][]decide.Interval `json:"membership,omitempty"`
	Cursors    map[string]decide.Cursor     `json:"cursors,omitempty"`
	// Sends is how many sends the idempotency memory holds, of at most
	// SendsLimit (limits.idempotency_keys).
	Sends      int `json:"sends"`
	SendsLimit int `json:"sends_limit"`
}

// Inspect is the inspection of entity e, key's table value in stream s.
func Inspect(s *config.Stream, key string, e *decide.Entity) Inspection {
	in := Inspection{
		Stream: s.Name, Key: key, Policy: policyName(s), Applied: e.Applied, Version: e.Version,
		Revision: max(0, e.Revision()), Terminal: e.Terminal, UpdatedAtMs: e.UpdatedAtMs, ExpiresAtMs: e.ExpiresAtMs,
		State: e.State, Dedup: dedupMemory(s, e.Recent), ParentSeen: e.ParentSeen, GapSinceMs: e.GapSinceMs,
		Buffered: held(e.Buffer), Quarantined: held(e.Quarantine), Timers: []Timer{},
	}
	for _, id := range slices.Sorted(maps.Keys(e.Devices)) {
		d := e.Devices[id]
		in.Devices = append(in.Devices, DeviceRow{Device: id, Version: d.Version, Value: d.Value,
			UpdatedAtMs: d.UpdatedAtMs, ExpiresAtMs: d.ExpiresAtMs, Dedup: dedupMemory(s, d.Recent)})
	}
	switch {
	case len(e.Quarantine) > 0:
		for _, c := range e.Quarantine {
			in.Timers = append(in.Timers, Timer{Kind: record.ReasonOrphanTTL, AtMs: c.ReceivedAtMs + s.Parent.TTL.Milliseconds(), EventID: c.EventID})
		}
		slices.SortStableFunc(in.Timers, func(a, b Timer) int { return int(a.AtMs - b.AtMs) })
	case e.DeadlineMs != 0:
		in.Timers = append(in.Timers, Timer{Kind: record.ReasonGapTimeout, AtMs: e.DeadlineMs})
	}
	if c := e.Chat; c != nil {
		in.Chat = &ChatInspection{Members: c.Members, Membership: c.Membership, Cursors: c.Cursors,
			Sends: len(c.Sent), SendsLimit: s.Limits.IdempotencyKeys}
		if in.Chat.Members == nil {
			in.Chat.Members = []string{}
		}
	}
	return in
}

func policyName(s *config.Stream) string {
	if s.Joined() {
		return string(s.Policy) + "+parent"
	}
	return string(s.Policy)
}

func dedupMemory(s *config.Stream, ids decide.EventIDs) DedupMemory {
	m := DedupMemory{Size: len(ids), Limit: s.Limits.DedupIDs, WindowMs: s.Limits.DedupWindow.Milliseconds()}
	if len(ids) > 0 {
		m.OldestMs, m.NewestMs = ids[0].AtMs, ids[len(ids)-1].AtMs
	}
	return m
}

func held(events []decide.Event) []HeldEvent {
	out := make([]HeldEvent, 0, len(events))
	for _, ev := range events {
		out = append(out, HeldEvent{EventID: ev.EventID, Type: ev.Type, Version: ev.Version, ReceivedAtMs: ev.ReceivedAtMs,
			InputPartition: ev.InputPartition, InputOffset: ev.InputOffset, RedriveOf: ev.RedriveOf})
	}
	return out
}

// ReadEntity reads key's table value of stream from the table topic
// `<stream>-table` (committed records only, to its last stable offset),
// with the parts kept beside it (a conversation's remembered sends): what
// the processor holds for the key as of its last committed transaction.
// found is false when the key has no value.
func ReadEntity(ctx context.Context, conn kafka.Conn, names naming.Prefixes, stream, key string) (e *decide.Entity, found bool, err error) {
	table := names.For(stream).Table
	p, err := kafka.PartitionOf(ctx, conn, table, key)
	if err != nil {
		return nil, false, err
	}
	var last []byte
	parts := map[string][]byte{}
	prefix := key + eos.PartSeparator
	err = kafka.ReadCommitted(ctx, conn, table, []int32{p}, func(r *kgo.Record) error {
		switch k := string(r.Key); {
		case k == key:
			last, found = r.Value, r.Value != nil
		case strings.HasPrefix(k, prefix) && r.Value != nil:
			parts[k[len(prefix):]] = r.Value
		case strings.HasPrefix(k, prefix):
			delete(parts, k[len(prefix):])
		}
		return nil
	})
	if err != nil || !found {
		return nil, false, err
	}
	v, err := decodeStoredValue(last, parts)
	if err == nil {
		e = &v.Entity
	}
	if err != nil {
		return nil, false, fmt.Errorf("table value of %q: %w", key, err)
	}
	return e, true, nil
}
