package processors

import (
	"fmt"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/processors/decide"
)

// Redelivery after a crash. goka writes the table before an input's
// outputs are acknowledged and commits the input offset after them, so a
// restarted processor may read inputs again that its table (rebuilt from
// the changelog) has already decided, their outputs written or lost.
// Deciding them again would judge them against their own effects (an
// applied event would come back as a duplicate, and its applied outcome
// and state could be lost for good). Instead each key remembers, for its
// inputs not yet known to be committed, what they decided, and a
// redelivered input emits those outcomes again, as they were, with the
// entity's current state record, and writes the table value again.
// Consumers see outputs at least once, each time the same.

// DecidedInput is what one input decided, kept short: the redelivered
// record carries its own event.
type DecidedInput struct {
	Offset    int64          `json:"o"`
	AtMs      int64          `json:"t"`
	Decisions []PastDecision `json:"d"`
	Replay    int64          `json:"r,omitempty"`
}

// PastDecision is one verdict of an input: on the input itself, or on
// another event it decided (a drained successor, a reconciled child), which
// is kept whole.
type PastDecision struct {
	Outcome     record.Result `json:"o"`
	Reason      record.Reason `json:"r,omitempty"`
	Version     int64         `json:"v,omitempty"`
	Gap         int64         `json:"g,omitempty"`
	BufferDepth int           `json:"b,omitempty"`
	MessageID   string        `json:"m,omitempty"`
	DeadLetter  record.Reason `json:"l,omitempty"`
	Other       *decide.Event `json:"e,omitempty"`
}

// decidedMemory bounds the inputs a key remembers. Only inputs at or after
// the partition's committed offset can be redelivered, and goka commits
// about every second, so a key normally remembers its inputs of the last
// two or three seconds (the committed offsets are read once per timer
// tick). The bound holds the table value small when the committed offset
// is unknown or a hot key gets more inputs than this between two commits;
// a crash then may redeliver an input the key has forgotten (logged and
// counted as redelivered_forgotten).
const decidedMemory = 128

// rememberDecided records what input ev decided at atMs, and forgets the
// inputs before committed, the committed offset of ev's partition as last
// read (0 when unknown), which are never redelivered.
func (v *tableValue) rememberDecided(ev decide.Event, effects decide.Effects, atMs, committed int64) error {
	past := DecidedInput{Offset: ev.InputOffset, AtMs: atMs, Replay: effects.Replay,
		Decisions: make([]PastDecision, 0, len(effects.Decisions))}
	for _, d := range effects.Decisions {
		p := PastDecision{Outcome: d.Outcome, Reason: d.Reason, Version: d.Version, Gap: d.Gap,
			BufferDepth: d.BufferDepth, MessageID: d.MessageID, DeadLetter: d.DeadLetter}
		if d.Event.InputOffset != ev.InputOffset {
			other := d.Event
			p.Other = &other
		}
		past.Decisions = append(past.Decisions, p)
	}
	v.Decided.forget(committed, decidedMemory-1)
	if err := v.Decided.add(&past); err != nil {
		return err
	}
	v.NextInput = ev.InputOffset + 1
	return nil
}

// effects are the effects input ev had when it was first decided.
func (past *DecidedInput) effects(ev decide.Event) decide.Effects {
	effects := decide.Effects{Replay: past.Replay, Decisions: make([]decide.Decision, len(past.Decisions))}
	for i, p := range past.Decisions {
		d := decide.Decision{Event: ev, Outcome: p.Outcome, Reason: p.Reason, Version: p.Version, Gap: p.Gap,
			BufferDepth: p.BufferDepth, MessageID: p.MessageID, DeadLetter: p.DeadLetter}
		if p.Other != nil {
			d.Event = *p.Other
		}
		effects.Decisions[i] = d
	}
	return effects
}

// redeliver answers an input the table has already decided: its outcomes,
// dead letters and replay request again, as first emitted, then the table
// value, unchanged, and when the input changed the state, the entity's
// current state record at its current revision. That is the record of the
// key's last state change, identical to the one first written for it; when
// later inputs changed the state too, their record stands for this
// input's, which it superseded. Revisions are not taken again: the
// record's version and body are those of the table value, whatever the
// redelivery.
func (h *handler) redeliver(ctx decisionContext, value *tableValue, ev decide.Event) {
	past, ok, err := value.Decided.find(ev.InputOffset)
	if err != nil {
		ctx.Fail(fmt.Errorf("redelivery memory of %s: %w", ctx.Key(), err))
		return
	}
	if !ok {
		h.opts.Logger.Warn("redelivered input too old to repeat its outcome", "stream", h.stream.Name,
			"partition", ev.InputPartition, "offset", ev.InputOffset, "decided_up_to", value.NextInput-1)
		h.count(countRedeliveredForgotten)
		return
	}
	effects := past.effects(ev)
	h.emitEffects(ctx, effects, past.AtMs, inputOrigin(ev))
	h.writeBack(ctx, value, effects.ChangesState())
}

// committedOffset is the group's committed offset of an input partition as
// the timer loop last read it, 0 when unknown.
func (h *handler) committedOffset(partition int32) int64 {
	if m := h.committed.Load(); m != nil {
		return (*m)[partition]
	}
	return 0
}
