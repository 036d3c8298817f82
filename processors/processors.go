// Package processors runs one goka group per stream. Each group keeps the
// per-key state in its compacted table `<stream>-table`, decides every input
// event with the stream's ordering policy, and emits the decision to
// `<stream>.outcomes`, the new public state to `<stream>.state`, and what it
// cannot read to `<stream>.dlq`.
package processors

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/topics"
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
}

// Metrics count decisions across streams.
type Metrics struct {
	decisions *prometheus.CounterVec
	// The lost+found seed's metrics, under the driftguard_ prefix.
	stored, reconciled, expired *prometheus.CounterVec
	quarantined                 *prometheus.GaugeVec
}

// NewMetrics registers the processor metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	m := &Metrics{
		decisions:  counter("driftguard_processor_decisions_total", "Decisions by stream and outcome.", "stream", "outcome"),
		stored:     counter("driftguard_quarantine_events_stored_total", "Children quarantined to wait for their parent.", "stream"),
		reconciled: counter("driftguard_quarantine_events_reconciled_total", "Quarantined children applied when their parent arrived.", "stream"),
		expired:    counter("driftguard_quarantine_events_expired_total", "Quarantined children whose parent never came (sent to the DLQ).", "stream"),
		quarantined: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "driftguard_quarantine_events_current",
			Help: "Children waiting for their parent in the partitions this instance owns, as of the last timer tick.",
		}, []string{"stream"}),
	}
	reg.MustRegister(m.quarantined)
	return m
}

// New builds the goka processor of stream s. goka options come last so a
// test can pass goka.WithTester; Kafka-facing defaults come from
// GokaOptions.
func New(brokers []string, s *config.Stream, opts Options, gokaOpts ...goka.ProcessorOption) (*Processor, error) {
	h := &handler{stream: s, names: topics.For(s.Name), opts: opts, policy: policyFor(s),
		derivePointer: "/" + envelope.EscapePointer(s.Devices.Derive)}
	if h.opts.Logger == nil {
		h.opts.Logger = slog.New(slog.DiscardHandler)
	}
	if h.opts.Now == nil {
		h.opts.Now = time.Now
	}
	edges := []goka.Edge{
		goka.Input(goka.Stream(h.names.In), new(codec.Bytes), h.process),
		goka.Visitor(tickVisitor, h.tick),
		goka.Persist(entityCodec{}),
		goka.Output(goka.Stream(h.names.Outcomes), new(codec.Bytes)),
		goka.Output(goka.Stream(h.names.State), new(codec.Bytes)),
		goka.Output(goka.Stream(h.names.DLQ), new(codec.Bytes)),
	}
	if s.Policy == config.PolicyGapless {
		edges = append(edges, goka.Output(goka.Stream(h.names.Replay), new(codec.Bytes)))
	}
	p, err := goka.NewProcessor(brokers, goka.DefineGroup(goka.Group(topics.Group(s.Name)), edges...), gokaOpts...)
	if err != nil {
		return nil, err
	}
	return &Processor{Processor: p, h: h}, nil
}

// Processor is a stream's goka processor with its timers.
type Processor struct {
	*goka.Processor
	h *handler
}

type handler struct {
	stream *config.Stream
	names  topics.Names
	opts   Options
	policy policy
	// derivePointer points at the field device rows derive the entity's
	// value from (devices), built once.
	derivePointer string
	// visitedQuarantine sums the quarantined children seen by one timer
	// visit.
	visitedQuarantine atomic.Int64
	// committed is the group's committed offset per input partition, as the
	// timer loop last read it; nil until then. It bounds the redelivery
	// memory (redeliver.go).
	committed atomic.Pointer[map[int32]int64]
}

// process is goka's callback: goka serializes calls per partition, so
// everything here for one key happens in log order.
func (h *handler) process(ctx goka.Context, msg any) {
	body, _ := msg.([]byte)
	ev, err := h.decode(ctx, body)
	if err != nil {
		h.deadLetter(ctx, body, "undecodable", err)
		return
	}
	if ev.Key != ctx.Key() {
		// The record's Kafka key places its state; a producer that keyed it
		// differently from the body would split one entity in two.
		h.deadLetter(ctx, body, "key_mismatch", fmt.Errorf("record key %q, body key %q", ctx.Key(), ev.Key))
		return
	}
	if h.stream.IsEphemeral(ev.Type) {
		// Ephemeral signals belong in <stream>.ephemeral; one written here
		// by a foreign producer is counted, never stored or decided.
		h.count("ephemeral")
		return
	}
	entity, _ := ctx.Value().(*Entity)
	if entity == nil {
		entity = &Entity{}
	}
	entity.startRevisions()
	if ev.InputOffset < entity.NextInput {
		h.redeliver(ctx, entity, ev)
		return
	}
	atMs := h.opts.Now().UnixMilli()
	effects := h.policy.decide(entity, ev)
	if err := entity.rememberDecided(ev, effects, atMs, h.committedOffset(ev.InputPartition)); err != nil {
		ctx.Fail(fmt.Errorf("remembering the decision of %s: %w", ctx.Key(), err))
		return
	}
	// The table is written on every decision, duplicates included: the
	// dedup memory is part of the state.
	h.store(ctx, entity, effects, atMs)
}

// store emits the effects decided at atMs, revising the entity once per
// decision that changed its state, writes the entity to the table and then
// the state record, so the table holds the revision the state record
// carries.
func (h *handler) store(ctx goka.Context, entity *Entity, effects Effects, atMs int64) {
	changed := false
	for _, d := range effects.Decisions {
		if d.changesState() {
			changed = true
			entity.revise(d.Version)
		}
		h.count(d.Outcome)
		if d.Reason == ReasonOrphanTTL && h.opts.Metrics != nil {
			h.opts.Metrics.expired.WithLabelValues(h.stream.Name).Inc()
		}
	}
	h.emitEffects(ctx, effects, atMs)
	h.writeBack(ctx, entity, changed)
}

// emitEffects writes the outcome of every decision made at atMs, the dead
// letters and the replay request, for the key being processed.
func (h *handler) emitEffects(ctx goka.Context, effects Effects, atMs int64) {
	for _, d := range effects.Decisions {
		o := envelope.Outcome{
			Stream: h.stream.Name, Key: ctx.Key(), EventID: d.Event.EventID, EventType: d.Event.Type,
			Version: d.Version, Outcome: d.Outcome, Reason: d.Reason, Gap: d.Gap, BufferDepth: d.BufferDepth, MessageID: d.MessageID,
			OccurredAtMs: d.Event.OccurredAtMs, ReceivedAtMs: d.Event.ReceivedAtMs, ProcessedAtMs: atMs,
			InputPartition: d.Event.InputPartition, InputOffset: d.Event.InputOffset,
			Payload: d.Event.Body,
		}
		ctx.Emit(goka.Stream(h.names.Outcomes), ctx.Key(), appendOutcome(make([]byte, 0, 512+len(o.Key)+len(o.EventID)+len(o.Payload)), &o))
		if d.DeadLetter != "" {
			h.emitDeadLetter(ctx, d.Event, d.DeadLetter, fmt.Sprintf("event %s at version %d", d.Event.EventID, d.Version), atMs)
		}
	}
	if effects.Replay > 0 {
		h.emit(ctx, h.names.Replay, envelope.ReplayRequest{
			Stream: h.stream.Name, Key: ctx.Key(), FirstMissing: effects.Replay, RequestedAtMs: atMs,
		})
	}
}

// writeBack writes the entity to the table and then, when its state
// changed, its state record at its current revision. The record is built
// first: a failure stops before the table write.
func (h *handler) writeBack(ctx goka.Context, entity *Entity, changed bool) {
	var state []byte
	if changed {
		public, expiresAt, err := publicState(h.stream, entity, ctx.Key())
		if err != nil {
			ctx.Fail(fmt.Errorf("public state of %s: %w", ctx.Key(), err))
			return
		}
		st := envelope.State{
			Stream: h.stream.Name, Key: ctx.Key(), Version: entity.NextRevision - 1, State: public,
			UpdatedAtMs: entity.lastUpdate(), ExpiresAtMs: expiresAt,
		}
		state = appendState(make([]byte, 0, 192+len(st.Key)+len(st.State)), &st)
	}
	ctx.SetValue(entity)
	if state != nil {
		ctx.Emit(goka.Stream(h.names.State), ctx.Key(), state)
	}
}

// decode reads an input record: the body through the catalogue, the
// received_at clock from ingest's header (or the record timestamp when a
// foreign producer wrote it).
func (h *handler) decode(ctx goka.Context, body []byte) (Event, error) {
	if len(body) == 0 {
		return Event{}, errors.New("empty record")
	}
	doc, err := envelope.Parse(body)
	if err != nil {
		return Event{}, err
	}
	// Strings read from the document stay valid after its release.
	defer doc.Release()
	headers := ctx.Headers()
	fields, err := doc.Extract(h.stream, string(headers[envelope.HeaderEventID]))
	if err != nil {
		return Event{}, err
	}
	ev := Event{Fields: fields, Body: body, ReceivedAtMs: ctx.Timestamp().UnixMilli(),
		InputPartition: ctx.Partition(), InputOffset: ctx.Offset()}
	if ev.Device, ev.Value, err = deviceFields(h.stream, h.derivePointer, doc); err != nil {
		return Event{}, err
	}
	if v, ok := headers[envelope.HeaderReceivedAt]; ok {
		if ms, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			ev.ReceivedAtMs = ms
		}
	}
	if h.stream.Terminal.Field != "" {
		status, _ := doc.Lookup(h.stream.Terminal.Field)
		ev.Terminal = status.Kind() == envelope.KindString && h.stream.IsTerminal(status.Text())
	}
	return ev, nil
}

func (h *handler) deadLetter(ctx goka.Context, body []byte, reason string, cause error) {
	h.opts.Logger.Warn("record sent to the DLQ", "stream", h.stream.Name, "reason", reason,
		"partition", ctx.Partition(), "offset", ctx.Offset(), "err", cause)
	h.emitDeadLetter(ctx, Event{Body: body, InputPartition: ctx.Partition(), InputOffset: ctx.Offset()}, reason, cause.Error(), h.opts.Now().UnixMilli())
	h.count("dead_letter")
}

// emitDeadLetter writes an input event, located in <stream>.in, to the DLQ,
// dead-lettered at atMs.
func (h *handler) emitDeadLetter(ctx goka.Context, ev Event, reason, detail string, atMs int64) {
	h.emit(ctx, h.names.DLQ, envelope.DeadLetter{
		Stream: h.stream.Name, Topic: h.names.In, Partition: ev.InputPartition, Offset: ev.InputOffset,
		Key: ctx.Key(), Reason: reason, Detail: detail,
		EventID: ev.EventID, EventType: ev.Type, ReceivedAtMs: ev.ReceivedAtMs, AtMs: atMs,
		Payload: ev.Body,
	})
}

// emit writes v as JSON to topic, for the rare records (dead letters,
// replay requests); outcomes and states are encoded by hand.
func (h *handler) emit(ctx goka.Context, topic string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		ctx.Fail(fmt.Errorf("encoding %s record: %w", topic, err))
	}
	ctx.Emit(goka.Stream(topic), ctx.Key(), data)
}

func (h *handler) count(outcome string) {
	m := h.opts.Metrics
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(h.stream.Name, outcome).Inc()
	switch outcome {
	case envelope.OutcomeQuarantined:
		m.stored.WithLabelValues(h.stream.Name).Inc()
	case envelope.OutcomeReconciled:
		m.reconciled.WithLabelValues(h.stream.Name).Inc()
	}
}
