package main

// The command line: each subcommand with its own flags, the configuration
// it loads, and the component it runs.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/telemetry"
)

// command is one subcommand.
type command struct {
	name string
	// args is how its flags read in the usage line.
	args    string
	summary string
	// noConfig: the command loads no configuration (and takes no --config).
	noConfig bool
	// noConfigFlag names a bool flag that, set, makes the command load no
	// configuration: `config --example` prints the example file even
	// where the configuration in force is broken.
	noConfigFlag string
	// component: the command runs a component, which logs the build at
	// start and sends its continuous profiles where configured.
	component bool
	// flags defines the command's own flags and returns what runs it.
	flags func(fs *flag.FlagSet) runner
	// operands is how many arguments the command takes besides its
	// flags (environment.operands), before or among them.
	operands int
}

// runner runs a command once its flags are parsed and its configuration
// loaded (nil for a command that loads none).
type runner func(ctx context.Context, env *environment) error

// environment is what every command runs with.
type environment struct {
	cfg            *config.Config
	log            *slog.Logger
	stdout, stderr io.Writer
	// operands are the command's arguments besides its flags.
	operands []string
}

// commands are the subcommands in the order the help lists them.
var commands = []command{
	{name: "dev", args: "[--demo] [--no-sink] [--public]", summary: "every component in one process on an embedded Kafka (--demo sends demo traffic)", component: true, flags: devFlags},
	{name: "ingest", summary: "the webhook HTTP edge", component: true, flags: func(*flag.FlagSet) runner { return runIngest }},
	{name: "process", args: "[--streams a,b] [--no-create]", summary: "the ordering processors (each stream's goka graph, exactly once; --streams a,b for some; --no-create: only check the topics)", component: true, flags: processFlags},
	{name: "sink", args: "[--rebuild [--yes]]", summary: "the ClickHouse sink (--rebuild: empty its tables and refill them from Kafka, every sink stopped)", component: true, flags: sinkFlags},
	{name: "relay", summary: "the replay relay: POST gapless streams' replay requests to each stream's replay.url, signed", component: true, flags: func(*flag.FlagSet) runner { return runRelay }},
	{name: "bridge", summary: "the realtime bridge: ordered state to browsers over SSE, and the page", component: true, flags: func(*flag.FlagSet) runner { return runBridge }},
	{name: "token", args: "--user U [--streams a,b] [--ttl 1h] [--device D] [--kid K]", summary: "print a token for the bridge, signed with bridge.secret or the --kid key of bridge.tokens.hs256_keys", flags: tokenFlags},
	{name: "migrate", args: "[--print]", summary: "create or upgrade the ClickHouse database and tables (--print: only print the DDL)", flags: migrateFlags},
	{name: "retention", args: "[--dry-run] [--print]", summary: "apply clickhouse.retention: set the tables' TTLs, or drop the months past it on servers without TTL", flags: retentionFlags},
	{name: "topics", args: "[--check]", summary: "create and check every Kafka topic of the catalogue (--check: only check)", flags: topicsFlags},
	{name: "probe", args: "[--webhook URL --stream S --body JSON] [--ready URL]...", summary: "sign and post one webhook expecting 202, and read /readyz URLs expecting 200 (the chart's helm test)", noConfig: true, flags: probeFlags},
	{name: "config", args: "[--example]", summary: "print the configuration in force, secrets redacted (--example: a commented example file)", noConfigFlag: "example", flags: configFlags},
	{name: "admin", args: "<skip-gap|abandon|release|reset> --stream S --key K [--reason R] [--yes] [--as U] [--wait 15s]", summary: "issue an operator action for one key, decided in order by the stream's processor, and print its outcome", flags: adminFlags, operands: 1},
	{name: "redrive", args: "--stream S [--reason R,...] [--since T] [--key K] [--dry-run]", summary: "put dead letters (expired orphans, buffer overflows; released or reset events when --reason names them) back into <stream>.in, to be decided again; safe to run twice", flags: redriveFlags},
	{name: "inspect", args: "STREAM KEY [--last N] [--json]", summary: "what the processor holds for a key (version, dedup memory, buffers, quarantine, timers) and its last decisions", flags: inspectFlags, operands: 2},
	{name: "explain", args: "STREAM EVENT_ID [--from auto|kafka|clickhouse] [--json]", summary: "where an event is and every decision made for it", flags: explainFlags, operands: 2},
	{name: "version", summary: "print the version and the VCS revision the binary was built from", noConfig: true, flags: func(*flag.FlagSet) runner { return printVersion }},
}

// usage is the help of the whole command line.
func usage() string {
	var b strings.Builder
	b.WriteString("driftguard turns unordered, duplicated webhooks into per-entity ordered state on Kafka.\n\n")
	b.WriteString("Usage: driftguard <command> [--config FILE] [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", c.name, c.summary)
	}
	b.WriteString(`
The config file can also be named by DRIFTGUARD_CONFIG; DRIFTGUARD_* variables
override it (see docs/operations.md). "driftguard <command> --help" shows a command's flags;
"driftguard --version" is "driftguard version".
`)
	return b.String()
}

// run runs one command and returns the process exit code: 0, 1 when the
// command failed, 2 for a usage or configuration error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		args = []string{"version"}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage())
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	i := indexOfCommand(args[0])
	if i < 0 {
		fmt.Fprintf(stderr, "driftguard: unknown command %q\n\n%s", args[0], usage())
		return 2
	}
	c := commands[i]
	fs := flag.NewFlagSet("driftguard "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var configPath *string
	if !c.noConfig {
		configPath = fs.String("config", os.Getenv("DRIFTGUARD_CONFIG"), "configuration file (YAML)")
	}
	runCommand := c.flags(fs)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: driftguard %s", c.name)
		if !c.noConfig {
			fmt.Fprint(out, " [--config FILE]")
		}
		if c.args != "" {
			fmt.Fprint(out, " "+c.args)
		}
		fmt.Fprintf(out, "\n\n%s.\n", strings.ToUpper(c.summary[:1])+c.summary[1:])
		if hasFlags(fs) {
			fmt.Fprint(out, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	operands, err := takeOperands(fs, c.operands)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || len(operands) < c.operands {
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "driftguard %s: unexpected argument %q\n", c.name, fs.Arg(0))
		} else {
			fmt.Fprintf(stderr, "driftguard %s: %d arguments needed, %d given\n", c.name, c.operands, len(operands))
		}
		fs.Usage()
		return 2
	}
	env := &environment{stdout: stdout, stderr: stderr, log: telemetry.OrDiscard(nil), operands: operands}
	if !c.noConfig && !(c.noConfigFlag != "" && fs.Lookup(c.noConfigFlag).Value.String() == "true") {
		cfg, err := config.Load(*configPath, os.Environ())
		if err != nil {
			fmt.Fprintf(stderr, "driftguard: configuration is not valid:\n%s\n", indent(err.Error()))
			return 2
		}
		env.cfg = cfg
		env.log = telemetry.NewLogger(stderr, cfg.Telemetry.LogLevel, c.name == "dev")
		for _, w := range cfg.Warnings {
			env.log.Warn("config: " + w)
		}
	}
	if c.component {
		b := telemetry.BuildInfo()
		env.log.Info("driftguard starting", "component", c.name, "version", b.Version, "revision", b.Revision, "go", b.GoVersion)
		tc := env.cfg.Telemetry
		stop, err := telemetry.StartProfiling(telemetry.Profiling{Addr: tc.PyroscopeAddr, UploadEvery: tc.PyroscopeUploadEvery,
			BasicAuthUser: tc.PyroscopeBasicAuthUser, BasicAuthPassword: tc.PyroscopeBasicAuthPassword, TenantID: tc.PyroscopeTenantID}, c.name, env.log)
		if err != nil {
			fmt.Fprintf(stderr, "driftguard %s: %s\n", c.name, err)
			return 1
		}
		defer stop()
	}
	err = runCommand(ctx, env)
	var usageErr usageError
	switch {
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "driftguard %s: %s\n", c.name, err)
		return 2
	case err != nil && !errors.Is(err, context.Canceled):
		fmt.Fprintf(stderr, "driftguard %s: %s\n", c.name, err)
		return 1
	}
	return 0
}

// usageError is a mistake in how a command was called, found once its
// configuration is loaded (a flag naming a stream the catalogue lacks).
type usageError struct{ error }

// takeOperands takes up to n operands from what fs left unparsed,
// parsing the flags after each, so that flags may follow them
// (`inspect S K --json`).
func takeOperands(fs *flag.FlagSet, n int) ([]string, error) {
	var operands []string
	for len(operands) < n && fs.NArg() > 0 {
		operands = append(operands, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return nil, err
		}
	}
	return operands, nil
}

func indexOfCommand(name string) int {
	for i, c := range commands {
		if c.name == name {
			return i
		}
	}
	return -1
}

func hasFlags(fs *flag.FlagSet) bool {
	found := false
	fs.VisitAll(func(*flag.Flag) { found = true })
	return found
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func printVersion(_ context.Context, env *environment) error {
	b := telemetry.BuildInfo()
	revision := b.Revision
	if revision == "" {
		revision = "unknown"
	}
	_, err := fmt.Fprintf(env.stdout, "driftguard %s (revision %s, %s)\n", b.Version, revision, b.GoVersion)
	return err
}

func configFlags(fs *flag.FlagSet) runner {
	example := fs.Bool("example", false, "print a commented example configuration file instead")
	return func(_ context.Context, env *environment) error {
		out := config.Example()
		if !*example {
			var err error
			if out, err = env.cfg.EffectiveYAML(); err != nil {
				return err
			}
		}
		_, err := env.stdout.Write(out)
		return err
	}
}
