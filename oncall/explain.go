package oncall

import (
	"context"
	"fmt"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
)

// Explanation says where an event is and every decision made for it.
type Explanation struct {
	Stream  string `json:"stream"`
	EventID string `json:"event_id"`
	// Key is the entity key of its last decision ("" when none).
	Key string `json:"key,omitempty"`
	// Where is one of the Where* values, Detail a sentence of it.
	Where  string `json:"where"`
	Detail string `json:"detail"`
	// Source is where the decisions were read: SourceKafka or
	// SourceClickHouse. Dead letters are always read from Kafka.
	Source      string           `json:"source"`
	Decisions   []record.Outcome `json:"decisions"`
	DeadLetters []DeadLetterAt   `json:"dead_letters"`
}

// Where an event is, from its last decision that was not a duplicate.
const (
	// WhereNotDecided: no decision is recorded for it.
	WhereNotDecided = "not_decided"
	// WhereApplied: its change is (or was) the key's state.
	WhereApplied = "applied"
	// WhereBuffered: held under its key ahead of a gap (gapless).
	WhereBuffered = "buffered"
	// WhereQuarantined: held under its parent's key until the parent
	// comes.
	WhereQuarantined = "quarantined"
	// WhereDeadLetter: in `<stream>.dlq`, until redriven.
	WhereDeadLetter = "dead_letter"
	// WhereActioned: an operator action (record.ControlType) carried
	// out; a refused one is rejected.
	WhereActioned = "actioned"
	// WhereRejected: decided, never applied (stale, rejected without a
	// dead letter, or a duplicate of something else).
	WhereRejected = "rejected"
)

// Sources of an explanation's decisions.
const (
	SourceKafka      = "kafka"
	SourceClickHouse = "clickhouse"
)

// DecisionsOf returns every decision made for an event of a stream, in
// the order made: ClickHouse's driftguard.events, for one.
type DecisionsOf func(ctx context.Context, stream, eventID string) ([]record.Outcome, error)

// Explain explains eventID of stream. With fromClickHouse set, the
// decisions are read through it, and from `<stream>.outcomes` when it
// fails (ClickHouse unreachable) or knows no decision of the event (the
// sink may be behind); the dead letters always from `<stream>.dlq`.
func Explain(ctx context.Context, conn kafka.Conn, names naming.Prefixes, stream, eventID string, fromClickHouse DecisionsOf) (Explanation, error) {
	topics := names.For(stream)
	x := Explanation{Stream: stream, EventID: eventID, Source: SourceKafka}
	var err error
	if fromClickHouse != nil {
		if x.Decisions, err = fromClickHouse(ctx, stream, eventID); err == nil && len(x.Decisions) > 0 {
			x.Source = SourceClickHouse
		}
	}
	if x.Source == SourceKafka {
		if x.Decisions, err = eventDecisions(ctx, conn, topics, eventID); err != nil {
			return Explanation{}, err
		}
	}
	if x.DeadLetters, err = deadLetters(ctx, conn, topics, eventID); err != nil {
		return Explanation{}, err
	}
	if x.Decisions == nil {
		x.Decisions = []record.Outcome{}
	}
	if x.DeadLetters == nil {
		x.DeadLetters = []DeadLetterAt{}
	}
	x.Where, x.Detail = where(x.Decisions, x.DeadLetters)
	if n := len(x.Decisions); n > 0 {
		x.Key = x.Decisions[n-1].Key
	}
	return x, nil
}

// where reads where an event is from its decisions and dead letters.
func where(decisions []record.Outcome, dls []DeadLetterAt) (string, string) {
	var last *record.Outcome
	for i := range decisions {
		if decisions[i].Outcome != record.Duplicate || last == nil {
			last = &decisions[i]
		}
	}
	if last == nil {
		return WhereNotDecided, "no decision is recorded: not accepted, or not decided yet"
	}
	o := last
	switch o.Outcome {
	case record.Applied, record.Reconciled:
		return WhereApplied, fmt.Sprintf("%s to key %q at version %d", o.Outcome, o.Key, o.Version)
	case record.Buffered:
		return WhereBuffered, fmt.Sprintf("held under key %q at sequence %d, ahead of a gap", o.Key, o.Version)
	case record.Quarantined:
		return WhereQuarantined, fmt.Sprintf("held under key %q until its parent comes", o.Key)
	case record.Actioned:
		return WhereActioned, fmt.Sprintf("%s carried out on key %q, requested by %s", o.Action, o.Key, o.RequestedBy)
	}
	for _, dl := range dls {
		if dl.Partition == o.InputPartition && dl.Offset == o.InputOffset {
			return WhereDeadLetter, fmt.Sprintf("in the DLQ at %s (%s); `driftguard redrive` sends it back", dl.Position, dl.Reason)
		}
	}
	detail := fmt.Sprintf("%s under key %q at version %d", o.Outcome, o.Key, o.Version)
	if o.Reason != "" {
		detail += " (" + string(o.Reason) + ")"
	}
	return WhereRejected, detail + "; never applied"
}
