// Package admin issues operator actions (skip a gap, abandon, release,
// reset) and serves the admin HTTP endpoints of the operations port. An
// action is a control record (record.Action) written to `<stream>.in`,
// keyed by the entity, so the stream's processor decides it in order with
// the key's events and exactly once; the issuer then reads the decision
// back from `<stream>.outcomes`. `driftguard admin` and the endpoint share
// this path, so both are decided, recorded and audited alike.
package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
)

// DefaultWait is how long an issuer waits for the decision by default.
const DefaultWait = 15 * time.Second

// Request is one operator action to issue.
type Request struct {
	Stream string
	Key    string
	Action record.ActionName
	// RequestedBy is who asks; Reason their note; Confirm the confirmation
	// reset needs.
	RequestedBy string
	Reason      string
	Confirm     bool
}

// Result is what became of an issued action.
type Result struct {
	Stream  string            `json:"stream"`
	Key     string            `json:"key"`
	Action  record.ActionName `json:"action"`
	EventID string            `json:"event_id"`
	// Where the control record sits in `<stream>.in`.
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
	// Pending is true when no decision was read within the wait: the
	// action is written and will be decided when the processor reaches
	// it; look for its event id in `<stream>.outcomes`.
	Pending bool `json:"pending"`
	// Decisions are the outcome rows of the action, its own first.
	Decisions []record.Outcome `json:"decisions,omitempty"`
}

// Outcome is the action's own outcome (actioned, rejected, duplicate),
// empty while pending.
func (r *Result) Outcome() record.Result {
	if len(r.Decisions) == 0 {
		return ""
	}
	return r.Decisions[0].Outcome
}

// ErrUnknownStream is a request for a stream the catalogue lacks.
var ErrUnknownStream = errors.New("unknown stream")

// Issuer writes actions to Kafka and reads their decisions.
type Issuer struct {
	cfg  *config.Config
	conn kafka.Conn
}

// NewIssuer is an issuer of cfg's streams over conn.
func NewIssuer(cfg *config.Config, conn kafka.Conn) *Issuer { return &Issuer{cfg: cfg, conn: conn} }

// Check refuses a request that could never be decided: an unknown stream
// or action, a missing key or requester.
func (is *Issuer) Check(req Request) error {
	if _, ok := is.cfg.Streams[req.Stream]; !ok {
		return fmt.Errorf("%w %q (the catalogue has %s)", ErrUnknownStream, req.Stream, strings.Join(is.cfg.StreamNames(), ", "))
	}
	a := req.action("-", 0)
	return a.Validate()
}

func (req Request) action(id string, atMs int64) record.Action {
	return record.Action{EventID: id, Action: req.Action, Key: req.Key, RequestedBy: req.RequestedBy,
		Reason: req.Reason, Confirm: req.Confirm, RequestedAtMs: atMs}
}

// Issue writes req's control record to `<stream>.in` (acks=all,
// idempotent) and waits up to wait for its decision in
// `<stream>.outcomes`, read committed. A decision not read in time leaves
// the result Pending, never an error: the record is written and will be
// decided.
func (is *Issuer) Issue(ctx context.Context, req Request, wait time.Duration) (*Result, error) {
	if err := is.Check(req); err != nil {
		return nil, err
	}
	names := is.cfg.Kafka.Naming().For(req.Stream)
	cl, err := kafka.NewClient(is.conn, kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// Where the outcomes end before the action is written: its decision
	// comes after.
	ends, err := adm.ListEndOffsets(ctx, names.Outcomes)
	if err != nil {
		return nil, is.conn.Explain(fmt.Errorf("reading the end of %s: %w", names.Outcomes, err))
	}
	if err := ends.Error(); err != nil {
		return nil, is.conn.Explain(fmt.Errorf("reading the end of %s: %w", names.Outcomes, err))
	}
	now := time.Now()
	id := newEventID()
	body, err := json.Marshal(req.action(id, now.UnixMilli()))
	if err != nil {
		return nil, err
	}
	in := kafka.NewInput(names.In, []byte(req.Stream), []byte(record.SchemeAdmin), body,
		kafka.InputFields{Key: req.Key, EventID: id, Type: record.ControlType}, now)
	if err := cl.ProduceSync(ctx, &in.Record).FirstErr(); err != nil {
		return nil, is.conn.Explain(fmt.Errorf("writing the action to %s: %w", names.In, err))
	}
	res := &Result{Stream: req.Stream, Key: req.Key, Action: req.Action, EventID: id,
		Partition: in.Record.Partition, Offset: in.Record.Offset}
	// The outcomes are co-partitioned with the input: the decision is on
	// the same partition.
	from, ok := ends.Lookup(names.Outcomes, in.Record.Partition)
	if !ok {
		return nil, fmt.Errorf("%s has no partition %d: the stream's topics are not co-partitioned", names.Outcomes, in.Record.Partition)
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	res.Decisions, err = readDecisions(waitCtx, cl, names.Outcomes, in.Record.Partition, from.Offset,
		record.InputDecisionID(req.Stream, in.Record.Partition, in.Record.Offset, 0))
	switch {
	case err == nil:
	case waitCtx.Err() != nil && ctx.Err() == nil:
		res.Pending = true
	default:
		return res, err
	}
	return res, nil
}

// readDecisions reads partition of outcomes from offset until it has the
// decisions of the input whose first decision (the action's own) is
// firstID. One input's decisions are written one after the other by the
// partition's only writer, in one transaction, so they are contiguous in
// the partition and all readable once the first is: the read ends at the
// first record after them, which is at the latest the transaction's
// commit marker (the client keeps control records for this).
func readDecisions(ctx context.Context, cl *kgo.Client, outcomes string, partition int32, offset int64, firstID string) ([]record.Outcome, error) {
	prefix := strings.TrimSuffix(firstID, "0")
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{outcomes: {partition: kgo.NewOffset().At(offset)}})
	var found []record.Outcome
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			return nil, fetchErr
		}
		done := false
		fetches.EachRecord(func(r *kgo.Record) {
			if done {
				return
			}
			var o record.Outcome
			switch {
			case r.Attrs.IsControl():
				done = len(found) > 0
			default:
				payload, err := record.DecodeOutcome(r.Value, &o)
				if err == nil && strings.HasPrefix(o.DecisionID, prefix) {
					o.Payload = json.RawMessage(payload)
					found = append(found, cloneOutcome(&o))
				} else {
					done = len(found) > 0
				}
			}
		})
		if done {
			return found, nil
		}
	}
}

// cloneOutcome copies o, whose strings share the fetched record's memory.
func cloneOutcome(o *record.Outcome) record.Outcome {
	data := record.AppendOutcome(nil, o)
	var c record.Outcome
	_ = json.Unmarshal(data, &c)
	return c
}

// newEventID is a fresh, unique id for a control record.
func newEventID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "action-" + hex.EncodeToString(b[:])
}
