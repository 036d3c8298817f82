package main

// `driftguard topics`: every topic of the catalogue, created or checked.

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/driftguard/driftguard/internal/kafka"
)

func topicsFlags(fs *flag.FlagSet) runner {
	checkOnly := fs.Bool("check", false, "check only, create nothing")
	return func(ctx context.Context, env *environment) error {
		return runTopics(ctx, env, !*checkOnly)
	}
}

func runTopics(ctx context.Context, env *environment, create bool) error {
	cl, err := kafka.NewClient(env.cfg.BrokersOrDefault())
	if err != nil {
		return err
	}
	defer cl.Close()
	statuses, err := kafka.EnsureTopics(ctx, cl, env.cfg, create)
	if len(statuses) == 0 {
		return err
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
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
