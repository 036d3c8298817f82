package main

// `driftguard migrate`: the ClickHouse database and tables, applied or
// printed.

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/driftguard/driftguard/internal/config"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

func migrateFlags(fs *flag.FlagSet) runner {
	printOnly := fs.Bool("print", false, "print every migration's statements, connect to nothing")
	return func(ctx context.Context, env *environment) error {
		if *printOnly {
			return printMigrations(env.cfg.ClickHouse, env.stdout)
		}
		return runMigrate(ctx, env)
	}
}

func runMigrate(ctx context.Context, env *environment) error {
	conn, err := sinkch.Open(ctx, env.cfg.ClickHouse)
	if err != nil {
		return err
	}
	defer conn.Close()
	database := env.cfg.ClickHouse.Database
	done, err := sinkch.Migrate(ctx, conn, env.cfg.ClickHouse, env.log)
	for _, m := range done {
		fmt.Fprintf(env.stdout, "applied %04d_%s\n", m.Version, m.Name)
	}
	if err == nil {
		fmt.Fprintf(env.stdout, "database %s is up to date (%d migrations applied now)\n", database, len(done))
	}
	return err
}

// printMigrations writes the statements migrate would run, the bootstrap
// (as "0000_bootstrap") and then every migration's, each ending in ";" and
// a blank line: for review, for applying by hand, and for the check on a
// current ClickHouse (scripts/chdb-ddl.sh). With clickhouse.cluster set
// they are the cluster's: ON CLUSTER, Replicated engines.
func printMigrations(c config.ClickHouse, out io.Writer) error {
	bootstrap, err := sinkch.Bootstrap(c)
	if err != nil {
		return err
	}
	migrations, err := sinkch.Migrations(c)
	if err != nil {
		return err
	}
	all := append([]sinkch.Migration{{Name: "bootstrap", Statements: bootstrap}}, migrations...)
	for _, m := range all {
		fmt.Fprintf(out, "-- %04d_%s\n", m.Version, m.Name)
		for _, stmt := range m.Statements {
			fmt.Fprintf(out, "%s;\n\n", stmt)
		}
	}
	return nil
}
