package processors

import (
	"slices"
	"time"

	"github.com/lovoo/goka"
)

// Redelivery after a crash. goka writes the table before an input's
// outputs are acknowledged and commits the input offset after them, so a
// restarted processor may read inputs again that its table has already
// decided, their outputs written or lost. Deciding them again would judge
// them against their own effects (an applied event would come back as a
// duplicate, and its applied outcome and state could be lost for good).
// Instead each key remembers, for its recent inputs, what they decided, and
// a redelivered input emits those outcomes again, as they were, with the
// current state, and writes the table value again (its changelog record may
// be what the crash lost). Consumers see outputs at least once, each time
// the same.

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
	Outcome     string `json:"o"`
	Reason      string `json:"r,omitempty"`
	Version     int64  `json:"v,omitempty"`
	Gap         int64  `json:"g,omitempty"`
	BufferDepth int    `json:"b,omitempty"`
	MessageID   string `json:"m,omitempty"`
	Other       *Event `json:"e,omitempty"`
}

// A crash redelivers what was decided since the last commit, which goka
// makes about a second after the outputs; the memory keeps a generous
// margin on both counts.
const (
	decidedMemory = 128
	decidedWindow = time.Minute
)

// rememberDecided records what input ev decided at atMs.
func (e *Entity) rememberDecided(ev Event, effects Effects, atMs int64) {
	past := DecidedInput{Offset: ev.InputOffset, AtMs: atMs, Replay: effects.Replay}
	for _, d := range effects.Decisions {
		p := PastDecision{Outcome: d.Outcome, Reason: d.Reason, Version: d.Version, Gap: d.Gap, BufferDepth: d.BufferDepth, MessageID: d.MessageID}
		if d.Event.InputOffset != ev.InputOffset {
			other := d.Event
			p.Other = &other
		}
		past.Decisions = append(past.Decisions, p)
	}
	forget := 0
	for forget < len(e.Decided) && (len(e.Decided)-forget >= decidedMemory || e.Decided[forget].AtMs < atMs-decidedWindow.Milliseconds()) {
		forget++
	}
	e.Decided = append(slices.Delete(e.Decided, 0, forget), past)
	e.NextInput = ev.InputOffset + 1
}

// redeliver answers an input the table has already decided.
func (h *handler) redeliver(ctx goka.Context, entity *Entity, ev Event) {
	i := slices.IndexFunc(entity.Decided, func(d DecidedInput) bool { return d.Offset == ev.InputOffset })
	if i < 0 {
		h.opts.Logger.Warn("redelivered input too old to repeat its outcome", "stream", h.stream.Name,
			"partition", ev.InputPartition, "offset", ev.InputOffset, "decided_up_to", entity.NextInput-1)
		h.count("redelivered_forgotten")
		return
	}
	past := entity.Decided[i]
	ctx.SetValue(entity)
	applied := false
	for _, p := range past.Decisions {
		d := Decision{Event: ev, Outcome: p.Outcome, Reason: p.Reason, Version: p.Version, Gap: p.Gap, BufferDepth: p.BufferDepth, MessageID: p.MessageID}
		if p.Other != nil {
			d.Event = *p.Other
		}
		applied = applied || d.Applied()
		h.emit(ctx, h.names.Outcomes, h.outcome(ctx, d, past.AtMs))
	}
	h.emitStateAndReplay(ctx, entity, applied, past.Replay, past.AtMs)
}
