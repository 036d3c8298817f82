package main

// `driftguard admin` and the admin endpoints of the operations port: the
// operator actions, issued as control records and decided by the
// processors (internal/admin).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/admin"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/oncall"
)

var adminVerbs = func() []string {
	var v []string
	for _, a := range record.ActionNames {
		v = append(v, string(a))
	}
	return v
}()

func adminFlags(fs *flag.FlagSet) runner {
	stream := fs.String("stream", "", "the stream (required)")
	key := fs.String("key", "", "the entity key (required)")
	reason := fs.String("reason", "", "a note kept with the decision, e.g. a ticket")
	yes := fs.Bool("yes", false, "confirm a reset: the key's state is forgotten")
	as := fs.String("as", "", "who asks, recorded with the decision (default: the operating-system user)")
	wait := fs.Duration("wait", admin.DefaultWait, "how long to wait for the decision before reporting it pending")
	return func(ctx context.Context, env *environment) error {
		req := admin.Request{Stream: *stream, Key: *key, Action: record.ActionName(env.operands[0]), Reason: *reason, Confirm: *yes, RequestedBy: *as}
		switch {
		case !slices.Contains(adminVerbs, string(req.Action)):
			return usageError{fmt.Errorf("say one of %s first, not %q", strings.Join(adminVerbs, ", "), req.Action)}
		case req.Stream == "" || req.Key == "":
			return usageError{errors.New("--stream and --key are required")}
		case req.Action == record.ActionReset && !req.Confirm:
			return usageError{fmt.Errorf("reset forgets everything the processor holds for key %q of %s (buffered and quarantined events go to the DLQ); say --yes to confirm", req.Key, req.Stream)}
		case *wait <= 0:
			return usageError{errors.New("--wait must be positive")}
		}
		if req.RequestedBy == "" {
			req.RequestedBy = osUser()
		}
		conn, err := kafka.Connect(env.cfg, nil)
		if err != nil {
			return err
		}
		is := admin.NewIssuer(env.cfg, conn)
		if err := is.Check(req); err != nil {
			return usageError{err}
		}
		res, err := is.Issue(ctx, req, *wait)
		if err != nil {
			return err
		}
		admin.Audit(env.log, "cli", req, res)
		printResult(env, res, *wait)
		if !res.Pending && res.Outcome() != record.Actioned {
			return fmt.Errorf("%s refused: %s %s", req.Action, res.Outcome(), res.Decisions[0].Reason)
		}
		return nil
	}
}

// osUser is who runs the command: the operating system's user, else $USER.
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

// printResult prints the action's decision, one line a decision.
func printResult(env *environment, res *admin.Result, wait time.Duration) {
	out, names := env.stdout, env.cfg.Kafka.Naming().For(res.Stream)
	fmt.Fprintf(out, "%s %s/%s: event %s at %s partition %d offset %d\n", res.Action, res.Stream, res.Key, res.EventID,
		names.In, res.Partition, res.Offset)
	if res.Pending {
		fmt.Fprintf(out, "pending: not decided within %s; the processor decides it when it reaches it (look for event %s in %s)\n",
			wait, res.EventID, names.Outcomes)
		return
	}
	for _, d := range res.Decisions {
		line := fmt.Sprintf("  %-10s", d.Outcome)
		if d.Reason != "" {
			line += " " + string(d.Reason)
		}
		switch {
		case d.EventType == record.ControlType:
			line += fmt.Sprintf(" (the action, requested by %s)", d.RequestedBy)
		case d.Outcome == record.Skipped:
			line += fmt.Sprintf(" sequences %d..%d", d.Version, d.Version+d.Gap-1)
		default:
			line += fmt.Sprintf(" event %s version %d", d.EventID, d.Version)
		}
		fmt.Fprintln(out, line)
	}
}

// mountAdmin serves the admin endpoints on mux, the operations port's,
// when telemetry.admin_token is set: the actions, inspect and explain over
// brokers (the configured ones when nil), and the extra routes. Explain
// reads the outcomes topic there: a component's operations port needs no
// ClickHouse of its own.
func mountAdmin(mux *http.ServeMux, env *environment, brokers []string, extra ...admin.Route) error {
	tokens, err := admin.ParseTokens(env.cfg.Telemetry.AdminToken)
	if err != nil {
		return fmt.Errorf("in telemetry.admin_token: %w", err)
	}
	if len(tokens) == 0 {
		return nil
	}
	conn, err := kafka.Connect(env.cfg, brokers)
	if err != nil {
		return err
	}
	tools := newOncallTools(env.cfg, conn)
	extra = append(extra, admin.Route{Pattern: oncall.KeyPattern, Handler: tools.KeyHandler()},
		admin.Route{Pattern: oncall.EventPattern, Handler: tools.EventHandler()})
	admin.Mount(mux, admin.ServerOptions{Tokens: tokens, Issuer: admin.NewIssuer(env.cfg, conn), Logger: env.log}, extra...)
	env.log.Info("admin endpoints on", "addr", env.cfg.Telemetry.Addr, "subjects", len(tokens))
	return nil
}
