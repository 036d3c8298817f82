package main

// `driftguard dev`: every component in one process on an embedded Kafka
// (franz-go's kfake), ClickHouse when one is reachable or installed, and
// optional demo traffic, so a newcomer sees webhooks become ordered state
// and outcomes with one command.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/chlocal"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/relay"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// demoSecret signs webhooks of every stream that has no secret configured,
// in dev only. It is printed at start and is in the README, so curl
// examples work as pasted; never use it outside dev.
const demoSecret = "whsec_ZHJpZnRndWFyZC1kZXYtZGVtby1zZWNyZXQtMDAwMDE="

func devFlags(fs *flag.FlagSet) runner {
	demo := fs.Bool("demo", false, "send demo webhooks to every shipped stream: shuffled, retried, out of order, a few a second")
	noSink := fs.Bool("no-sink", false, "run without the ClickHouse sink, even when ClickHouse is reachable or installed")
	public := fs.Bool("public", false, "allow listen addresses beyond loopback (every stream then needs a secret of its own)")
	return func(ctx context.Context, env *environment) error {
		return dev(ctx, env.cfg, devOptions{Demo: *demo, NoSink: *noSink, Public: *public, Out: env.stdout, Log: env.log})
	}
}

// devOptions are the options of a dev run.
type devOptions struct {
	// Demo sends demo traffic to every shipped stream (demo.go).
	Demo bool
	// DemoPace is the time between two demo deliveries. Default 250ms.
	DemoPace time.Duration
	// NoSink leaves the ClickHouse sink out.
	NoSink bool
	// Public allows listen addresses beyond loopback (devAddrs).
	Public bool
	// Out receives the banner and the outcome summaries.
	Out io.Writer
	// Log receives component logs.
	Log *slog.Logger
	// SummaryEvery is how often outcome counts are printed. Default 3s.
	SummaryEvery time.Duration
}

// dev runs every component until ctx is done.
func dev(ctx context.Context, cfg *config.Config, opts devOptions) error {
	if opts.SummaryEvery == 0 {
		opts.SummaryEvery = 3 * time.Second
	}
	log := opts.Log
	scope, err := devAddrs(cfg, opts.Public)
	if err != nil {
		return err
	}
	log.Info("dev listens on "+scope, "http_addr", cfg.HTTP.Addr, "bridge_addr", cfg.Bridge.Addr)
	brokers := cfg.Kafka.Brokers
	if len(brokers) == 0 {
		// The embedded broker is plaintext and open: kafka.tls and
		// kafka.sasl are for an external cluster.
		cfg.Kafka.TLS, cfg.Kafka.SASL = config.TLS{}, config.KafkaSASL{}
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, "127.0.0.1:0")
		}))
		if err != nil {
			return fmt.Errorf("embedded kafka: %w", err)
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
	}
	var demoSecretStreams []string
	for _, name := range cfg.StreamNames() {
		if s := cfg.Streams[name]; len(s.Signature.Secrets) == 0 {
			s.Signature.Secrets = []string{demoSecret}
			demoSecretStreams = append(demoSecretStreams, name)
		}
	}
	conn, cl, err := kafka.ConnectClient(cfg, brokers)
	if err != nil {
		return err
	}
	// Check's errors are explained already; EnsureTopics' are not.
	err = conn.Check(ctx, cl, kafka.Access{})
	if err == nil {
		if _, err = kafka.EnsureTopics(ctx, cl, cfg, true); err != nil {
			err = conn.Explain(err)
		}
	}
	cl.Close()
	if err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("ingest cannot listen on %s (set DRIFTGUARD_HTTP_ADDR to another address): %w", cfg.HTTP.Addr, err)
	}
	ops := telemetry.NewOps()
	ops.Profiles = cfg.Telemetry.Pprof
	services := []service.Service{
		ingest.NewService(ingest.ServiceOptions{Config: cfg, Brokers: brokers, Logger: log, Ops: ops, Listener: ln, OpsOnListener: true}),
		processors.NewService(processors.ServiceOptions{Config: cfg, Brokers: brokers, Logger: log, Ops: ops, InMemoryTables: true}),
		&tail{conn: conn, cfg: cfg, out: opts.Out, every: opts.SummaryEvery},
	}
	// The relay idles unless a stream has a replay.url.
	rel, err := relay.New(relay.Options{Config: cfg, Brokers: brokers, Logger: log, Ops: ops})
	if err != nil {
		return err
	}
	services = append(services, rel)
	chNote := "ClickHouse: off (--no-sink)"
	if !opts.NoSink {
		sink, note, stopCH := startClickHouse(ctx, cfg, brokers, log, ops)
		defer stopCH()
		if sink != nil {
			services = append(services, sink)
		}
		chNote = note
	}
	bridge, pageURL, err := devBridge(cfg, brokers, log, ops)
	if err != nil {
		return err
	}
	services = append(services, bridge)
	webhookURL := "http://" + ln.Addr().String() + "/v1/webhooks/"
	demoNote := ""
	if opts.Demo {
		d := newDemo(cfg, webhookURL, opts.DemoPace, log)
		services = append(services, d)
		demoNote = d.describe()
	}
	printBanner(opts.Out, brokers, webhookURL, pageURL, cfg, demoSecretStreams, chNote, demoNote)
	return service.RunAll(ctx, services...)
}

// pageUser is the user of the page's demo token: a member of the demo's
// conversation, so the page shows the chat.
const pageUser = "demo"

// devBridge is the realtime bridge of a dev run, with a key of its own
// when none is configured, and the page's URL with a token that reads
// every stream for a day. The token travels in the URL's fragment, which
// the browser never sends, so no log holds it.
func devBridge(cfg *config.Config, brokers []string, log *slog.Logger, ops *telemetry.Ops) (service.Service, string, error) {
	if cfg.Bridge.Secret == "" {
		key := make([]byte, config.MinBridgeSecretBytes)
		_, _ = rand.Read(key)
		cfg.Bridge.Secret = hex.EncodeToString(key)
	}
	ln, err := net.Listen("tcp", cfg.Bridge.Addr)
	if err != nil {
		return nil, "", fmt.Errorf("the bridge cannot listen on %s (set DRIFTGUARD_BRIDGE_ADDR to another address): %w", cfg.Bridge.Addr, err)
	}
	b, err := realtime.New(realtime.Options{Config: cfg, Brokers: brokers, Logger: log, Ops: ops, Listener: ln, OpsServedElsewhere: true})
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	tok, err := realtime.Sign([]byte(cfg.Bridge.Secret), pageUser, []string{"*"}, time.Now().Add(24*time.Hour))
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	return b, "http://" + ln.Addr().String() + "/#token=" + tok, nil
}

// startClickHouse returns the sink when ClickHouse is reachable at the
// configured address, or can be started from an installed server; else a
// note saying why the sink is off.
func startClickHouse(ctx context.Context, cfg *config.Config, brokers []string, log *slog.Logger, ops *telemetry.Ops) (service.Service, string, func()) {
	stop := func() {}
	conn, err := sinkch.Open(ctx, cfg.ClickHouse)
	note := "ClickHouse at " + cfg.ClickHouse.Addr
	if err != nil && external(cfg.ClickHouse) {
		// Set up for a server of the user's own: a private, open one in
		// its place would hide the mistake.
		return nil, fmt.Sprintf("ClickHouse: %v; running without the ClickHouse sink", err), stop
	}
	if err != nil {
		srv, startErr := chlocal.Start(ctx, 60*time.Second)
		switch {
		case errors.Is(startErr, chlocal.ErrNotInstalled):
			return nil, fmt.Sprintf("ClickHouse: not reachable at %s and clickhouse-server is not installed; running without the ClickHouse sink (apt-get install clickhouse-server to add it)", cfg.ClickHouse.Addr), stop
		case startErr != nil:
			return nil, fmt.Sprintf("ClickHouse: not reachable at %s and a private server failed to start (%v); running without the ClickHouse sink", cfg.ClickHouse.Addr, startErr), stop
		}
		stop = srv.Stop
		cfg.ClickHouse.Addr = srv.Addr
		note = "ClickHouse: private clickhouse-server started at " + srv.Addr + " (data in a temp folder, removed on exit)"
		if conn, err = openWithRetry(ctx, cfg.ClickHouse); err != nil {
			return nil, fmt.Sprintf("ClickHouse: the private server at %s does not answer (%v); running without the ClickHouse sink", srv.Addr, err), stop
		}
	}
	if _, err := sinkch.Migrate(ctx, conn, cfg.ClickHouse, log); err != nil {
		conn.Close()
		return nil, fmt.Sprintf("ClickHouse at %s: migrations failed (%v); running without the ClickHouse sink", cfg.ClickHouse.Addr, err), stop
	}
	prevStop := stop
	stop = func() { conn.Close(); prevStop() }
	return sinkch.New(sinkch.Options{Config: cfg, Brokers: brokers, Conn: conn, Logger: log, Ops: ops}), note + ", database " + cfg.ClickHouse.Database, stop
}

// external reports whether c is set up for a server of the user's own
// (TLS, a user, a password or a cluster), not just an address.
func external(c config.ClickHouse) bool {
	return c.TLS.On() || c.Username != "default" || c.Password != "" || c.Cluster != ""
}

// openWithRetry waits out a fresh server that listens before it serves.
func openWithRetry(ctx context.Context, c config.ClickHouse) (driver.Conn, error) {
	var err error
	for range 30 {
		var conn driver.Conn
		if conn, err = sinkch.Open(ctx, c); err == nil {
			return conn, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return nil, err
}

// printBanner says where everything is; demo is what the demo sends, "" when
// it is off.
func printBanner(w io.Writer, brokers []string, webhookURL, pageURL string, cfg *config.Config, demoSecretStreams []string, chNote, demo string) {
	var b strings.Builder
	fmt.Fprintf(&b, "driftguard dev\n")
	fmt.Fprintf(&b, "  kafka:     %s\n", strings.Join(brokers, ","))
	fmt.Fprintf(&b, "  webhooks:  POST %s{stream}   streams: %s\n", webhookURL, strings.Join(cfg.StreamNames(), ", "))
	if len(demoSecretStreams) > 0 {
		fmt.Fprintf(&b, "  secret:    %s (demo secret for %s; set DRIFTGUARD_SECRETS_<STREAM> to use your own)\n", demoSecret, strings.Join(demoSecretStreams, ", "))
	}
	fmt.Fprintf(&b, "  metrics:   %s/metrics   health: /healthz /readyz\n", strings.TrimSuffix(webhookURL, "/v1/webhooks/"))
	fmt.Fprintf(&b, "  page:      %s   (the realtime bridge; a demo token for %q, valid a day)\n", pageURL, pageUser)
	fmt.Fprintf(&b, "  %s\n", chNote)
	if demo != "" {
		fmt.Fprintf(&b, "  demo:      %s\n", strings.ReplaceAll(demo, "\n", "\n             "))
	}
	fmt.Fprintf(&b, "  Ctrl-C stops everything.\n")
	_, _ = io.WriteString(w, b.String())
}
