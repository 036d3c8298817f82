package oncall

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
)

// KeyDecisions are the last n decisions made for key in stream, oldest
// first, read from `<stream>.outcomes` (committed records only, the key's
// partition from its start: what the topic's retention still holds).
func KeyDecisions(ctx context.Context, conn kafka.Conn, names naming.Topics, key string, n int) ([]record.Outcome, error) {
	p, err := kafka.PartitionOf(ctx, conn, names.Outcomes, key)
	if err != nil {
		return nil, err
	}
	// A ring of the last n.
	n = max(0, n)
	ring := make([]record.Outcome, 0, n)
	next := 0
	err = kafka.ReadCommitted(ctx, conn, names.Outcomes, []int32{p}, func(r *kgo.Record) error {
		if string(r.Key) != key || n == 0 {
			return nil
		}
		o, err := decodeOutcome(r)
		if err != nil {
			return err
		}
		if len(ring) < n {
			ring = append(ring, o)
			return nil
		}
		ring[next] = o
		next = (next + 1) % n
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(ring[next:], ring[:next]...), nil
}

// eventDecisions are the decisions made for eventID in stream, read
// from every partition of `<stream>.outcomes`, ordered by partition and
// offset (within a key, the order they were made).
func eventDecisions(ctx context.Context, conn kafka.Conn, names naming.Topics, eventID string) ([]record.Outcome, error) {
	type found struct {
		partition int32
		offset    int64
		outcome   record.Outcome
	}
	var matches []found
	var probe record.Outcome
	err := kafka.ReadCommitted(ctx, conn, names.Outcomes, nil, func(r *kgo.Record) error {
		// The hand-written decoder sees the id without a copy; only a
		// match is decoded whole.
		if _, err := record.DecodeOutcome(r.Value, &probe); err != nil || probe.EventID != eventID {
			return nil
		}
		o, err := decodeOutcome(r)
		if err == nil {
			matches = append(matches, found{r.Partition, r.Offset, o})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// Partitions are read side by side: ordered as ClickHouse's reader
	// orders them.
	slices.SortFunc(matches, func(a, b found) int {
		return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
	})
	outs := make([]record.Outcome, len(matches))
	for i, m := range matches {
		outs[i] = m.outcome
	}
	return outs, nil
}

// deadLetters are the dead letters of eventID in `<stream>.dlq`.
func deadLetters(ctx context.Context, conn kafka.Conn, names naming.Topics, eventID string) ([]DeadLetterAt, error) {
	var dls []DeadLetterAt
	err := kafka.ReadCommitted(ctx, conn, names.DLQ, nil, func(r *kgo.Record) error {
		var dl record.DeadLetter
		if json.Unmarshal(r.Value, &dl) != nil || dl.EventID != eventID {
			return nil
		}
		dls = append(dls, DeadLetterAt{Position: record.RedrivePosition(r.Topic, r.Partition, r.Offset), DeadLetter: dl})
		return nil
	})
	return dls, err
}

func decodeOutcome(r *kgo.Record) (record.Outcome, error) {
	var o record.Outcome
	if err := json.Unmarshal(r.Value, &o); err != nil {
		return o, fmt.Errorf("outcome at %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	return o, nil
}

// DeadLetterAt is a dead letter and where it sits in `<stream>.dlq`:
// "<topic>/<partition>/<offset>", the dg-redrive-of of its redrives. Its
// topic, partition and offset are those of the event in `<stream>.in`.
type DeadLetterAt struct {
	Position string `json:"position"`
	record.DeadLetter
}
