package main

// The long-running components, each run as its own subcommand with its
// operational endpoints.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/relay"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
	"github.com/driftguard/driftguard/sinks/realtime"
)

func runIngest(ctx context.Context, env *environment) error {
	return withTelemetry(ctx, env, func(ops *telemetry.Ops) service.Service {
		return ingest.NewService(ingest.ServiceOptions{Config: env.cfg, Logger: env.log, Ops: ops})
	})
}

func processFlags(fs *flag.FlagSet) runner {
	only := fs.String("streams", "", "run only these streams (comma-separated), e.g. to scale one stream on its own")
	noCreate := fs.Bool("no-create", false, "create no topic: check that every topic exists, co-partitioned, and refuse to start naming each one missing (where only an admin creates topics, with `driftguard topics`)")
	return func(ctx context.Context, env *environment) error {
		if err := keepStreams(env.cfg, *only); err != nil {
			return usageError{err}
		}
		return withTelemetry(ctx, env, func(ops *telemetry.Ops) service.Service {
			return processors.NewService(processors.ServiceOptions{Config: env.cfg, Logger: env.log, Ops: ops, NoCreate: *noCreate})
		})
	}
}

// keepStreams drops every stream not in the comma-separated list (all
// streams when it is empty).
func keepStreams(cfg *config.Config, list string) error {
	if list == "" {
		return nil
	}
	keep := map[string]*config.Stream{}
	for _, name := range config.SplitList(list) {
		s, ok := cfg.Streams[name]
		if !ok {
			return fmt.Errorf("--streams names %q, which is not in the catalogue (%s)", name, strings.Join(cfg.StreamNames(), ", "))
		}
		keep[name] = s
	}
	cfg.Streams = keep
	return nil
}

func runSink(ctx context.Context, env *environment) error {
	return runSinkRebuilding(ctx, env, false, false)
}

// runSinkRebuilding runs the sink, after a rebuild when rebuild is set
// (see rebuild.go).
func runSinkRebuilding(ctx context.Context, env *environment, rebuild, yes bool) error {
	conn, err := sinkch.Open(ctx, env.cfg.ClickHouse)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Idempotent, so every replica may run it; `migrate` exists for teams
	// that prefer a separate step.
	if _, err := sinkch.Migrate(ctx, conn, env.cfg.ClickHouse, env.log); err != nil {
		return err
	}
	if rebuild {
		if err := rebuildSink(ctx, env, sinkch.New(sinkch.Options{Config: env.cfg, Conn: conn, Logger: env.log}), yes); err != nil {
			return err
		}
	}
	return withTelemetry(ctx, env, func(ops *telemetry.Ops) service.Service {
		return sinkch.New(sinkch.Options{Config: env.cfg, Conn: conn, Logger: env.log, Ops: ops})
	})
}

// runRelay sends the replay requests of the streams with a replay.url. It
// is a component of its own, not part of the processors: it waits on
// publishers' HTTP endpoints, which must never hold back deciding, and it
// scales and fails apart from them.
func runRelay(ctx context.Context, env *environment) error {
	r, err := relay.New(relay.Options{Config: env.cfg, Logger: env.log})
	if err != nil {
		return err
	}
	return withTelemetry(ctx, env, func(ops *telemetry.Ops) service.Service {
		r.Observe(ops)
		return r
	})
}

// runBridge serves the streams and the page on bridge.addr, and its
// operational endpoints on telemetry.addr.
func runBridge(ctx context.Context, env *environment) error {
	b, err := realtime.New(realtime.Options{Config: env.cfg, Logger: env.log})
	if err != nil {
		return err
	}
	return b.Run(ctx)
}

func tokenFlags(fs *flag.FlagSet) runner {
	user := fs.String("user", "", "the user the token names (sub); for assign streams, a member of the conversations to read")
	streams := fs.String("streams", "*", "the streams it may read, comma-separated, or * for all")
	ttl := fs.Duration("ttl", time.Hour, "how long it is valid")
	device := fs.String("device", "", "the device it is issued to (the device claim): what the user sends through the bridge is this device's; empty, each request names its device with the X-Driftguard-Device header")
	kid := fs.String("kid", "", "sign with this key id's key of bridge.tokens.hs256_keys, named in the token's header; empty, with bridge.secret")
	return func(_ context.Context, env *environment) error {
		switch {
		case *user == "":
			return usageError{errors.New("--user is required")}
		case *ttl <= 0:
			return usageError{errors.New("--ttl must be positive")}
		}
		keys, err := env.cfg.Bridge.TokenKeys()
		if err != nil {
			return err
		}
		key, ok := keys.HS256[*kid]
		switch {
		case !ok && *kid == "":
			return errors.New("token signs with bridge.secret (DRIFTGUARD_BRIDGE_SECRET, at least 32 bytes), or with --kid and a key of bridge.tokens.hs256_keys; neither is set")
		case !ok:
			return fmt.Errorf("bridge.tokens.hs256_keys has no key with kid %q", *kid)
		}
		tok, err := realtime.SignKID(key, *kid, *user, *device, config.SplitList(*streams), time.Now().Add(*ttl))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(env.stdout, tok)
		return err
	}
}

// withTelemetry runs a component and serves its /metrics, /healthz and
// /readyz on the telemetry address.
func withTelemetry(ctx context.Context, env *environment, build func(*telemetry.Ops) service.Service) error {
	ops := telemetry.NewOps()
	ops.Profiles = env.cfg.Telemetry.Pprof
	mux := http.NewServeMux()
	ops.Register(mux)
	if err := mountAdmin(mux, env, nil); err != nil {
		return err
	}
	return service.RunAll(ctx, build(ops), service.Func{Label: "telemetry", Fn: func(ctx context.Context) error {
		return telemetry.Serve(ctx, env.cfg.Telemetry.Addr, mux, env.log)
	}})
}
