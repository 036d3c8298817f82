package main

// `driftguard redrive`, `inspect` and `explain`: the on-call tools of
// package oncall, composed with what the processors hold for a key
// (processors.ReadEntity) and the decisions ClickHouse keeps
// (clickhouse.EventDecisions). The admin endpoints serve the same Tools.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/oncall"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/sinks/clickhouse"
)

// newOncallTools builds the on-call tools of cfg on conn, without
// ClickHouse.
func newOncallTools(cfg *config.Config, conn kafka.Conn) *oncall.Tools {
	names := cfg.Kafka.Naming()
	return &oncall.Tools{
		Conn: conn, Names: names,
		Known: func(stream string) bool { return cfg.Streams[stream] != nil },
		Holds: func(ctx context.Context, stream, key string) (any, bool, error) {
			e, found, err := processors.ReadEntity(ctx, conn, names, stream, key)
			if err != nil || !found {
				return nil, false, err
			}
			return processors.Inspect(cfg.Streams[stream], key, e), true, nil
		},
	}
}

// withClickHouse has t read explained decisions from the configured
// ClickHouse, connected now; close ends the connection.
func withClickHouse(ctx context.Context, t *oncall.Tools, c config.ClickHouse) (close func(), err error) {
	conn, err := clickhouse.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	t.FromClickHouse = func(ctx context.Context, stream, eventID string) ([]record.Outcome, error) {
		return clickhouse.EventDecisions(ctx, conn, c.Database, stream, eventID)
	}
	return func() { _ = conn.Close() }, nil
}

func knownStream(env *environment, stream string) error {
	if env.cfg.Streams[stream] == nil {
		return usageError{fmt.Errorf("unknown stream %q (streams: %s)", stream, strings.Join(env.cfg.StreamNames(), ", "))}
	}
	return nil
}

// streamOperands are the operands of inspect and explain, a stream of
// the catalogue and a key or event id, and the Kafka connection to read
// them with.
func streamOperands(env *environment) (stream, arg string, conn kafka.Conn, err error) {
	stream, arg = env.operands[0], env.operands[1]
	if err = knownStream(env, stream); err == nil {
		conn, err = kafka.Connect(env.cfg, nil)
	}
	return stream, arg, conn, err
}

func inspectFlags(fs *flag.FlagSet) runner {
	last := fs.Int("last", oncall.DefaultLast, "how many of the key's last decisions to show")
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, env *environment) error {
		stream, key, conn, err := streamOperands(env)
		if err != nil {
			return err
		}
		rep, err := newOncallTools(env.cfg, conn).Inspect(ctx, stream, key, max(0, *last))
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(env.stdout, rep)
		}
		return printInspection(env.stdout, rep)
	}
}

func explainFlags(fs *flag.FlagSet) runner {
	from := fs.String("from", "auto", "where to read the decisions: kafka (<stream>.outcomes), clickhouse, or auto (ClickHouse when reachable and it knows the event, else Kafka)")
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, env *environment) error {
		stream, id, conn, err := streamOperands(env)
		if err != nil {
			return err
		}
		tools := newOncallTools(env.cfg, conn)
		switch *from {
		case "kafka":
		case "clickhouse", "auto":
			closeCH, err := withClickHouse(ctx, tools, env.cfg.ClickHouse)
			switch {
			case err == nil:
				defer closeCH()
			case *from == "clickhouse":
				return err
			default:
				env.log.Info("ClickHouse unreachable; reading the decisions from Kafka", "err", err)
			}
		default:
			return usageError{fmt.Errorf("--from %q: want kafka, clickhouse or auto", *from)}
		}
		x, err := tools.Explain(ctx, stream, id)
		if err != nil {
			return err
		}
		if *from == "clickhouse" && x.Source != oncall.SourceClickHouse {
			env.log.Info("ClickHouse knows no decision of the event; read from Kafka")
		}
		if *asJSON {
			return printJSON(env.stdout, x)
		}
		return printExplanation(env.stdout, x)
	}
}

func redriveFlags(fs *flag.FlagSet) runner {
	stream := fs.String("stream", "", "the stream whose dead letters to redrive (required)")
	reasons := fs.String("reason", "", "only dead letters of these reasons, comma-separated (default: "+joinReasons(oncall.DefaultRedriveReasons)+"; released and reset only when named)")
	since := fs.String("since", "", "only dead letters written since T: an RFC 3339 time, or a duration back from now (24h)")
	key := fs.String("key", "", "only the dead letters of this entity key")
	dryRun := fs.Bool("dry-run", false, "print what would be redriven, write nothing")
	return func(ctx context.Context, env *environment) error {
		if *stream == "" {
			return usageError{fmt.Errorf("--stream is required")}
		}
		if err := knownStream(env, *stream); err != nil {
			return err
		}
		opts := oncall.RedriveOptions{Stream: *stream, Names: env.cfg.Kafka.Naming(), Key: *key, DryRun: *dryRun}
		for _, r := range strings.Split(*reasons, ",") {
			if r = strings.TrimSpace(r); r != "" {
				// A misspelt reason would match nothing and look like an empty DLQ.
				if !slices.Contains(record.Reasons, record.Reason(r)) {
					return usageError{fmt.Errorf("--reason %q: not a reason driftguard records", r)}
				}
				opts.Reasons = append(opts.Reasons, record.Reason(r))
			}
		}
		var err error
		if opts.Since, err = parseSince(*since, time.Now()); err != nil {
			return usageError{err}
		}
		conn, err := kafka.Connect(env.cfg, nil)
		if err != nil {
			return err
		}
		if *dryRun {
			opts.Each = func(dl oncall.DeadLetterAt, action string) {
				verb := "would redrive"
				if action != oncall.ActionRedrive {
					verb = "would skip (" + action + ")"
				}
				fmt.Fprintf(env.stdout, "%s %s key=%s event=%s reason=%s\n", verb, dl.Position, dl.Key, dl.EventID, dl.Reason)
			}
		} else if f, ok := env.stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			var bar *progressbar.ProgressBar
			opts.Progress = func(done, total int) {
				if bar == nil {
					bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("redriving"),
						progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
				}
				_ = bar.Set(done)
			}
		}
		sum, err := oncall.Redrive(ctx, conn, opts)
		printRedriveSummary(env.stdout, *stream, sum)
		return err
	}
}

// parseSince reads --since: an RFC 3339 time or a duration before now;
// "" is the zero time (no bound).
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration (24h)", v)
	}
	return t, nil
}

func joinReasons(rs []record.Reason) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = string(r)
	}
	return strings.Join(parts, ",")
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printRedriveSummary(w io.Writer, stream string, s oncall.RedriveSummary) {
	verb := "redriven"
	if s.DryRun {
		verb = "would be redriven"
	}
	fmt.Fprintf(w, "%s: %d dead letters read, %d matched, %d %s", stream, s.Read, s.Matched, s.Redriven, verb)
	for _, why := range []string{oncall.SkipRedriven, oncall.SkipNotInput, oncall.SkipNotRedrivable} {
		if n := s.Skipped[why]; n > 0 {
			fmt.Fprintf(w, ", %d skipped (%s)", n, why)
		}
	}
	fmt.Fprintln(w)
}

// msTime prints a unix ms time, "-" for none.
func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func printInspection(w io.Writer, rep oncall.KeyReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "stream %s, key %q\n", rep.Stream, rep.Key)
	in, ok := rep.Holds.(processors.Inspection)
	if !ok {
		fmt.Fprintln(tw, "the processor holds nothing for this key")
	} else {
		fmt.Fprintf(tw, "policy\t%s\n", in.Policy)
		fmt.Fprintf(tw, "version\t%d (revision %d, applied %t)\n", in.Version, in.Revision, in.Applied)
		fmt.Fprintf(tw, "terminal\t%t\n", in.Terminal)
		fmt.Fprintf(tw, "updated\t%s (expires %s)\n", msTime(in.UpdatedAtMs), msTime(in.ExpiresAtMs))
		fmt.Fprintf(tw, "dedup memory\t%s\n", dedupText(in.Dedup))
		for _, d := range in.Devices {
			fmt.Fprintf(tw, "device %s\tversion %d, %s, updated %s, expires %s; dedup %s\n", d.Device, d.Version, d.Value, msTime(d.UpdatedAtMs), msTime(d.ExpiresAtMs), dedupText(d.Dedup))
		}
		fmt.Fprintf(tw, "buffered\t%s\n", heldText(in.Buffered, true))
		fmt.Fprintf(tw, "quarantined\t%s\n", heldText(in.Quarantined, false))
		var timers []string
		for _, t := range in.Timers {
			s := fmt.Sprintf("%s at %s", t.Kind, msTime(t.AtMs))
			if t.EventID != "" {
				s += " (" + t.EventID + ")"
			}
			timers = append(timers, s)
		}
		fmt.Fprintf(tw, "timers\t%s\n", orNone(timers))
		if c := in.Chat; c != nil {
			fmt.Fprintf(tw, "members\t%s\n", orNone(c.Members))
			fmt.Fprintf(tw, "sends remembered\t%d of %d\n", c.Sends, c.SendsLimit)
			for _, user := range slices.Sorted(maps.Keys(c.Cursors)) {
				cur := c.Cursors[user]
				fmt.Fprintf(tw, "cursor %s\tread %d, delivered %d\n", user, cur.Read, cur.Delivered)
			}
		}
		if len(in.State) > 0 {
			fmt.Fprintf(tw, "state\t%s\n", in.State)
		}
	}
	fmt.Fprintf(tw, "\nlast %d decisions:\n", len(rep.Decisions))
	printDecisions(tw, rep.Decisions)
	return tw.Flush()
}

func printExplanation(w io.Writer, x oncall.Explanation) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "event %q of stream %s: %s, %s\n", x.EventID, x.Stream, x.Where, x.Detail)
	fmt.Fprintf(tw, "\n%d decisions (read from %s):\n", len(x.Decisions), x.Source)
	printDecisions(tw, x.Decisions)
	if len(x.DeadLetters) > 0 {
		fmt.Fprintf(tw, "\ndead letters:\n  POSITION\tREASON\tKEY\tAT\n")
		for _, dl := range x.DeadLetters {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", dl.Position, dl.Reason, dl.Key, msTime(dl.AtMs))
		}
	}
	return tw.Flush()
}

func printDecisions(tw io.Writer, outs []record.Outcome) {
	if len(outs) == 0 {
		return
	}
	fmt.Fprintln(tw, "  PROCESSED_AT\tOUTCOME\tREASON\tKEY\tVERSION\tEVENT\tINPUT")
	for _, o := range outs {
		reason := string(o.Reason)
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\t%d/%d\n", msTime(o.ProcessedAtMs), o.Outcome, reason, o.Key, o.Version, o.EventID, o.InputPartition, o.InputOffset)
	}
}

func dedupText(d processors.DedupMemory) string {
	s := fmt.Sprintf("%d of %d ids, window %s", d.Size, d.Limit, time.Duration(d.WindowMs)*time.Millisecond)
	if d.Size > 0 {
		s += fmt.Sprintf(" (first sights %s to %s)", msTime(d.OldestMs), msTime(d.NewestMs))
	}
	return s
}

// heldText lists held events: with their sequence when bySeq (a
// buffer), else by id alone (a quarantine, whose children have no
// sequence of their own).
func heldText(held []processors.HeldEvent, bySeq bool) string {
	var parts []string
	for _, h := range held {
		part := fmt.Sprintf("%s (%s, received %s)", h.EventID, h.Type, msTime(h.ReceivedAtMs))
		if bySeq {
			part = fmt.Sprintf("seq %d %s", h.Version, part)
		}
		parts = append(parts, part)
	}
	return orNone(parts)
}

func orNone(parts []string) string {
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
