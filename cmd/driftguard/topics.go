package main

// `driftguard topics`: every topic of the catalogue, created or checked,
// its durability and retention included.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/topics"
)

func topicsFlags(fs *flag.FlagSet) runner {
	checkOnly := fs.Bool("check", false, "check only, create nothing")
	return func(ctx context.Context, env *environment) error {
		return runTopics(ctx, env, !*checkOnly)
	}
}

func runTopics(ctx context.Context, env *environment, create bool) error {
	conn, cl, err := kafka.ConnectClient(env.cfg, nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := conn.Check(ctx, cl, kafka.Access{}); err != nil {
		return err
	}
	statuses, err := kafka.EnsureTopics(ctx, cl, env.cfg, create)
	err = conn.Explain(err)
	if len(statuses) == 0 {
		return err
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tCLEANUP\tRETENTION\tREPLICAS\tMIN_ISR\tSTATUS")
	for _, s := range statuses {
		status := "ok"
		switch {
		case len(s.Weak) > 0:
			status = "weak"
		case len(s.Drift) > 0:
			status = "differs"
		case s.Unchecked != "":
			status = "unchecked"
		case s.Created:
			status = "created"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\n", s.Spec.Name, s.Spec.Partitions, s.Spec.CleanupPolicy(), s.Spec.RetentionText(), s.Replicas, s.MinInsync, status)
	}
	_ = tw.Flush()
	// A weak topic, another retention or configs it may not read fail the
	// command (and so the chart's setup hook), not the processors, which
	// only warn of them.
	return errors.Join(err, topics.Weak(statuses), topics.Drift(statuses), topics.Unchecked(statuses))
}
