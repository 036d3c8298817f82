package processors

import (
	"fmt"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/processors/decide"
)

// act decides a control record, an operator action, in the key's order
// and in the same transaction as everything else: its outcome rows name
// the action and who asked, and a log line records it beside them.
func (h *handler) act(ctx decisionContext, body []byte) {
	a, err := record.DecodeAction(body)
	if err == nil && a.Key != ctx.Key() {
		err = fmt.Errorf("record key %q, action key %q", ctx.Key(), a.Key)
	}
	if err != nil {
		h.deadLetter(ctx, body, record.ReasonUndecodable, err)
		return
	}
	action := decide.Action{Action: a, Body: body, ReceivedAtMs: receivedAt(ctx),
		InputPartition: ctx.Partition(), InputOffset: ctx.Offset()}
	value := tableValueOf(ctx)
	atMs := h.opts.Now().UnixMilli()
	effects := h.rules.Act(&value.Entity, action)
	first := effects.Decisions[0]
	h.opts.Logger.Info("operator action decided", "stream", h.stream.Name, "key", ctx.Key(),
		"action", a.Action, "requested_by", a.RequestedBy, "event_id", a.EventID, "reason", a.Reason,
		"outcome", first.Outcome, "why", first.Reason, "decisions", len(effects.Decisions),
		"partition", ctx.Partition(), "offset", ctx.Offset())
	h.store(ctx, value, effects, atMs, decisionOrigin{partition: ctx.Partition(), offset: ctx.Offset()})
}
