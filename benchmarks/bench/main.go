// Command bench runs every contender of the benchmarks in interleaved
// rounds on this machine, checks each run, and writes the results:
//
//	go run ./bench                # the measurement: benchmarks/results/<date>.md, .json, plots
//	go run ./bench --smoke        # small counts, results in the work folder; exits 1 if any check fails
//	go run ./bench chat           # chat clients through the bridge (chat.go)
//
// A round runs each contender in turn, in an order that rotates from round
// to round: the contender's servers and processes are started fresh,
// `loadgen` sends it the round's webhooks (a warm-up, the measured window,
// a cool-down), each process's CPU time is sampled at the window's edges,
// the checker judges what it kept, and everything is stopped before the
// next contender starts. The Kafka Streams comparison
// (benchmarks/processor) runs its own interleaved rounds after them.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/benchmarks/report"
	"github.com/driftguard/driftguard/internal/procstat"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the runner's flags.
type options struct {
	rounds                   int
	warmup, count, cooldown  int
	connections              int
	rate                     float64
	contenders               string
	out, work                string
	smoke, keep, noProcessor bool
	processorArgs            string
	processorJSON            string
	driftguardConfig         string
	// profile is how many seconds of each driftguard round's measured
	// window are profiled; 0 profiles nothing.
	profile int
	// idleSeconds is how long each round measures its processes at rest
	// before the load; 0 measures nothing.
	idleSeconds int
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "chat" {
		return runChat(ctx, args[1:])
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var o options
	fs.IntVar(&o.rounds, "rounds", 3, "interleaved rounds")
	fs.IntVar(&o.warmup, "warmup", 20000, "webhooks sent before each measured window")
	fs.IntVar(&o.count, "count", 60000, "webhooks in each measured window")
	fs.IntVar(&o.cooldown, "cooldown", 5000, "webhooks sent after each measured window")
	fs.IntVar(&o.profile, "profile", 0, "profile driftguard's components (Go CPU profiles) and the broker (a JFR recording) for this many seconds from the measured window's start, at most 29; written with a summary of each into the round's work folder (keep it with --keep or --work)")
	fs.IntVar(&o.idleSeconds, "idle-seconds", 0, "measure each process's CPU at rest for this many seconds before the load (after 2 s to settle), for what the load adds above it")
	fs.IntVar(&o.connections, "connections", 128, "the load generator's connections")
	fs.Float64Var(&o.rate, "rate", 0, "target webhooks a second; 0 sends as fast as the contender answers")
	fs.StringVar(&o.contenders, "contenders", "", "contenders to run, comma-separated (default: every one this checkout has)")
	fs.StringVar(&o.out, "out", "results", "folder for the results (relative to benchmarks/)")
	fs.StringVar(&o.work, "work", "", "work folder for binaries, servers' data, logs and runs (default: a new temp folder)")
	fs.BoolVar(&o.smoke, "smoke", false, "small counts, one round, results in the work folder, exit 1 on any failed check")
	fs.BoolVar(&o.keep, "keep", false, "keep the work folder")
	fs.BoolVar(&o.noProcessor, "no-processor", false, "skip the Kafka Streams comparison")
	fs.StringVar(&o.processorArgs, "processor-args", "", "extra flags for benchmarks/processor, space-separated")
	fs.StringVar(&o.processorJSON, "processor-json", "", "take the Kafka Streams comparison's rounds from this benchmarks/processor -out file instead of running it")
	fs.StringVar(&o.driftguardConfig, "driftguard-config", "", "a YAML file added to driftguard's configuration (knobs to try)")
	from := fs.String("from", "", "only write the results (Markdown, plots) again from this results JSON file, into its folder")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *from != "" {
		return rewrite(*from)
	}
	if o.profile < 0 || o.profile > 29 {
		return fmt.Errorf("--profile is seconds from 0 to 29 (a profile must end before the operations server's 30 s write timeout), got %d", o.profile)
	}
	if o.smoke {
		o.rounds, o.warmup, o.count, o.cooldown, o.connections = 1, 300, 1500, 200, 16
	}
	start := time.Now()
	loadAtStart := loadAverage()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ws, cleanup, err := newWorkspace(o, log)
	if err != nil {
		return err
	}
	failed := 0
	defer func() { cleanup(failed > 0) }()

	dgConfig := ""
	if o.driftguardConfig != "" {
		b, err := os.ReadFile(o.driftguardConfig)
		if err != nil {
			return err
		}
		dgConfig = string(b)
	}
	all := []Contender{
		&driftguardE2E{stream: "presence", config: dgConfig, controls: o.smoke, profiles: o.profile > 0},
		&driftguardE2E{stream: "orders", config: dgConfig, controls: o.smoke, profiles: o.profile > 0},
	}
	res := &report.Results{Date: start.UTC().Format("2006-01-02"), StartedAt: start.UTC(), Smoke: o.smoke,
		Command: command(os.Args[1:]), Revision: revision(ws.Root), Machine: machine(), Rate: o.rate,
		Settings: map[string]string{
			"rounds": strconv.Itoa(o.rounds), "warm-up": strconv.Itoa(o.warmup), "measured": strconv.Itoa(o.count),
			"cool-down": strconv.Itoa(o.cooldown), "connections": strconv.Itoa(o.connections), "rate": rateText(o.rate),
			"load": loadKnobs("presence") + "; orders: " + loadKnobs("orders"),
		}}
	if o.smoke {
		res.Command = "go tool task bench:smoke"
	}
	for _, p := range peers {
		if p.available(ws) {
			all = append(all, p)
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: not in this checkout (%s), not run.", p.name, p.pkg))
		}
	}
	// Named only: every stream at once is for the low-rate target, and
	// would add a contender to every default run.
	named := append(slices.Clone(all), &driftguardE2E{stream: allStreams, config: dgConfig, profiles: o.profile > 0})
	contenders, err := pick(all, named, o.contenders)
	if err != nil {
		return err
	}
	if err := ws.buildAll(ctx, contenders); err != nil {
		return err
	}

	for round := 1; round <= o.rounds; round++ {
		for i := range contenders {
			c := contenders[(i+round-1)%len(contenders)]
			log.Info("round", "round", round, "contender", c.Name())
			r := ws.runRound(ctx, c, round, o)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !r.Verdict.Passed {
				failed++
				log.Warn("the checker failed a contender", "contender", c.Name(), "round", round, "verdict", r.Verdict)
			}
			res.Rounds = append(res.Rounds, r)
		}
	}
	if !o.noProcessor && (o.contenders == "" || strings.Contains(o.contenders, "processor")) {
		rounds, note, err := ws.runProcessor(ctx, o)
		switch {
		case err != nil:
			failed++
			res.Notes = append(res.Notes, "The Kafka Streams comparison did not complete: "+err.Error())
		case note != "":
			res.Notes = append(res.Notes, note)
		}
		for _, r := range rounds {
			if !r.Verdict.Passed {
				failed++
			}
		}
		res.Processor = rounds
	}
	res.Seconds = time.Since(start).Seconds()
	res.Settings["load average at start, at end"] = loadAtStart + ", " + loadAverage()
	dir := o.out
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(ws.Bench, dir)
	}
	if o.smoke {
		dir = filepath.Join(ws.Dir, "results")
	}
	path, err := report.Write(dir, res)
	if err != nil {
		return err
	}
	log.Info("results written", "file", path)
	if o.smoke && failed > 0 {
		return fmt.Errorf("%d runs failed their check (see %s)", failed, path)
	}
	return nil
}

func rateText(r float64) string {
	if r <= 0 {
		return "as fast as answered"
	}
	return fmt.Sprintf("%.0f/s", r)
}

// pick is the contenders list names, from named, or every one of
// defaults when it names none.
func pick(defaults, named []Contender, list string) ([]Contender, error) {
	if list == "" {
		return defaults, nil
	}
	all := named
	var out []Contender
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "processor" || name == "" {
			continue
		}
		found := false
		for _, c := range all {
			if c.Name() == name {
				out = append(out, c)
				found = true
			}
		}
		if !found {
			var names []string
			for _, c := range all {
				names = append(names, c.Name())
			}
			return nil, fmt.Errorf("--contenders: no contender %q (have: %s, processor)", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// newWorkspace makes the work folder; its cleanup removes it unless it was
// named, --keep was given, or a smoke run failed (to look at its logs).
func newWorkspace(o options, log *slog.Logger) (*Workspace, func(failed bool), error) {
	bench, err := os.Getwd()
	if err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(filepath.Join(bench, "model")); err != nil {
		return nil, nil, errors.New("run bench from the benchmarks folder (go run ./bench)")
	}
	dir := o.work
	if dir == "" {
		if dir, err = os.MkdirTemp("", "driftguard-bench-"); err != nil {
			return nil, nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	ws := &Workspace{Root: filepath.Dir(bench), Bench: bench, Dir: dir, Log: log, Bin: map[string]string{}}
	cleanup := func(failed bool) {
		if o.keep || o.work != "" || o.smoke && failed {
			log.Info("work folder kept", "dir", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}
	return ws, cleanup, nil
}

// buildAll builds driftguard, the load generator and the peers run.
func (ws *Workspace) buildAll(ctx context.Context, cs []Contender) error {
	if err := ws.build(ctx, ws.Root, "./cmd/driftguard", "driftguard"); err != nil {
		return err
	}
	if err := ws.build(ctx, ws.Bench, "./loadgen", "loadgen"); err != nil {
		return err
	}
	for _, c := range cs {
		if p, ok := c.(*peer); ok {
			if err := ws.build(ctx, ws.Bench, p.pkg, p.binName()); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadKnobs are the load generator's workload flags for a stream: the
// same for every contender of the stream.
func loadKnobs(stream string) string {
	switch stream {
	case "orders":
		return "--disorder 20 --duplicates 0.02 --retries 0.02 --orphans 0.05 --late-parents 0.2"
	case allStreams:
		return "--disorder 20 --duplicates 0.02 --retries 0.02 --gaps 0.05 --orphans 0.05 --late-parents 0.2"
	}
	return "--disorder 20 --duplicates 0.02 --retries 0.02 --gaps 0.05"
}

// mixOf is loadgen's --mix for a contender of stream: its streams in
// equal shares.
func mixOf(stream string) string {
	var mix []string
	for _, s := range streamsOf(stream) {
		mix = append(mix, s+"=1")
	}
	return strings.Join(mix, ",")
}

// runRound runs one contender once and returns its round, failed with
// the reason when anything went wrong.
func (ws *Workspace) runRound(ctx context.Context, c Contender, round int, o options) model.Round {
	r := model.Round{Contender: c.Name(), Round: round, Stream: c.Stream(), Settings: map[string]string{}}
	fail := func(err error) model.Round {
		r.Verdict = model.Verdict{Error: err.Error()}
		ws.Log.Error("round failed", "contender", c.Name(), "round", round, "err", err)
		return r
	}
	in, err := c.Start(ctx, ws)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = in.Stop(context.WithoutCancel(ctx)) }()
	dir, err := ws.next(fmt.Sprintf("round%d-%s-run", round, c.Name()))
	if err != nil {
		return fail(err)
	}
	t := in.Target()
	args := []string{"--url", t.URL, "--secret", t.Secret, "--scheme", t.Scheme, "--mix", mixOf(c.Stream()),
		"--warmup", strconv.Itoa(o.warmup), "--count", strconv.Itoa(o.count), "--cooldown", strconv.Itoa(o.cooldown),
		"--connections", strconv.Itoa(o.connections), "--rate", strconv.FormatFloat(o.rate, 'f', -1, 64),
		"--seed", strconv.Itoa(1000 + round), "--out", dir}
	args = append(args, strings.Fields(loadKnobs(c.Stream()))...)
	procs := in.Processes()
	if o.idleSeconds > 0 {
		rest, err := measureRest(ctx, in, procs, time.Duration(o.idleSeconds)*time.Second)
		if err != nil {
			return fail(err)
		}
		r.IdleCPU, r.IdleBrokerThreads, r.IdleKafkaRequests = rest.cpu, rest.brokerThreads, rest.kafkaRequests
	}
	cmd := exec.CommandContext(ctx, ws.Bin["loadgen"], args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	logf, err := os.Create(filepath.Join(dir, "loadgen.log"))
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	procs["loadgen"] = cmd.Process.Pid
	var before, after procstat.Sample
	var kafkaBefore, kafkaAfter map[string]float64
	var brokerBefore, brokerAfter map[string]time.Duration
	brokerPID, hasBroker := procs["broker"]
	reporter, reports := in.(MetricsReporter)
	profiler, profiles := in.(Profiler)
	profiled := make(chan error, 1)
	var windowStart, windowEnd time.Time
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		if !strings.HasPrefix(line, "phase="+model.PhaseMeasure+" ") {
			continue
		}
		at := markerTime(line)
		if strings.Contains(line, "event=start") {
			before, windowStart = procstat.Take(procs), at
			if reports {
				kafkaBefore = kafkaCounts(ctx, reporter.MetricsURLs())
			}
			if hasBroker {
				brokerBefore, _ = jvmThreadCPU(ctx, brokerPID)
			}
			if profiles && o.profile > 0 {
				go func() { profiled <- profiler.Profile(ctx, o.profile, filepath.Join(dir, "profiles")) }()
			}
		} else {
			after, windowEnd = procstat.Take(procs), at
			if reports {
				kafkaAfter = kafkaCounts(ctx, reporter.MetricsURLs())
			}
			if hasBroker {
				brokerAfter, _ = jvmThreadCPU(ctx, brokerPID)
			}
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return fail(fmt.Errorf("loadgen: %v (see %s)", err, filepath.Join(dir, "loadgen.log")))
	}
	if profiles && o.profile > 0 && !windowStart.IsZero() {
		if err := <-profiled; err != nil {
			ws.Log.Warn("profiling failed", "contender", c.Name(), "round", round, "err", err)
		} else {
			ws.Log.Info("profiles written", "contender", c.Name(), "round", round, "dir", filepath.Join(dir, "profiles"))
		}
	}
	run := &Run{Dir: dir, WindowStart: windowStart, WindowEnd: windowEnd, Phases: map[string]string{}}
	if run.Sent, err = model.ReadDeliveries(filepath.Join(dir, "sent.jsonl")); err != nil {
		return fail(err)
	}
	if run.Expected, err = model.ReadState(filepath.Join(dir, "expected.json")); err != nil {
		return fail(err)
	}
	accepted := 0
	var acks []float64
	for _, d := range run.Sent {
		if _, seen := run.Phases[d.EventID]; !seen {
			run.Phases[d.EventID] = d.Phase
		}
		if d.Phase == model.PhaseMeasure && d.Accepted() {
			accepted++
			acks = append(acks, float64(d.AckMicros)/1000)
		}
	}
	r.Events = accepted
	r.Seconds = windowEnd.Sub(windowStart).Seconds()
	if r.Seconds > 0 {
		r.PerSecond = float64(accepted) / r.Seconds
	}
	r.CPUPerEvent = procstat.PerEvent(before, after, accepted)
	r.KafkaRequests = perThousand(kafkaBefore, kafkaAfter, accepted)
	r.BrokerThreads = perEventByRole(brokerBefore, brokerAfter, accepted)
	r.PeakRSS = map[string]int64{}
	for name, pid := range in.Processes() {
		if n, err := procstat.TreePeakRSS(pid); err == nil {
			r.PeakRSS[name] = n
		}
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.PeakRSS["loadgen"] = ru.Maxrss << 10
	}
	j, err := in.Judge(ctx, run)
	if err != nil {
		return fail(fmt.Errorf("judging: %w", err))
	}
	r.Verdict = j.Verdict
	r.Latency = map[string]model.Percentiles{"ack": percentiles(acks)}
	for k, v := range j.Latency {
		r.Latency[k] = v
	}
	r.Figures = j.Figures
	ws.Log.Info("round done", "contender", c.Name(), "round", round, "per_second", int(r.PerSecond),
		"passed", r.Verdict.Passed, "latency", r.Latency, "cpu_us", r.CPUPerEvent)
	return r
}

func markerTime(line string) time.Time {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "at_us="); ok {
			if us, err := strconv.ParseInt(v, 10, 64); err == nil {
				return time.UnixMicro(us)
			}
		}
	}
	return time.Now()
}

// command is how this run was asked for, as `go tool task bench` passes
// its flags: what a results file says it was produced by.
func command(args []string) string {
	if len(args) == 0 {
		return "go tool task bench"
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t\"'$") || a == "" {
			a = strconv.Quote(a)
		}
		quoted[i] = a
	}
	return "go tool task bench -- " + strings.Join(quoted, " ")
}

func revision(root string) string {
	b, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func machine() string {
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
					mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%d cores%s, %s/%s, %s", runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// loadAverage is the machine's 1-minute load average: on a shared
// machine, what the contenders competed with.
func loadAverage() string {
	load, ok := procstat.Load1()
	if !ok {
		return "unknown"
	}
	return strconv.FormatFloat(load, 'f', 2, 64)
}

// rewrite writes a results file's Markdown and plots again from its JSON.
func rewrite(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var res report.Results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := report.Write(filepath.Dir(path), &res)
	if err == nil {
		fmt.Println(out)
	}
	return err
}

// rest is what a contender's processes cost while nothing is sent, per
// second.
type rest struct {
	// cpu is each process's CPU µs, and brokerThreads the broker's by
	// thread role when there is one.
	cpu, brokerThreads map[string]float64
	// kafkaRequests are the Kafka requests by "process/kind", for an
	// instance that reports them.
	kafkaRequests map[string]float64
}

// measureRest measures the processes at rest over d, after two seconds to
// settle.
func measureRest(ctx context.Context, in Instance, procs map[string]int, d time.Duration) (rest, error) {
	select {
	case <-ctx.Done():
		return rest{}, ctx.Err()
	case <-time.After(2 * time.Second):
	}
	brokerPID, hasBroker := procs["broker"]
	reporter, reports := in.(MetricsReporter)
	var threadsBefore, threadsAfter map[string]time.Duration
	var requestsBefore, requestsAfter map[string]float64
	if hasBroker {
		threadsBefore, _ = jvmThreadCPU(ctx, brokerPID)
	}
	if reports {
		requestsBefore = kafkaCounts(ctx, reporter.MetricsURLs())
	}
	before, start := procstat.Take(procs), time.Now()
	select {
	case <-ctx.Done():
		return rest{}, ctx.Err()
	case <-time.After(d):
	}
	after, secs := procstat.Take(procs), time.Since(start).Seconds()
	if hasBroker {
		threadsAfter, _ = jvmThreadCPU(ctx, brokerPID)
	}
	if reports {
		requestsAfter = kafkaCounts(ctx, reporter.MetricsURLs())
	}
	perSecond := func(m map[string]float64) map[string]float64 {
		for k := range m {
			m[k] /= secs
		}
		return m
	}
	return rest{
		cpu:           perSecond(procstat.PerEvent(before, after, 1)),
		brokerThreads: perSecond(perEventByRole(threadsBefore, threadsAfter, 1)),
		// Per 1,000 of 1,000 events: the counts' differences.
		kafkaRequests: perSecond(perThousand(requestsBefore, requestsAfter, 1000)),
	}, nil
}
