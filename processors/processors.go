// Package processors is driftguard's processor of each stream: the
// ordering rules (package decide) as a goka group graph, declared with
// goka's DSL, whose callbacks read each input event and each due timer
// through a goka.Context, decide it by the rules and emit each decision to
// `<stream>.outcomes`, the new public state to `<stream>.state` and what
// they cannot read to `<stream>.dlq`, keeping each key's state in the group
// table `<stream>-table` (names under kafka.topic_prefix and
// kafka.group_prefix, from internal/naming). Package eos runs the graph
// exactly once; this package owns the rest the rules must not know: the
// table codec and storage, the timers at the input watermark, the lag and
// the metrics.
package processors

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/lovoo/goka"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/processors/decide"
	"github.com/driftguard/driftguard/processors/eos"
)

// Options configure a stream's processor. Zero values mean defaults.
type Options struct {
	// Logger; nil discards.
	Logger *slog.Logger
	// Metrics receives decision counters; nil skips them.
	Metrics *Metrics
	// Now is the decision clock (processed_at only: decisions never read
	// clocks); nil means time.Now.
	Now func() time.Time
	// Naming builds the stream's topic and group names (the configured
	// kafka.topic_prefix and kafka.group_prefix); zero: no prefix.
	Naming naming.Prefixes
}

// newHandler builds the decisions of stream s.
func newHandler(s *config.Stream, opts Options) *handler {
	h := &handler{stream: s, names: opts.Naming.For(s.Name), group: opts.Naming.Group(s.Name), opts: opts, rules: decide.For(s)}
	h.opts.Logger = telemetry.OrDiscard(h.opts.Logger)
	if h.opts.Now == nil {
		h.opts.Now = time.Now
	}
	if h.opts.Metrics != nil {
		h.opts.Metrics.serve(s.Name)
	}
	return h
}

type handler struct {
	stream *config.Stream
	names  naming.Topics
	// group is the stream's consumer group.
	group string
	opts  Options
	rules *decide.Rules
	// visited sums what one timer visit sees, for the gauges.
	visited visitCounts
	// counts is what the decisions not yet counted add to the metrics.
	// With holdCounts (the transactional runtime) they wait for their
	// transaction to commit; otherwise each input's and each timer's are
	// counted once it is decided, partitions in parallel.
	counts     tally
	holdCounts bool
}

// countedNow adds the decisions' counts to the metrics unless the runtime
// holds them for its transaction.
func (h *handler) countedNow() {
	if !h.holdCounts {
		h.opts.Metrics.add(h.stream.Name, &h.counts, h.opts.Now())
	}
}

// decisionContext is what deciding one input or one timer visit needs of
// its runtime: the key and its table value, the input record, emits to the
// stream's topics, and a way to fail. goka's Context is one; the
// transactional runtime (runtime.go) has its own.
type decisionContext interface {
	Key() string
	Value() any
	SetValue(value any, opts ...goka.ContextOption)
	Emit(topic goka.Stream, key string, value any, opts ...goka.ContextOption)
	Partition() int32
	Offset() int64
	Headers() goka.Headers
	Timestamp() time.Time
	// Fail stops the decision and its runtime with err; it does not return.
	Fail(err error)
}

// process is goka's callback: goka serializes calls per partition, so
// everything here for one key happens in log order.
func (h *handler) process(ctx decisionContext, msg any) {
	defer h.countedNow()
	body, _ := msg.([]byte)
	if string(ctx.Headers()[record.HeaderType]) == record.ControlType {
		h.act(ctx, body)
		return
	}
	ev, err := h.decode(ctx, body)
	if err != nil {
		h.deadLetter(ctx, body, record.ReasonUndecodable, err)
		return
	}
	if strings.Contains(ev.Key, eos.PartSeparator) {
		// Such a key's value would be stored where another key keeps a
		// part of its own (a conversation's sends): ingest refuses it, and
		// so does this, for records from elsewhere.
		h.deadLetter(ctx, body, record.ReasonUndecodable, errors.New("the key contains U+0000"))
		return
	}
	if ev.Key != ctx.Key() {
		// The record's Kafka key places its state; a producer that keyed it
		// differently from the body would split one entity in two.
		h.deadLetter(ctx, body, record.ReasonKeyMismatch, fmt.Errorf("record key %q, body key %q", ctx.Key(), ev.Key))
		return
	}
	if h.stream.IsEphemeral(ev.Type) {
		// Ephemeral signals belong in <stream>.ephemeral; one written here
		// by a foreign producer is counted, never stored or decided.
		h.count(countEphemeral)
		return
	}
	value := tableValueOf(ctx)
	atMs := h.opts.Now().UnixMilli()
	effects := h.rules.Decide(&value.Entity, ev)
	// The table value is set on every decision, duplicates included: the
	// dedup memory is part of the state.
	h.store(ctx, value, effects, atMs, inputOrigin(ev))
}

// Metric labels of driftguard_processor_decisions_total that are not
// outcomes: an input sent to the DLQ undecided, an ephemeral signal found
// in `<stream>.in`.
const (
	countDeadLetter = "dead_letter"
	countEphemeral  = "ephemeral"
)

// tableValueOf is the key's table value, empty before its first input.
func tableValueOf(ctx decisionContext) *tableValue {
	if v, ok := ctx.Value().(*tableValue); ok && v != nil {
		return v
	}
	return &tableValue{}
}

// store emits the effects decided at atMs, counts them, and writes the
// value to the table and then, when the state changed, the state record,
// so the table holds the revision the state record carries.
func (h *handler) store(ctx decisionContext, value *tableValue, effects decide.Effects, atMs int64, origin decisionOrigin) {
	h.counts.decided(effects)
	h.emitEffects(ctx, effects, atMs, origin)
	h.writeBack(ctx, value, effects.ChangesState())
}

// decisionOrigin is what made a set of decisions, which names them
// (record.InputDecisionID, record.TimerDecisionID): an input event, or a
// timer that was due at deadlineMs.
type decisionOrigin struct {
	timer      bool
	partition  int32
	offset     int64
	deadlineMs int64
}

// inputOrigin is the origin of the decisions of input ev: its own
// position, also for the other events it decides (a drained successor, a
// reconciled child), which a redelivery of ev decides again.
func inputOrigin(ev decide.Event) decisionOrigin {
	return decisionOrigin{partition: ev.InputPartition, offset: ev.InputOffset}
}

// timerOrigin is the origin of the decisions of a timer due at deadlineMs,
// read from the table value before the timer fires.
func timerOrigin(deadlineMs int64) decisionOrigin {
	return decisionOrigin{timer: true, deadlineMs: deadlineMs}
}

// id is the decision id of decision d, number index among its origin's.
func (o decisionOrigin) id(stream, key string, d *decide.Decision, index int) string {
	if !o.timer {
		return record.InputDecisionID(stream, o.partition, o.offset, index)
	}
	kind := d.Reason
	if kind == "" {
		kind = record.Reason(d.Outcome)
	}
	return record.TimerDecisionID(stream, key, o.deadlineMs, kind, index)
}

// emitEffects writes the outcome of every decision made at atMs by origin,
// the dead letters and the replay request, for the key being processed.
func (h *handler) emitEffects(ctx decisionContext, effects decide.Effects, atMs int64, origin decisionOrigin) {
	for i, d := range effects.Decisions {
		o := record.Outcome{
			Stream: h.stream.Name, Key: ctx.Key(), EventID: d.Event.EventID, EventType: d.Event.Type,
			Version: d.Version, Outcome: d.Outcome, Reason: d.Reason, Gap: d.Gap, BufferDepth: d.BufferDepth, MessageID: d.MessageID, AcceptedAtMs: d.AcceptedAtMs,
			Action: d.Action, RequestedBy: d.RequestedBy,
			OccurredAtMs: d.Event.OccurredAtMs, ReceivedAtMs: d.Event.ReceivedAtMs, ProcessedAtMs: atMs,
			InputPartition: d.Event.InputPartition, InputOffset: d.Event.InputOffset,
			DecisionID: origin.id(h.stream.Name, ctx.Key(), &d, i), Payload: d.Event.Body,
		}
		ctx.Emit(goka.Stream(h.names.Outcomes), ctx.Key(), record.AppendOutcome(make([]byte, 0, 512+len(o.Key)+len(o.EventID)+len(o.Payload)), &o))
		if d.DeadLetter != "" {
			h.emitDeadLetter(ctx, d.Event, d.DeadLetter, fmt.Sprintf("event %s at version %d", d.Event.EventID, d.Version), atMs)
		}
	}
	if effects.Replay > 0 {
		h.emit(ctx, h.names.Replay, record.ReplayRequest{
			Stream: h.stream.Name, Key: ctx.Key(), FirstMissing: effects.Replay, RequestedAtMs: atMs,
		})
	}
}

// writeBack writes the value to the table and then, when its state
// changed, its state record at its current revision. The record is built
// first: a failure stops before the table write.
func (h *handler) writeBack(ctx decisionContext, value *tableValue, changed bool) {
	var state []byte
	if changed {
		e := &value.Entity
		public, expiresAt, err := h.rules.PublicState(e, ctx.Key())
		if err != nil {
			ctx.Fail(fmt.Errorf("public state of %s: %w", ctx.Key(), err))
			return
		}
		st := record.State{
			Stream: h.stream.Name, Key: ctx.Key(), Version: e.Revision(), State: public,
			UpdatedAtMs: e.LastUpdate(), ExpiresAtMs: expiresAt,
		}
		state = record.AppendState(make([]byte, 0, 192+len(st.Key)+len(st.State)), &st)
	}
	ctx.SetValue(value)
	if state != nil {
		ctx.Emit(goka.Stream(h.names.State), ctx.Key(), state)
	}
}

// decode reads an input record: the body through the rules, the
// received_at clock from ingest's header (or the record timestamp when a
// foreign producer wrote it).
func (h *handler) decode(ctx decisionContext, body []byte) (decide.Event, error) {
	if len(body) == 0 {
		return decide.Event{}, errors.New("empty record")
	}
	doc, err := envelope.Parse(body)
	if err != nil {
		return decide.Event{}, err
	}
	// Strings read from the document stay valid after its release.
	defer doc.Release()
	headers := ctx.Headers()
	ev, err := h.rules.Read(doc, string(headers[record.HeaderEventID]))
	if err != nil {
		return decide.Event{}, err
	}
	ev.Body, ev.ReceivedAtMs = body, receivedAt(ctx)
	ev.InputPartition, ev.InputOffset = ctx.Partition(), ctx.Offset()
	// A redriven dead letter is a new delivery of the event, known to the
	// dedup memory by the dead letter it came from.
	ev.RedriveOf = string(headers[record.HeaderRedriveOf])
	return ev, nil
}

// receivedAt is the input's received_at clock: ingest's header, or the
// record timestamp when a foreign producer wrote it.
func receivedAt(ctx decisionContext) int64 {
	if v, ok := ctx.Headers()[record.HeaderReceivedAt]; ok {
		if ms, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return ms
		}
	}
	return ctx.Timestamp().UnixMilli()
}

func (h *handler) deadLetter(ctx decisionContext, body []byte, reason record.Reason, cause error) {
	h.opts.Logger.Warn("record sent to the DLQ", "stream", h.stream.Name, "reason", reason,
		"partition", ctx.Partition(), "offset", ctx.Offset(), "err", cause)
	h.emitDeadLetter(ctx, decide.Event{Body: body, InputPartition: ctx.Partition(), InputOffset: ctx.Offset()}, reason, cause.Error(), h.opts.Now().UnixMilli())
	h.count(countDeadLetter)
}

// emitDeadLetter writes an input event, located in <stream>.in, to the DLQ,
// dead-lettered at atMs.
func (h *handler) emitDeadLetter(ctx decisionContext, ev decide.Event, reason record.Reason, detail string, atMs int64) {
	h.emit(ctx, h.names.DLQ, record.DeadLetter{
		Stream: h.stream.Name, Topic: h.names.In, Partition: ev.InputPartition, Offset: ev.InputOffset,
		Key: ctx.Key(), Reason: reason, Detail: detail,
		EventID: ev.EventID, EventType: ev.Type, ReceivedAtMs: ev.ReceivedAtMs, AtMs: atMs,
		Payload: ev.Body,
	})
}

// emit writes v as JSON to topic, for the rare records (dead letters,
// replay requests); outcomes and states are encoded by hand.
func (h *handler) emit(ctx decisionContext, topic string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		ctx.Fail(fmt.Errorf("encoding %s record: %w", topic, err))
	}
	ctx.Emit(goka.Stream(topic), ctx.Key(), data)
}

// count counts an input sent to the DLQ undecided, or found ephemeral, by
// its driftguard_processor_decisions_total label.
func (h *handler) count(label string) {
	h.counts.mu.Lock()
	defer h.counts.mu.Unlock()
	h.counts.count(label)
}
