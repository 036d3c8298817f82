// Package ingest is driftguard's HTTP edge: it verifies each webhook's
// signature on the raw bytes, validates the payload against the stream's
// schema, and produces it byte for byte to `<stream>.in`, keyed by entity.
// It answers 202 only after the broker's ack; deciding what the event means
// (duplicate, stale, applied) is the processors' work, not the edge's.
package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/connlimit"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/schemacheck"
	"github.com/driftguard/driftguard/internal/source"
	"github.com/driftguard/driftguard/internal/telemetry"
)

// Producer is the part of *kgo.Client the edge uses.
type Producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// Handler serves POST /v1/webhooks/{stream}.
type Handler struct {
	streams   map[string]*edgeStream
	producer  Producer
	deadlines *deadlines
	// budget caps the bytes of bodies held; backlog is what the producer
	// holds of them, whose oldest record's wait is every Retry-After.
	budget  *budget
	backlog *backlog
	// sources caps each source's requests in flight; nil when off.
	sources *sourceLimit
	// connections caps the listener's open connections, in all and per
	// source (Listener, ConnState).
	connections *connlimit.Limit
	// minBodyRate (bytes a second) and readTimeout pace a body's read.
	minBodyRate int64
	readTimeout time.Duration
	// trusted are the proxies whose X-Forwarded-For names the source.
	trusted []netip.Prefix
	// refusals logs refused requests, sampled per reason.
	refusals *refusalLog
	// maxMessageBytes is the largest record batch Kafka accepts.
	maxMessageBytes int
	log             *slog.Logger
	// explain names the setting or ACL behind a failed produce.
	explain func(error) error
	now     func() time.Time
	metrics *metrics
}

type edgeStream struct {
	cfg            *config.Stream
	topic          string
	ephemeralTopic string
	scheme         Scheme
	// schemas validates the stream's events.
	schemas *schemacheck.Stream
	// nameBytes and schemeBytes are the dg-stream and dg-scheme header
	// values; records share them, and nothing writes to them.
	nameBytes, schemeBytes []byte
	// accepted counts the stream's 202s, and ephemeral its accepted
	// ephemeral signals by type (the catalogue's ephemeral_types, which
	// go to the ephemeral topic): series bound once, since looking one up
	// by its labels is most of what counting a request costs.
	accepted         prometheus.Counter
	acceptedDuration prometheus.Observer
	ephemeral        map[string]prometheus.Counter
}

// Options configure a Handler. Zero values mean defaults.
type Options struct {
	// ProduceTimeout is how long to wait for the broker's ack. Default 5s.
	ProduceTimeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the edge's metrics; nil skips them.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// MaxInFlightBytes caps the bytes of bodies held (http.max_in_flight_bytes).
	// Default config.InFlightBytesFor the streams.
	MaxInFlightBytes int64
	// MaxInFlightBytesPerSource caps the bytes of one source's bodies
	// (http.max_in_flight_bytes_per_source). Default
	// config.InFlightBytesPerSource.
	MaxInFlightBytesPerSource int64
	// MaxPerSource caps each source's requests in flight
	// (http.max_per_source); 0 is off.
	MaxPerSource int
	// MaxConnections caps the open connections of the listeners Listener
	// wraps (http.max_connections); 0 means config.DefaultMaxConnections.
	MaxConnections int
	// MaxConnectionsPerSource caps the open connections of one peer
	// (http.max_connections_per_source); 0 means
	// config.DefaultMaxConnectionsPerSource, at most MaxConnections.
	MaxConnectionsPerSource int
	// MinBodyRate is the slowest a body may arrive after its first second,
	// in bytes a second (http.min_body_rate); 0 means
	// config.DefaultMinBodyRate.
	MinBodyRate int64
	// ReadTimeout bounds a body's read (http.read_timeout); 0 means 30s.
	ReadTimeout time.Duration
	// TrustedProxies are the proxies whose X-Forwarded-For names the source
	// (http.trusted_proxies).
	TrustedProxies []netip.Prefix
	// MaxMessageBytes is the largest record batch the topics accept.
	// Default record.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// ExplainKafka rewrites a failed produce's error, for the log, to name
	// the setting or ACL behind it (kafka.Conn.Explain); nil keeps it.
	ExplainKafka func(error) error
	// Naming builds the topic names (the configured kafka.topic_prefix);
	// zero: no prefix.
	Naming naming.Prefixes
	// RefusalLogLines refused requests of one reason are logged per
	// RefusalLogInterval (http.refusal_log_lines, http.refusal_log_interval);
	// defaults 10 and 1m.
	RefusalLogLines    int
	RefusalLogInterval time.Duration
}

// NewHandler builds the edge for the streams. It fails when a stream has no
// usable secret or schema.
func NewHandler(streams []*config.Stream, producer Producer, opts Options) (*Handler, error) {
	h := &Handler{
		streams:         map[string]*edgeStream{},
		producer:        producer,
		log:             telemetry.OrDiscard(opts.Logger),
		explain:         opts.ExplainKafka,
		now:             opts.Now,
		maxMessageBytes: cmp.Or(opts.MaxMessageBytes, record.DefaultMaxMessageBytes),
		backlog:         newBacklog(time.Now),
		sources:         newSourceLimit(opts.MaxPerSource),
		trusted:         opts.TrustedProxies,
		minBodyRate:     cmp.Or(opts.MinBodyRate, config.DefaultMinBodyRate),
		readTimeout:     cmp.Or(opts.ReadTimeout, 30*time.Second),
	}
	h.refusals = newRefusalLog(h.log, opts.RefusalLogLines, opts.RefusalLogInterval)
	h.deadlines = newDeadlines(cmp.Or(opts.ProduceTimeout, 5*time.Second))
	budget := cmp.Or(opts.MaxInFlightBytes, config.InFlightBytesFor(streams))
	h.budget = newBudget(budget, cmp.Or(opts.MaxInFlightBytesPerSource, config.InFlightBytesPerSource(budget, streams)))
	maxConns := cmp.Or(opts.MaxConnections, config.DefaultMaxConnections)
	h.connections = connlimit.New(maxConns, cmp.Or(opts.MaxConnectionsPerSource, min(config.DefaultMaxConnectionsPerSource, maxConns)), opts.TrustedProxies)
	h.metrics = newMetrics(opts.Registerer, h.budget, h.backlog, h.connections)
	if h.now == nil {
		h.now = time.Now
	}
	if h.explain == nil {
		h.explain = func(err error) error { return err }
	}
	for _, s := range streams {
		scheme, err := NewScheme(s)
		if err != nil {
			return nil, err
		}
		names := opts.Naming.For(s.Name)
		es := &edgeStream{cfg: s, topic: names.In, ephemeralTopic: names.Ephemeral, scheme: scheme,
			nameBytes: []byte(s.Name), schemeBytes: []byte(scheme.Name()),
			ephemeral: map[string]prometheus.Counter{}}
		es.accepted, es.acceptedDuration = h.metrics.acceptedSeries(s.Name)
		for _, typ := range s.EphemeralTypes {
			es.ephemeral[typ] = h.metrics.ephemeral.WithLabelValues(s.Name, typ)
		}
		if es.schemas, err = schemacheck.ForStream(s); err != nil {
			return nil, err
		}
		h.streams[s.Name] = es
	}
	return h, nil
}

// Listener is ln holding at most Options.MaxConnections connections open,
// and Options.MaxConnectionsPerSource of one peer, counted by the
// handler's metrics. Serve the handler on it with ConnState as the
// server's ConnState, which tells it the connections that are idle: at
// the cap, the one idle the longest is closed for a new one. The cap is
// what bounds the edge's memory when a flood reconnects as fast as it is
// refused.
func (h *Handler) Listener(ln net.Listener) net.Listener { return h.connections.Listen(ln) }

// ConnState is the http.Server ConnState of a server on Listener.
func (h *Handler) ConnState(c net.Conn, state http.ConnState) { h.connections.ConnState(c, state) }

// Register adds the webhook route to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle("/v1/webhooks/{stream}", h)
}

// Accepted is the 202 body.
type Accepted struct {
	Status    string `json:"status"`
	Stream    string `json:"stream"`
	EventID   string `json:"event_id"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h.metrics.inFlight.Inc()
	defer h.metrics.inFlight.Dec()
	// No answer of the edge is a document: a browser must never sniff
	// one (a problem quoting a request's text) into HTML or script.
	w.Header()["X-Content-Type-Options"] = nosniff
	name := r.PathValue("stream")
	s := h.streams[name]
	res := h.serve(w, r, name, s)
	if s != nil && res.status == http.StatusAccepted {
		s.accepted.Inc()
		s.acceptedDuration.Observe(time.Since(start).Seconds())
		return
	}
	h.metrics.observe(name, res, s != nil, time.Since(start))
	if res.reason != "" && res.status < http.StatusInternalServerError {
		// The publisher's or a stranger's doing, as opposed to the edge's
		// load (503), which its metrics and alerts report.
		if s == nil {
			name = "unknown"
		}
		h.refusals.refused(r, source.ClientAddr(r, h.trusted), name, res.status, res.reason, h.now())
	}
}

// serve follows design §3's order of work for stream s (nil when name is
// not one) and returns what it wrote.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, name string, s *edgeStream) result {
	if s == nil {
		return writeProblem(w, http.StatusNotFound, "unknown_stream", fmt.Sprintf("no stream named %q", name), nil)
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return writeProblem(w, http.StatusMethodNotAllowed, "method", "webhooks are POSTed", nil)
	}
	if !isJSON(headerValue(r.Header, "Content-Type")) {
		return writeProblem(w, http.StatusUnsupportedMediaType, "content_type", "Content-Type must be application/json", nil)
	}
	now := h.now()
	if err := s.scheme.CheckHeaders(r.Header, now); err != nil {
		return h.rejectSignature(w, err)
	}
	if r.ContentLength > s.cfg.Limits.MaxBodyBytes {
		return tooLarge(w, s)
	}
	src := source.Key(source.ClientAddr(r, h.trusted))
	if h.sources != nil {
		if !h.sources.enter(src) {
			return h.unavailable(w, "source_limit", fmt.Sprintf("this source has %d requests in flight, the most it may", h.sources.max))
		}
		defer h.sources.leave(src)
	}
	body, held, err := h.readBody(w, r, s.cfg.Limits.MaxBodyBytes, src)
	if err != nil {
		return h.refuseBody(w, s, err)
	}
	// The body's bytes are given back when the producer is done with its
	// record, or here when it never gets one.
	produced := false
	defer func() {
		if !produced {
			h.budget.give(held)
		}
	}()
	fallbackID, err := s.scheme.Verify(r.Header, body)
	if err != nil {
		return h.rejectSignature(w, err)
	}
	// The body is never written once read (it becomes the record's value),
	// so the decoder reads it in place rather than from a copy.
	doc, err := envelope.ParseString(unsafe.String(unsafe.SliceData(body), len(body)))
	if err != nil {
		var located []FieldProblem
		if fe := (*envelope.FieldError)(nil); errors.As(err, &fe) {
			located = schemacheck.FieldProblems(err)
		}
		return writeProblem(w, http.StatusBadRequest, "json", err.Error(), located)
	}
	if err := s.scheme.CheckBody(doc, now); err != nil {
		doc.Release()
		return h.rejectSignature(w, err)
	}
	if typ, err := doc.EventType(s.cfg); err == nil && record.IsReservedType(typ) {
		// Operator actions travel in <stream>.in as records of a reserved
		// type; a publisher must never be able to write one.
		doc.Release()
		return writeProblem(w, http.StatusUnprocessableEntity, "reserved_type",
			fmt.Sprintf("event type %q is reserved: types starting with %q are driftguard's own (operator actions), never a publisher's", typ, record.ReservedTypePrefix),
			[]FieldProblem{{Pointer: s.cfg.Type.Field, Detail: "reserved event type"}})
	}
	fields, problems := s.schemas.Validate(doc, fallbackID)
	// The fields are strings of the body, valid after the release.
	doc.Release()
	if problems != nil {
		return writeProblem(w, http.StatusUnprocessableEntity, "schema", "the payload does not match the stream's schema", problems)
	}
	if n := record.InputRecordBytes(len(s.nameBytes), len(s.schemeBytes), len(fields.Key), len(fields.EventID), len(fields.Type), len(body)); n > h.maxMessageBytes {
		return writeProblem(w, http.StatusRequestEntityTooLarge, "too_large",
			fmt.Sprintf("with its key, event id and type, the event's Kafka record would be %d bytes, over the %d Kafka accepts", n, h.maxMessageBytes), nil)
	}
	produced = true
	return h.produce(w, s, body, held, fields, now)
}

func tooLarge(w http.ResponseWriter, s *edgeStream) result {
	return writeProblem(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is over %d bytes", s.cfg.Limits.MaxBodyBytes), nil)
}

// refuseBody answers for a body readBody did not return (its connection
// closed, as every refusal's: the rest of the body is not read).
func (h *Handler) refuseBody(w http.ResponseWriter, s *edgeStream, err error) result {
	switch {
	case errors.Is(err, errOverBudget), errors.Is(err, errOverBudgetWhileReading):
		return h.unavailable(w, "overloaded", "the edge holds as many request bytes as it may, or this source its share; retry later")
	case errors.Is(err, errTooLarge):
		return tooLarge(w, s)
	case isTimeout(err):
		res := writeProblem(w, http.StatusRequestTimeout, "too_slow",
			fmt.Sprintf("the body arrived slower than %d bytes a second after its first second, or not within %s", h.minBodyRate, h.readTimeout), nil)
		res.reason = "too_slow"
		return res
	}
	return writeProblem(w, http.StatusBadRequest, "read", "the body could not be read", nil)
}

func isTimeout(err error) bool {
	var timeout interface{ Timeout() bool }
	return errors.As(err, &timeout) && timeout.Timeout()
}

// unavailable answers 503 for reason, with the Retry-After the producer's
// backlog gives: how long its oldest record has waited for an ack.
func (h *Handler) unavailable(w http.ResponseWriter, reason, detail string) result {
	wait := h.backlog.retryAfter()
	h.metrics.retryAfter.Observe(wait.Seconds())
	w.Header().Set("Retry-After", retryAfterSeconds(wait))
	return writeProblem(w, http.StatusServiceUnavailable, reason, detail, nil)
}

// retryAfterSeconds is d in whole seconds, rounded up, and at least 1:
// Retry-After counts seconds.
func retryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}

// isJSON reports whether a Content-Type is application/json, with or
// without parameters; the exact common spelling skips the parser.
func isJSON(contentType string) bool {
	if contentType == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

func (h *Handler) rejectSignature(w http.ResponseWriter, err error) result {
	var se *SignatureError
	reason := "signature"
	if errors.As(err, &se) {
		reason = "signature_" + se.Reason
	}
	res := writeProblem(w, http.StatusUnauthorized, "signature", err.Error(), nil)
	res.reason = reason
	return res
}

// produce writes the event and answers; the producer gives the body's
// held bytes back when it is done with the record.
func (h *Handler) produce(w http.ResponseWriter, s *edgeStream, body []byte, held hold, f envelope.Fields, receivedAt time.Time) result {
	topic := s.topic
	ephemeral := s.ephemeral[f.Type]
	if ephemeral != nil {
		topic = s.ephemeralTopic
	}
	out := kafka.NewInput(topic, s.nameBytes, s.schemeBytes, body, kafka.InputFields{Key: f.Key, EventID: f.EventID, Type: f.Type}, receivedAt)
	if err := h.produceAndWait(&out.Record, held); err != nil {
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
			// A topic whose max.message.bytes is under Kafka's default:
			// a retry would be refused again.
			h.log.Warn("record refused as too large", "stream", s.cfg.Name, "topic", topic, "err", err)
			return writeProblem(w, http.StatusRequestEntityTooLarge, "too_large", "the event's Kafka record is over what the topic accepts (max.message.bytes)", nil)
		}
		h.log.Warn("produce failed", "stream", s.cfg.Name, "topic", topic, "err", h.explain(err))
		return h.unavailable(w, "unavailable", "the event was not durably written; retry later")
	}
	if ephemeral != nil {
		ephemeral.Inc()
	}
	return writeAccepted(w, Accepted{
		Status: "accepted", Stream: s.cfg.Name, EventID: f.EventID,
		Partition: out.Record.Partition, Offset: out.Record.Offset,
	})
}
