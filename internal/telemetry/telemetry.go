// Package telemetry gives every component the same operational surface:
// slog logging, Prometheus metrics under the driftguard_ prefix, /healthz
// (the process is alive) and /readyz (its dependencies answer).
package telemetry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/driftguard/driftguard/internal/httpframe"
)

// NewLogger returns a JSON logger at level (debug, info, warn, error); text
// when human is true, for `dev`.
func NewLogger(w io.Writer, level string, human bool) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if human {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// OrDiscard is log, or a logger that discards when log is nil: components
// take a logger and stay silent without one.
func OrDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// Ops is the registry and readiness checks of one process.
type Ops struct {
	Registry *prometheus.Registry
	// Profiles has Register serve Go's profiles under /debug/pprof/ too
	// (telemetry.pprof).
	Profiles bool

	mu     sync.Mutex
	checks map[string]func(context.Context) error
}

// NewOps returns an Ops with Go and process collectors registered.
func NewOps() *Ops {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg)
	return &Ops{Registry: reg, checks: map[string]func(context.Context) error{}}
}

// AddReadiness registers a check that /readyz runs; the process is ready
// when every check passes.
func (o *Ops) AddReadiness(name string, check func(context.Context) error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.checks[name] = check
}

// Ready runs every readiness check at once and returns their failures. It
// returns when ctx ends even if a check has not: a client stuck waiting on a
// paused broker must not make /readyz hang.
func (o *Ops) Ready(ctx context.Context) error {
	o.mu.Lock()
	// A copy: components add checks while /readyz runs.
	checks := maps.Clone(o.checks)
	o.mu.Unlock()
	type answer struct {
		name string
		err  error
	}
	answers := make(chan answer, len(checks))
	for name, check := range checks {
		go func() { answers <- answer{name, check(ctx)} }()
	}
	var failed []string
	for len(checks) > 0 {
		select {
		case a := <-answers:
			delete(checks, a.name)
			if a.err != nil {
				failed = append(failed, a.name+": "+a.err.Error())
			}
		case <-ctx.Done():
			for name := range checks {
				failed = append(failed, name+": no answer in time")
			}
			clear(checks)
		}
	}
	sort.Strings(failed)
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "\n"))
	}
	return nil
}

// Register adds the /metrics, /healthz and /readyz handlers to mux.
func (o *Ops) Register(mux *http.ServeMux) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := o.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	if o.Profiles {
		// A CPU profile's seconds must stay under the server's 30 s
		// WriteTimeout: net/http/pprof refuses longer ones.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
}

// ServerOption changes a setting of the server ServeListener runs.
type ServerOption func(*http.Server)

// WithReadTimeout bounds reading a whole request, head and body, instead
// of the default 30s (the ingest edge's http.read_timeout).
func WithReadTimeout(d time.Duration) ServerOption {
	return func(s *http.Server) { s.ReadTimeout = d }
}

// WithIdleTimeout bounds how long a keep-alive connection waits for its
// next request, instead of the default 120s (the ingest edge's
// http.idle_timeout).
func WithIdleTimeout(d time.Duration) ServerOption {
	return func(s *http.Server) { s.IdleTimeout = d }
}

// WithConnState has the server report each connection's state changes to
// f (the connection as the listener gave it, wrapped in httpframe's, whose
// NetConn unwraps it).
func WithConnState(f func(net.Conn, http.ConnState)) ServerOption {
	return func(s *http.Server) { s.ConnState = f }
}

// Serve runs an HTTP server for handler on addr until ctx is done, with the
// timeouts every driftguard listener uses.
func Serve(ctx context.Context, addr string, handler http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ServeListener(ctx, ln, handler, log)
}

// ServeListener is Serve on an open listener (tests use port 0); options
// change the server's settings. A request framed ambiguously (both
// Transfer-Encoding and Content-Length) is answered 400 and its connection
// closed (httpframe).
func ServeListener(ctx context.Context, ln net.Listener, handler http.Handler, log *slog.Logger, opts ...ServerOption) error {
	srv := &http.Server{
		Handler:           httpframe.Handler(handler),
		ConnContext:       httpframe.ConnContext,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	for _, opt := range opts {
		opt(srv)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(httpframe.Listener(ln)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		return nil
	}
}
