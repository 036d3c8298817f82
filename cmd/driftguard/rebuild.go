package main

// `driftguard sink --rebuild` and `driftguard retention`: ClickHouse
// emptied and refilled from Kafka, and its rows kept for as long as
// clickhouse.retention says.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

func sinkFlags(fs *flag.FlagSet) runner {
	rebuild := fs.Bool("rebuild", false, "first empty the sink's tables and delete its consumer group, then run, refilling them from each topic's log start; every sink must be stopped")
	yes := fs.Bool("yes", false, "with --rebuild: do it; without, only say what would be emptied")
	return func(ctx context.Context, env *environment) error {
		if *yes && !*rebuild {
			return usageError{errors.New("--yes confirms --rebuild, which is not set")}
		}
		return runSinkRebuilding(ctx, env, *rebuild, *yes)
	}
}

// rebuildSink empties what the sink fills, once confirmed with yes;
// without yes it prints what it would empty and refuses.
func rebuildSink(ctx context.Context, env *environment, s *sinkch.Sink, yes bool) error {
	if !yes {
		plan, err := s.PlanRebuild(ctx)
		if err != nil {
			return err
		}
		printRebuild(env, plan, "would empty")
		return usageError{errors.New("--rebuild empties the tables above: run again with --yes to do it")}
	}
	plan, err := s.Rebuild(ctx)
	if err != nil {
		return err
	}
	printRebuild(env, plan, "emptied")
	return nil
}

func printRebuild(env *environment, plan sinkch.RebuildPlan, done string) {
	fmt.Fprintf(env.stdout, "rebuild of database %s, consumer group %s (read again from each topic's log start):\n", env.cfg.ClickHouse.Database, plan.Group)
	for _, t := range plan.Tables {
		fmt.Fprintf(env.stdout, "  %s %s (%d rows)\n", done, t.Table, t.Rows)
	}
}

func retentionFlags(fs *flag.FlagSet) runner {
	dryRun := fs.Bool("dry-run", false, "only print what would be done")
	printTTL := fs.Bool("print", false, "print the statements that set the tables' TTLs on a server with TTL (19.6 and later), connect to nothing")
	return func(ctx context.Context, env *environment) error {
		if *printTTL {
			for _, stmt := range sinkch.TTLStatements(env.cfg.ClickHouse) {
				fmt.Fprintf(env.stdout, "%s;\n\n", stmt)
			}
			return nil
		}
		conn, err := sinkch.Open(ctx, env.cfg.ClickHouse)
		if err != nil {
			return err
		}
		defer conn.Close()
		actions, err := sinkch.ApplyRetention(ctx, conn, env.cfg.ClickHouse, time.Now(), *dryRun)
		prefix := ""
		if *dryRun {
			prefix = "(dry run) "
		}
		for _, a := range actions {
			fmt.Fprintf(env.stdout, "%s%s\n", prefix, a)
		}
		if err == nil && len(actions) == 0 {
			fmt.Fprintln(env.stdout, "nothing to do: every table is within clickhouse.retention (0 keeps rows forever)")
		}
		return err
	}
}
