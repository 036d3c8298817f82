package peer

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/internal/config"
)

// Store is a peer's database side.
type Store interface {
	// Handler serves the stream's webhooks through edge.
	Handler(edge *Edge) http.Handler
	// Reset creates the peer's tables (or keys) if missing and empties them.
	Reset(ctx context.Context) error
	// State reads the final state the checker compares with the model.
	State(ctx context.Context) (model.State, error)
	Close()
}

// Program is one peer's command line: its name, its stream, its own flags
// and how it opens its store once they are parsed.
type Program struct {
	Name   string
	Stream string
	// Listen is the default of --listen.
	Listen string
	// Flags registers the peer's own flags (its database address, limits),
	// with defaults taken from the stream's catalogue entry where
	// driftguard has the same setting.
	Flags func(fs *flag.FlagSet, stream *config.Stream)
	// Open connects to the store; serve also creates what is missing.
	Open func(ctx context.Context, edge *Edge, log *slog.Logger) (Store, error)
}

// Usage of every peer; %[1]s is its name, %[2]s its stream.
const usage = `usage: %[1]s [serve|reset|state] [flags]

  serve   answer POST /v1/webhooks/%[2]s (the default)
  reset   create the tables if missing and empty them
  state   print the final state as the benchmarks' model.State JSON

flags:
`

// Main runs the command in args (flags before or after it) and returns the
// process's exit code.
func Main(p Program, args []string, stdout, stderr io.Writer) int {
	cmd, named := "serve", false
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args, named = args[0], args[1:], true
	}
	fs := flag.NewFlagSet(p.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, usage, p.Name, p.Stream)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", p.Listen, "address to serve webhooks on")
	// Read after parsing, so that usage never prints a secret as a default.
	envSecrets := "DRIFTGUARD_SECRETS_" + strings.ToUpper(p.Stream)
	secrets := fs.String("secret", "", "comma-separated signing secrets, as driftguard takes them (default $"+envSecrets+")")
	scheme := fs.String("scheme", "", "signature scheme: standard-webhooks, hmac-sha256-hex or github (default: the catalogue's for the stream)")
	stream, err := CatalogueStream(p.Stream)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
		return 2
	}
	p.Flags(fs, stream)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case fs.NArg() > 1 || fs.NArg() == 1 && named:
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", p.Name, fs.Args())
		return 2
	case fs.NArg() == 1:
		cmd = fs.Arg(0)
	}
	if *secrets == "" {
		*secrets = os.Getenv(envSecrets)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("peer", p.Name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var edge *Edge
	if cmd == "serve" {
		if edge, err = NewEdge(stream, *scheme, strings.FieldsFunc(*secrets, isListSeparator), log); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
			return 2
		}
	} else if cmd != "reset" && cmd != "state" {
		fmt.Fprintf(stderr, "%s: unknown command %q\n", p.Name, cmd)
		fs.Usage()
		return 2
	}
	store, err := p.Open(ctx, edge, log)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
		return 1
	}
	defer store.Close()
	switch cmd {
	case "reset":
		err = store.Reset(ctx)
	case "state":
		var st model.State
		if st, err = store.State(ctx); err == nil {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(st)
		}
	default:
		err = Serve(ctx, *listen, Mux(edge, store.Handler(edge)), log)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", p.Name, cmd, err)
		return 1
	}
	return 0
}

// Mux routes the stream's webhooks to h, and answers GET /healthz with 200
// (the store is open before anything listens), for a runner that waits
// for the peer.
func Mux(edge *Edge, h http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle(edge.Path(), h)
	return mux
}

// Serve answers with mux on addr until ctx ends, then lets requests in
// flight finish.
func Serve(ctx context.Context, addr string, mux http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Info("serving webhooks", "addr", ln.Addr().String())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown)
	if serveErr := <-done; !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return err
}

// isListSeparator splits a list flag: comma-separated, blanks around the
// items ignored, as driftguard reads DRIFTGUARD_SECRETS_<STREAM>.
func isListSeparator(r rune) bool { return r == ',' || unicode.IsSpace(r) }
