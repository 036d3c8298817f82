// Command loadgen sends signed webhooks to a contender of the benchmarks
// (driftguard's ingest, or a peer that takes the same webhooks) and
// records how each ended, and the state they must leave.
//
//	go run ./loadgen --url http://127.0.0.1:8080 --secret whsec_... \
//	    --mix presence=1 --warmup 5000 --count 50000 --connections 64 --out run/
//
// It writes, in --out: sent.jsonl (one model.Delivery a line),
// expected.json (the model.State the webhooks must leave) and
// summary.json. On stdout it prints a line as each phase starts and ends,
//
//	phase=measure event=start at_us=1764600000000000
//
// so that a runner can sample the contender's processes at the edges of
// the measured window.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/benchmarks/stats"
	"github.com/driftguard/driftguard/benchmarks/workload"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/webhook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// Summary is summary.json: what was sent, per phase, and the measured
// window's figures.
type Summary struct {
	Phases map[string]PhaseSummary `json:"phases"`
	// Measured is the measured phase: from the first of its webhooks
	// handed to a connection to the last one answered.
	WindowStartMicros int64   `json:"window_start_us"`
	WindowEndMicros   int64   `json:"window_end_us"`
	AcceptedPerSecond float64 `json:"accepted_per_second"`
	// AckMs are the ack latency percentiles of the measured phase's
	// accepted webhooks (their last attempt).
	AckMs model.Percentiles `json:"ack_ms"`
	Seed  uint64            `json:"seed"`
}

// PhaseSummary counts one phase's deliveries by how they ended.
type PhaseSummary struct {
	Sent     int         `json:"sent"`
	Accepted int         `json:"accepted"`
	Retried  int         `json:"retried"`
	ByStatus map[int]int `json:"by_status"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:8080", "the contender's base URL; webhooks go to URL/v1/webhooks/{stream}")
	secret := fs.String("secret", os.Getenv("LOADGEN_SECRET"), "the signing secret of every stream (default $LOADGEN_SECRET)")
	scheme := fs.String("scheme", config.SchemeStandardWebhooks, "signature scheme: standard-webhooks, hmac-sha256-hex or github")
	mix := fs.String("mix", "presence=1", "streams and their weights, e.g. presence=3,orders=1")
	keys := fs.String("keys", "", "entities live at once per stream, e.g. presence=1000 (defaults: presence=1000,workflow=200,chat=50,orders=500)")
	warmup := fs.Int("warmup", 0, "webhooks sent before the measured window")
	count := fs.Int("count", 10000, "webhooks in the measured window")
	cooldown := fs.Int("cooldown", 0, "webhooks sent after the measured window, so that its last ones are processed under load")
	rate := fs.Float64("rate", 0, "target webhooks a second; 0 sends as fast as the connections go")
	connections := fs.Int("connections", 32, "concurrent connections")
	timeout := fs.Duration("timeout", 10*time.Second, "the longest one attempt waits for its answer")
	attempts := fs.Int("attempts", 20, "attempts per webhook on a 5xx, a 429 or no answer")
	giveUp := fs.Duration("give-up", time.Minute, "the longest one webhook is retried")
	o := workload.Options{}
	fs.IntVar(&o.Disorder, "disorder", 0, "permutation window: each webhook goes up to this many places from where it was made")
	fs.Float64Var(&o.Duplicates, "duplicates", 0, "share of webhooks sent again under the same event id")
	fs.Float64Var(&o.Retries, "retries", 0, "share of webhooks sent again under a new event id")
	fs.Float64Var(&o.Orphans, "orphans", 0, "orders: share whose parent never comes")
	fs.Float64Var(&o.LateParents, "late-parents", 0, "orders: share whose parent comes after its children")
	fs.IntVar(&o.ParentDelay, "parent-delay", 20, "orders: places a late parent comes after where it was made")
	fs.Float64Var(&o.Gaps, "gaps", 0, "presence: share of sequence numbers skipped; workflow: share of operations with a step that never comes")
	fs.Float64Var(&o.Terminal, "terminal", 0.8, "workflow: share of operations ending in a terminal step")
	fs.Float64Var(&o.AfterTerminal, "after-terminal", 0, "workflow: share of terminal operations sending one more step")
	fs.Uint64Var(&o.Seed, "seed", uint64(time.Now().UnixNano()), "random seed; it also names the run in ids and keys")
	out := fs.String("out", ".", "folder for sent.jsonl, expected.json and summary.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *secret == "" {
		return errors.New("--secret (or LOADGEN_SECRET) is required")
	}
	if *connections < 1 || *count < 0 || *warmup < 0 || *cooldown < 0 {
		return errors.New("--connections must be at least 1, and the counts not negative")
	}
	var err error
	if o.Mix, err = workload.Parse(*mix); err != nil {
		return fmt.Errorf("--mix: %w", err)
	}
	if *keys != "" {
		if o.Keys, err = workload.Parse(*keys); err != nil {
			return fmt.Errorf("--keys: %w", err)
		}
	}
	if o.Terminal == 0 {
		o.Terminal = -1 // the flag's 0 means none
	}
	o.Count = *warmup + *count + *cooldown
	plan, err := workload.Generate(o)
	if err != nil {
		return err
	}
	sign, err := webhook.NewSigner(*scheme, *secret)
	if err != nil {
		return fmt.Errorf("--secret for %s: %w", *scheme, err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := model.WriteJSON(filepath.Join(*out, "expected.json"), plan.Expected); err != nil {
		return err
	}

	s := newSender(*url, *connections, *timeout, sign, *attempts, *giveUp)
	var mu sync.Mutex
	sum := Summary{Phases: map[string]PhaseSummary{}, Seed: o.Seed}
	mark := func(phase, event string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, "phase=%s event=%s at_us=%d\n", phase, event, at.UnixMicro())
		if phase == model.PhaseMeasure {
			if event == "start" {
				sum.WindowStartMicros = at.UnixMicro()
			} else {
				sum.WindowEndMicros = at.UnixMicro()
			}
		}
	}
	w, m := *warmup, *warmup+*count
	parts := [][]span{
		{{model.PhaseSetup, plan.Setup}},
		{{model.PhaseWarmup, plan.Main[:w]}, {model.PhaseMeasure, plan.Main[w:m]}, {model.PhaseCooldown, plan.Main[m:]}},
		{{model.PhaseFinal, plan.Final}},
	}
	var sent []model.Delivery
	for _, part := range parts {
		part = nonEmpty(part)
		if len(part) == 0 {
			continue
		}
		// Setup and final go unpaced: they are few, and outside the window.
		r := *rate
		if part[0].phase == model.PhaseSetup || part[0].phase == model.PhaseFinal {
			r = 0
		}
		sent = append(sent, s.run(ctx, part, *connections, r, mark)...)
		if ctx.Err() != nil {
			break
		}
	}
	if err := writeSent(filepath.Join(*out, "sent.jsonl"), sent); err != nil {
		return err
	}
	summarize(&sum, sent)
	if err := model.WriteJSON(filepath.Join(*out, "summary.json"), sum); err != nil {
		return err
	}
	ms := sum.Phases[model.PhaseMeasure]
	fmt.Fprintf(stderr, "loadgen: measured %d webhooks, %d accepted, %.0f/s, ack p50 %.2f ms p99 %.2f ms\n",
		ms.Sent, ms.Accepted, sum.AcceptedPerSecond, sum.AckMs.P50, sum.AckMs.P99)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

func nonEmpty(spans []span) []span {
	var out []span
	for _, s := range spans {
		if len(s.items) > 0 {
			out = append(out, s)
		}
	}
	return out
}

func summarize(sum *Summary, sent []model.Delivery) {
	var acks []float64
	for _, d := range sent {
		p := sum.Phases[d.Phase]
		if p.ByStatus == nil {
			p.ByStatus = map[int]int{}
		}
		p.Sent++
		p.ByStatus[d.Status]++
		if d.Accepted() {
			p.Accepted++
		}
		if d.Attempts > 1 {
			p.Retried++
		}
		sum.Phases[d.Phase] = p
		if d.Phase == model.PhaseMeasure && d.Accepted() {
			acks = append(acks, float64(d.AckMicros)/1000)
		}
	}
	if window := float64(sum.WindowEndMicros-sum.WindowStartMicros) / 1e6; window > 0 {
		sum.AcceptedPerSecond = float64(sum.Phases[model.PhaseMeasure].Accepted) / window
	}
	sum.AckMs = model.Percentiles{P50: stats.Percentile(acks, 50), P99: stats.Percentile(acks, 99), Max: stats.Percentile(acks, 100)}
}

func writeSent(path string, sent []model.Delivery) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	for _, d := range sent {
		if err := enc.Encode(d); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
