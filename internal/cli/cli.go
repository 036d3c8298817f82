// Package cli is driftguard's command line: it parses a subcommand and its
// flags, loads the configuration, and runs the matching component. The main
// package only hands it the process's arguments and streams.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/devmode"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/processors"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

const usage = `driftguard turns unordered, duplicated webhooks into per-entity ordered state on Kafka.

Usage: driftguard <command> [--config FILE] [flags]

Commands:
  dev       every component in one process on an embedded Kafka (--demo sends demo traffic)
  ingest    the webhook HTTP edge
  process   the ordering processors (one goka group per stream; --streams a,b for some)
  sink      the ClickHouse sink
  migrate   create or upgrade the ClickHouse database and tables (--print: only print the DDL)
  topics    create and check every Kafka topic of the catalogue (--check: only check)
  config    print an example configuration file

The config file can also be named by DRIFTGUARD_CONFIG; DRIFTGUARD_* variables
override it (see the README).
`

// Run runs one command and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "dev", "ingest", "process", "sink", "migrate", "topics", "config":
	default:
		fmt.Fprintf(stderr, "driftguard: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	fs := flag.NewFlagSet("driftguard "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", os.Getenv("DRIFTGUARD_CONFIG"), "configuration file (YAML)")
	demo := fs.Bool("demo", false, "dev: send signed, shuffled, duplicated presence webhooks")
	checkOnly := fs.Bool("check", false, "topics: check only, create nothing")
	printOnly := fs.Bool("print", false, "migrate: print every migration's statements, connect to nothing")
	only := fs.String("streams", "", "process: run only these streams (comma-separated), e.g. to scale one stream on its own")
	if err := fs.Parse(rest); err != nil {
		return 2
	}
	if cmd == "config" {
		_, _ = stdout.Write(config.Example())
		return 0
	}
	cfg, err := config.Load(*configPath, os.Environ())
	if err != nil {
		fmt.Fprintf(stderr, "driftguard: configuration is not valid:\n%s\n", indent(err.Error()))
		return 2
	}
	log := telemetry.NewLogger(stderr, cfg.Telemetry.LogLevel, cmd == "dev")
	for _, w := range cfg.Warnings {
		log.Warn("config: " + w)
	}
	switch cmd {
	case "dev":
		err = devmode.Run(ctx, cfg, devmode.Options{Demo: *demo, Out: stdout, Log: log})
	case "ingest":
		err = runWithOps(ctx, cfg, log, false, func(ops *telemetry.Ops) service.Service {
			return ingest.NewService(cfg, cfg.BrokersOrDefault(), log, ops)
		})
	case "process":
		if err = keepStreams(cfg, *only); err != nil {
			fmt.Fprintf(stderr, "driftguard process: %s\n", err)
			return 2
		}
		err = runWithOps(ctx, cfg, log, true, func(ops *telemetry.Ops) service.Service {
			return processors.NewService(cfg, cfg.BrokersOrDefault(), cfg.DataDir, log, ops)
		})
	case "sink":
		err = runSink(ctx, cfg, log)
	case "migrate":
		if *printOnly {
			err = printMigrations(cfg.ClickHouse.Database, stdout)
			break
		}
		err = runMigrate(ctx, cfg, log, stdout)
	case "topics":
		err = runTopics(ctx, cfg, !*checkOnly, stdout)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "driftguard %s: %s\n", cmd, err)
		return 1
	}
	return 0
}

// keepStreams drops every stream not in the comma-separated list (all
// streams when it is empty).
func keepStreams(cfg *config.Config, list string) error {
	if list == "" {
		return nil
	}
	keep := map[string]*config.Stream{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		s, ok := cfg.Streams[name]
		if !ok {
			return fmt.Errorf("--streams names %q, which is not in the catalogue (%s)", name, strings.Join(cfg.StreamNames(), ", "))
		}
		keep[name] = s
	}
	cfg.Streams = keep
	return nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// runWithOps runs a component; with serveOps it also serves /metrics,
// /healthz and /readyz on the telemetry address (ingest serves them on its
// own listener).
func runWithOps(ctx context.Context, cfg *config.Config, log *slog.Logger, serveOps bool, build func(*telemetry.Ops) service.Service) error {
	ops := telemetry.NewOps()
	services := []service.Service{build(ops)}
	if serveOps {
		mux := http.NewServeMux()
		ops.Register(mux)
		services = append(services, service.Func{Label: "telemetry", Fn: func(ctx context.Context) error {
			return telemetry.Serve(ctx, cfg.Telemetry.Addr, mux, log)
		}})
	}
	return service.RunAll(ctx, services...)
}

func runSink(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	conn, err := sinkch.Open(ctx, cfg.ClickHouse)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Idempotent, so every replica may run it; `migrate` exists for teams
	// that prefer a separate step.
	if _, err := sinkch.Migrate(ctx, conn, cfg.ClickHouse.Database, log); err != nil {
		return err
	}
	return runWithOps(ctx, cfg, log, true, func(ops *telemetry.Ops) service.Service {
		return sinkch.New(cfg, cfg.BrokersOrDefault(), conn, log, ops)
	})
}

func runMigrate(ctx context.Context, cfg *config.Config, log *slog.Logger, out io.Writer) error {
	conn, err := sinkch.Open(ctx, cfg.ClickHouse)
	if err != nil {
		return err
	}
	defer conn.Close()
	done, err := sinkch.Migrate(ctx, conn, cfg.ClickHouse.Database, log)
	for _, m := range done {
		fmt.Fprintf(out, "applied %04d_%s\n", m.Version, m.Name)
	}
	if err == nil {
		fmt.Fprintf(out, "database %s is up to date (%d migrations applied now)\n", cfg.ClickHouse.Database, len(done))
	}
	return err
}

// printMigrations writes every migration's statements as migrate would run
// them, each ending in ";" and a blank line: for review, for applying by
// hand, and for the check on a current ClickHouse (scripts/chdb-ddl.sh).
func printMigrations(database string, out io.Writer) error {
	migrations, err := sinkch.Migrations(database)
	if err != nil {
		return err
	}
	for _, m := range migrations {
		fmt.Fprintf(out, "-- %04d_%s\n", m.Version, m.Name)
		for _, stmt := range m.Statements {
			fmt.Fprintf(out, "%s;\n\n", stmt)
		}
	}
	return nil
}

func runTopics(ctx context.Context, cfg *config.Config, create bool, out io.Writer) error {
	cl, err := kafka.NewClient(cfg.BrokersOrDefault())
	if err != nil {
		return err
	}
	defer cl.Close()
	statuses, err := kafka.EnsureTopics(ctx, cl, cfg, create)
	if len(statuses) == 0 {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tCLEANUP\tSTATUS")
	for _, s := range statuses {
		status := "ok"
		if s.Created {
			status = "created"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.Spec.Name, s.Spec.Partitions, s.Spec.CleanupPolicy(), status)
	}
	_ = tw.Flush()
	return err
}
