// Package realtime is driftguard's realtime bridge (`driftguard bridge`):
// it serves the ordered state of every stream to the people who look at
// it, a presence sidebar, a workflow's progress badge, a chat client that
// reconnects, over HTTP and server-sent events, with a snapshot and a
// cursor to resume from. It reads Kafka only (`<stream>.state`, and for
// assign streams the applied sends in `<stream>.outcomes` and the typing
// in `<stream>.ephemeral`) and keeps nothing Kafka cannot rebuild, so
// any number of bridges serve behind a load balancer and a cursor from one
// is good on another (design §6).
// Chat clients write through it too (write.go): their sends and receipts
// go to `<stream>.in` and are answered with the processor's decision.
package realtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
)

// Options configure the bridge. Zero values mean defaults.
type Options struct {
	// Config is the loaded configuration; required. Its bridge.secret must
	// be set.
	Config *config.Config
	// Brokers default to the configured ones.
	Brokers []string
	// Logger; nil discards.
	Logger *slog.Logger
	// Ops receives the metrics and readiness; nil means ones of its own.
	Ops *telemetry.Ops
	// Listener is used instead of listening on bridge.addr.
	Listener net.Listener
	// OpsListener serves /metrics, /healthz and /readyz instead of one
	// on telemetry.addr; never on the public listener, where anyone could
	// read what the bridge holds.
	OpsListener net.Listener
	// OpsServedElsewhere leaves serving the Ops to the caller (dev serves
	// every component's on one listener).
	OpsServedElsewhere bool
	// Now is the clock of `expired` and of token expiry; nil means
	// time.Now.
	Now func() time.Time
}

// Bridge serves every stream of the catalogue.
type Bridge struct {
	cfg  config.Bridge
	kc   kafka.Conn
	need kafka.Access
	log  *slog.Logger
	ops  *telemetry.Ops
	ln   net.Listener
	// opsLn serves the Ops, nil with opsAddr to listen on; opsElsewhere
	// when the caller serves them.
	opsLn        net.Listener
	opsAddr      string
	opsElsewhere bool
	// limits hold the public listener's sources to their share.
	limits  *publicLimits
	now     func() time.Time
	metrics *metrics
	auth    *verifier
	streams map[string]*stream
	adm     *kadm.Client
	// typingProducer writes the typing signals, apart from any durable
	// write (typing.go); typingMetrics count them.
	typingProducer *kgo.Client
	typingMetrics  *typingMetrics
	// producer writes clients' sends and receipts (write.go), set by Run
	// before it serves.
	producer       *kgo.Client
	linger         time.Duration
	produceTimeout time.Duration
	// admission caps the SSE streams and their accept rate (admission.go).
	admission *admission
	// stopAuth ends the refreshes of the tokens' JWK Set, when Run ends.
	stopAuth context.CancelFunc
}

// ErrNoSecret is returned by New without a key to check tokens with.
var ErrNoSecret = errors.New("the bridge needs a key to check its clients' tokens: bridge.secret (DRIFTGUARD_BRIDGE_SECRET, at least 32 bytes), bridge.tokens.hs256_keys, bridge.tokens.jwks_url or bridge.tokens.public_keys")

// New builds the bridge.
func New(opts Options) (*Bridge, error) {
	cfg := opts.Config
	if !cfg.Bridge.HasKey() {
		return nil, ErrNoSecret
	}
	kc, err := kafka.Connect(cfg, opts.Brokers)
	if err != nil {
		return nil, err
	}
	b := &Bridge{cfg: cfg.Bridge, kc: kc, need: kafka.Needs(kafka.ComponentBridge, cfg), log: telemetry.OrDiscard(opts.Logger),
		ops: opts.Ops, ln: opts.Listener, now: opts.Now, streams: map[string]*stream{}, linger: cfg.Kafka.Linger, produceTimeout: cfg.Kafka.ProduceTimeout,
		opsLn: opts.OpsListener, opsAddr: cfg.Telemetry.Addr, opsElsewhere: opts.OpsServedElsewhere}
	if b.ops == nil {
		b.ops = telemetry.NewOps()
		b.ops.Profiles = cfg.Telemetry.Pprof
	}
	if b.now == nil {
		b.now = time.Now
	}
	b.metrics = newMetrics(b.ops.Registry)
	b.typingMetrics = newTypingMetrics(b.ops.Registry)
	authCtx, stopAuth := context.WithCancel(context.Background())
	if b.auth, err = newVerifier(authCtx, cfg.Bridge, b.now, b.log); err != nil {
		stopAuth()
		return nil, err
	}
	b.stopAuth = stopAuth
	b.admission = newAdmission(cfg.Bridge)
	if b.limits, err = b.newPublicLimits(); err != nil {
		stopAuth()
		return nil, err
	}
	names := cfg.Kafka.Naming()
	for _, s := range cfg.StreamList() {
		t := names.For(s.Name)
		st := &stream{cfg: s, topic: t.State, outcomes: t.Outcomes}
		if s.Policy == config.PolicyAssign {
			st.chat = newChat(s, cfg.Bridge.ChatWindow, cfg.Bridge.MaxEntities)
			st.chat.fetch = func(ctx context.Context, p int32, want []wanted, each func(wanted, *record.Outcome)) error {
				b.metrics.history.WithLabelValues(s.Name).Add(float64(len(want)))
				return b.fetchSends(ctx, st.outcomes, p, want, each)
			}
			st.chat.end = func(ctx context.Context, p int32) (int64, error) {
				ends, err := b.adm.ListEndOffsets(ctx, st.outcomes)
				if err != nil {
					return 0, err
				}
				end, ok := ends.Lookup(st.outcomes, p)
				if !ok || end.Err != nil {
					return 0, fmt.Errorf("no end offset of %s/%d: %v", st.outcomes, p, end.Err)
				}
				return end.Offset, nil
			}
			if st.writer, err = newWriter(s, t, st.chat.decisions, cfg.Bridge.SendRate, b.now); err != nil {
				return nil, err
			}
			b.metrics.serveWrites(s.Name)
		}
		st.typing = b.newTyping(s, t.Ephemeral)
		st.catchUps = newCatchUps(b, st)
		b.streams[s.Name] = st
		b.metrics.serve(s.Name)
	}
	return b, nil
}

// reader is a client reading partitions of topic from start, waiting up to
// wait for records. It reads committed records only: the processors write
// transactionally, and a state or message of an aborted transaction was
// never decided. It keeps the control records that end transactions, which
// the readers pass over as positions only: a transaction's commit marker
// takes the last offset of each partition it wrote, so without them a
// reader would never reach the log's end (its last stable offset, which
// the readers compare their positions with).
// Its client id is "driftguard-" + role; with reg not nil its Kafka
// metrics are on reg. A short-lived reader (a client's catch-up) passes
// nil: it would register and unregister a set of series per request, and
// catch-ups side by side share a role, so they could not be counted apart.
// More opts are added last.
func (b *Bridge) reader(role string, reg prometheus.Registerer, topic string, start map[int32]kgo.Offset, wait time.Duration, opts ...kgo.Opt) (*kgo.Client, error) {
	return kafka.New(append(append(b.ReaderOptions(topic, start, wait), kafka.ClientMetrics(reg, role)...), opts...))
}

// ReaderOptions are the franz-go options of a reader (see reader).
func (b *Bridge) ReaderOptions(topic string, start map[int32]kgo.Offset, wait time.Duration) []kgo.Opt {
	return kafka.Options(b.kc, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchMaxWait(wait), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
}

// Name implements service.Service.
func (b *Bridge) Name() string { return "bridge" }

// Run reads every stream and serves until ctx is done.
func (b *Bridge) Run(ctx context.Context) error {
	defer b.stopAuth()
	cl, err := kafka.NewClient(b.kc, kafka.ClientMetrics(b.ops.Registry, "bridge")...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := b.kc.Check(ctx, cl, b.need); err != nil {
		return err
	}
	b.adm = kadm.NewClient(cl)
	if slices.ContainsFunc(slices.Collect(maps.Values(b.streams)), func(st *stream) bool { return st.typing != nil }) {
		if b.typingProducer, err = kafka.NewClient(b.kc, TypingProducerOptions()...); err != nil {
			return err
		}
		defer b.typingProducer.Close()
	}
	// Clients' writes have a producer of their own, so that their records
	// linger and batch as ingest's do.
	if b.producer, err = kafka.NewClient(b.kc, append(producerOptions(b.linger), kafka.ClientMetrics(b.ops.Registry, "bridge-producer")...)...); err != nil {
		return err
	}
	defer b.producer.Close()
	b.ops.AddReadiness("bridge", b.ready)
	ln := b.ln
	if ln == nil {
		if ln, err = net.Listen("tcp", b.cfg.Addr); err != nil {
			return fmt.Errorf("bridge cannot listen on %s (set DRIFTGUARD_BRIDGE_ADDR to another address): %w", b.cfg.Addr, err)
		}
	}
	services := []service.Service{service.Func{Label: "bridge http", Fn: func(ctx context.Context) error {
		return telemetry.ServeListener(ctx, b.limits.listen(smallSendBuffers{ln}), b.Handler(), b.log,
			telemetry.WithIdleTimeout(b.cfg.IdleTimeout), telemetry.WithConnState(b.limits.conns.ConnState))
	}}}
	if !b.opsElsewhere {
		opsLn := b.opsLn
		if opsLn == nil {
			if opsLn, err = net.Listen("tcp", b.opsAddr); err != nil {
				return fmt.Errorf("bridge cannot serve its metrics and probes on %s (set DRIFTGUARD_TELEMETRY_ADDR to another address): %w", b.opsAddr, err)
			}
		}
		opsMux := http.NewServeMux()
		b.ops.Register(opsMux)
		services = append(services, service.Func{Label: "bridge telemetry", Fn: func(ctx context.Context) error {
			return telemetry.ServeListener(ctx, opsLn, opsMux, b.log)
		}})
	}
	for _, name := range slices.Sorted(maps.Keys(b.streams)) {
		st := b.streams[name]
		services = append(services, service.Func{Label: "bridge " + name, Fn: func(ctx context.Context) error { return b.readState(ctx, st) }})
		if st.chat != nil {
			services = append(services, service.Func{Label: "bridge chat " + name, Fn: func(ctx context.Context) error { return b.readChat(ctx, st) }})
		}
		if st.typing != nil {
			services = append(services, service.Func{Label: "bridge typing " + name, Fn: func(ctx context.Context) error { return b.readTyping(ctx, st) }})
		}
	}
	b.log.Info("bridge listening", "addr", ln.Addr().String(), "streams", len(b.streams),
		"max_tcp_connections", b.cfg.MaxTCPConnections, "max_tcp_connections_per_source", b.cfg.MaxTCPConnectionsPerSource,
		"idle_timeout", b.cfg.IdleTimeout, "source_rate", b.cfg.SourceRate.Rate, "max_streams_per_token", b.cfg.MaxStreamsPerToken)
	return service.RunAll(ctx, services...)
}

// sendBuffer bounds the kernel's send buffer of each connection. The kernel
// would grow it to megabytes for a client that reads slowly; kept small,
// a client that stops reading blocks the bridge's writes early and is
// reset, and what a client can hold of the bridge's memory, the kernel's
// included, stays small.
const sendBuffer = 64 << 10

// smallSendBuffers gives every accepted connection a send buffer of
// sendBuffer bytes.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(sendBuffer)
	}
	return c, err
}

// ready is nil once every stream is read to where it ended at start. A
// stream over bridge.max_entities stays ready: it serves what it holds and
// counts what it drops, since every replica would pass the limit at once.
func (b *Bridge) ready(context.Context) error {
	for _, name := range slices.Sorted(maps.Keys(b.streams)) {
		st := b.streams[name]
		s := st.store.Load()
		switch {
		case s == nil || !st.caughtUp.Load():
			if err := st.failure.Load(); err != nil && s == nil {
				return fmt.Errorf("stream %s: reading %s: %w", name, st.topic, *err)
			}
			return fmt.Errorf("stream %s: %s not read to its end yet", name, st.topic)
		case st.chat != nil && !st.chat.caughtUp.Load():
			return fmt.Errorf("stream %s: its outcomes not read for chat catch-up yet", name)
		case st.typing != nil && !st.typing.reading.Load():
			return fmt.Errorf("stream %s: %s not read from its end yet", name, st.typing.topic)
		}
		// A stream over bridge.max_entities is no reason: every replica
		// reads the same topics and would leave the Service at once. The
		// bridge serves what it holds, counts what it drops, and says so in
		// its metrics and logs (dropLogged).

	}
	return nil
}

// Handler serves the streams and the page, each source held to
// bridge.source_rate; the operational endpoints are served apart (Run).
func (b *Bridge) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/streams/{stream}/snapshot", b.authorized(b.snapshot))
	mux.HandleFunc("GET /v1/streams/{stream}/entities/{key}", b.authorized(b.entity))
	mux.HandleFunc("GET /v1/streams/{stream}/entities/{key}/messages", b.authorized(b.messages))
	mux.HandleFunc("GET /v1/streams/{stream}/events", b.authorizedSSE(b.events))
	mux.HandleFunc("GET /v1/streams/{stream}/sync", b.authorized(b.sync))
	mux.HandleFunc("POST /v1/streams/{stream}/entities/{key}/typing", b.authorized(b.postTyping))
	// Clients' writes (send.go, receipts.go).
	mux.HandleFunc("POST /v1/streams/{stream}/entities/{key}/messages", b.authorized(b.send))
	mux.HandleFunc("POST /v1/streams/{stream}/entities/{key}/receipts", b.authorized(b.receipt))
	mux.HandleFunc("OPTIONS /v1/streams/", b.preflight)
	frame := frameAncestors(b.cfg.FrameAncestors)
	registerPage(mux, frame)
	return securityHeaders(b.limits.perSource(mux), frame)
}

// request is an authorized request for one stream.
type request struct {
	w      http.ResponseWriter
	r      *http.Request
	stream *stream
	user   *claims
}

// authorized answers what concerns every stream request: CORS, the
// stream's existence, the token (401) and the token's streams (403).
// The token comes in the Authorization header: one in the query string is
// 400 (authorizedSSE takes it).
func (b *Bridge) authorized(serve func(*request)) http.HandlerFunc {
	return b.authorize(serve, false)
}

// authorizedSSE is authorized for the events endpoint, whose token may be
// ?access_token=: EventSource cannot set headers.
func (b *Bridge) authorizedSSE(serve func(*request)) http.HandlerFunc {
	return b.authorize(serve, true)
}

func (b *Bridge) authorize(serve func(*request), queryToken bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b.cors(w, r)
		name := r.PathValue("stream")
		st := b.streams[name]
		if st == nil {
			problem.Write(w, http.StatusNotFound, "unknown_stream", fmt.Sprintf("no stream named %q", name), nil)
			return
		}
		c, err := b.auth.verify(r, queryToken)
		if errors.As(err, new(queryTokenError)) {
			b.metrics.forbidden.WithLabelValues(name, "400").Inc()
			problem.Write(w, http.StatusBadRequest, "token_in_query", err.Error(), nil)
			return
		}
		if err != nil {
			b.metrics.forbidden.WithLabelValues(name, "401").Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="driftguard"`)
			// A client without a valid token keeps no connection: it
			// pays a new one for each try.
			w.Header().Set("Connection", "close")
			problem.Write(w, http.StatusUnauthorized, "unauthorized", err.Error(), nil)
			return
		}
		if !c.mayRead(name) {
			b.forbid(w, name, fmt.Sprintf("the token does not name stream %q", name))
			return
		}
		if st.store.Load() == nil || !st.caughtUp.Load() {
			// A snapshot of a stream half read would show lists that
			// fill in as the events come; the client waits instead.
			w.Header().Set("Retry-After", "1")
			problem.Write(w, http.StatusServiceUnavailable, "starting", "the bridge has not read this stream to its end yet", nil)
			return
		}
		serve(&request{w: w, r: r, stream: st, user: c})
	}
}

func (b *Bridge) forbid(w http.ResponseWriter, stream, detail string) {
	b.metrics.forbidden.WithLabelValues(stream, "403").Inc()
	problem.Write(w, http.StatusForbidden, "forbidden", detail, nil)
}

// cors lets the pages of the allowed origins read the streams; with none
// configured, no header is set and browsers keep other origins out.
func (b *Bridge) cors(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" || !(slices.Contains(b.cfg.AllowedOrigins, origin) || slices.Contains(b.cfg.AllowedOrigins, "*")) {
		return
	}
	w.Header().Set("Access-Control-Allow-Origin", origin)
	w.Header().Add("Vary", "Origin")
	w.Header().Set("Access-Control-Expose-Headers", "Content-Type")
}

// preflight answers a CORS preflight for the allowed origins.
func (b *Bridge) preflight(w http.ResponseWriter, r *http.Request) {
	b.cors(w, r)
	if w.Header().Get("Access-Control-Allow-Origin") != "" {
		w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
		w.Header().Set("Access-Control-Allow-Headers", "Authorization, Last-Event-ID, Content-Type, "+DeviceHeader)
		w.Header().Set("Access-Control-Max-Age", "600")
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *store) droppedCount() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.dropped
}
