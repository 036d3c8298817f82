package oncall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
)

// Redriving. A dead letter of an input (a buffer overflow, an orphan whose
// parent came too late, a conversation that was full; a released child or
// an event a reset dropped, when asked for) is written back to
// `<stream>.in` as a new delivery of its original bytes: keyed as it was,
// with ingest's headers (dg-scheme "redrive", dg-received-at the time of
// the redrive, so that its TTLs run from now) and dg-redrive-of, the dead
// letter's position. The processor decides it again by the rules.
//
// Running a redrive twice adds nothing, twice over: a run first reads
// `<stream>.in` from the oldest matched dead letter's time on and skips
// every dead letter a redriven record already names; and the processor's
// dedup memory knows a redriven record by its event id with that
// position, so a copy that still got through (two runs at once) is
// decided a duplicate, within limits.dedup_window.

// DefaultRedriveReasons are the dead letters' reasons a redrive sends
// back when none is named: the rules may decide such an event otherwise
// now. A child an operator released and an event a reset dropped are dead
// letters by an operator's decision, which a redrive undoes only when
// their reason is named (released, reset).
var DefaultRedriveReasons = []record.Reason{record.ReasonOrphanTTL, record.ReasonBufferFull, record.ReasonConversationFull}

// unredrivableReasons are the reasons a redrive never sends back, even
// named: an undecodable record or one keyed against its body would only
// come back.
var unredrivableReasons = []record.Reason{record.ReasonUndecodable, record.ReasonKeyMismatch}

// RedriveOptions say which dead letters of a stream to redrive.
type RedriveOptions struct {
	Stream string
	// Names are the stream's topic names.
	Names naming.Prefixes
	// Reasons keep the dead letters of these reasons; empty means
	// DefaultRedriveReasons.
	Reasons []record.Reason
	// Since keeps the dead letters written at or after it; zero keeps all.
	Since time.Time
	// Key keeps the dead letters of one entity key; "" keeps all.
	Key string
	// DryRun writes nothing; Each still sees what would be done.
	DryRun bool
	// Now is the received_at of redriven records; nil means time.Now.
	Now func() time.Time
	// Each, when set, is told of every matched dead letter and what was
	// (or, in a dry run, would be) done: ActionRedrive or a skip reason.
	Each func(dl DeadLetterAt, action string)
	// Progress, when set, is told how many of the matched dead letters are
	// done, of total.
	Progress func(done, total int)
}

// What a redrive does with a matched dead letter.
const (
	ActionRedrive = "redrive"
	// SkipRedriven: a record redriven from it is in `<stream>.in` already.
	SkipRedriven = "already_redriven"
	// SkipNotInput: it is not an input of `<stream>.in` (a replay request
	// that could not be delivered, say).
	SkipNotInput = "not_an_input"
	// SkipNotRedrivable: its reason, named, is one the rules cannot
	// decide otherwise (undecodable, key_mismatch).
	SkipNotRedrivable = "not_redrivable"
)

// RedriveSummary counts what a redrive did. Read counts the dead letters
// read, Matched those the filters kept, Redriven those written back (or,
// in a dry run, that would be), Skipped the rest of the matched by why.
type RedriveSummary struct {
	Read     int            `json:"read"`
	Matched  int            `json:"matched"`
	Redriven int            `json:"redriven"`
	Skipped  map[string]int `json:"skipped"`
	DryRun   bool           `json:"dry_run"`
}

// Redrive redrives the dead letters of opts.Stream that match opts.
func Redrive(ctx context.Context, conn kafka.Conn, opts RedriveOptions) (RedriveSummary, error) {
	names := opts.Names.For(opts.Stream)
	sum := RedriveSummary{Skipped: map[string]int{}, DryRun: opts.DryRun}
	reasons := opts.Reasons
	if len(reasons) == 0 {
		reasons = DefaultRedriveReasons
	}
	var matched []DeadLetterAt
	err := kafka.ReadCommitted(ctx, conn, names.DLQ, nil, func(r *kgo.Record) error {
		sum.Read++
		var dl record.DeadLetter
		if json.Unmarshal(r.Value, &dl) != nil {
			// Not a dead letter driftguard wrote: nothing to send back.
			return nil
		}
		if !slices.Contains(reasons, dl.Reason) ||
			!opts.Since.IsZero() && dl.AtMs < opts.Since.UnixMilli() ||
			opts.Key != "" && dl.Key != opts.Key {
			return nil
		}
		matched = append(matched, DeadLetterAt{Position: record.RedrivePosition(r.Topic, r.Partition, r.Offset), DeadLetter: dl})
		return nil
	})
	if err != nil {
		return sum, err
	}
	sum.Matched = len(matched)
	done, err := redriven(ctx, conn, names, matched)
	if err != nil {
		return sum, err
	}
	var cl *kgo.Client
	if !opts.DryRun {
		if cl, err = kafka.NewClient(conn); err != nil {
			return sum, err
		}
		defer cl.Close()
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	var mu sync.Mutex
	var produceErr error
	for i, dl := range matched {
		action := ActionRedrive
		switch {
		case dl.Topic != names.In || dl.Payload == nil:
			action = SkipNotInput
		case slices.Contains(unredrivableReasons, dl.Reason):
			action = SkipNotRedrivable
		case done[dl.Position]:
			action = SkipRedriven
		}
		if action == ActionRedrive {
			sum.Redriven++
			if cl != nil {
				in := kafka.NewInput(names.In, []byte(opts.Stream), []byte(record.SchemeRedrive), dl.Payload,
					kafka.InputFields{Key: dl.Key, EventID: dl.EventID, Type: dl.EventType}, now())
				in.Record.Headers = append(in.Record.Headers, kgo.RecordHeader{Key: record.HeaderRedriveOf, Value: []byte(dl.Position)})
				cl.Produce(ctx, &in.Record, func(_ *kgo.Record, err error) {
					mu.Lock()
					produceErr = errors.Join(produceErr, err)
					mu.Unlock()
				})
			}
		} else {
			sum.Skipped[action]++
		}
		if opts.Each != nil {
			opts.Each(dl, action)
		}
		if opts.Progress != nil {
			opts.Progress(i+1, len(matched))
		}
	}
	if cl != nil {
		if err := cl.Flush(ctx); err != nil {
			return sum, err
		}
	}
	if produceErr != nil {
		return sum, fmt.Errorf("writing to %s: %w", names.In, produceErr)
	}
	return sum, nil
}

// redriven lists the dead letters of matched that a record of
// `<stream>.in` was redriven from already, reading it from the time of
// the oldest of them: a record is redriven after its dead letter was
// written.
func redriven(ctx context.Context, conn kafka.Conn, names naming.Topics, matched []DeadLetterAt) (map[string]bool, error) {
	done := map[string]bool{}
	if len(matched) == 0 {
		return done, nil
	}
	oldest := matched[0].AtMs
	for _, dl := range matched {
		oldest = min(oldest, dl.AtMs)
	}
	err := kafka.ReadCommittedSince(ctx, conn, names.In, nil, time.UnixMilli(oldest), func(r *kgo.Record) error {
		if of := kafka.Header(r, record.HeaderRedriveOf); of != nil {
			done[string(of)] = true
		}
		return nil
	})
	return done, err
}
