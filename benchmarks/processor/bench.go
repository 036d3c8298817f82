package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/procstat"
)

// options are the command's flags.
type options struct {
	brokers    string
	brokerPID  int
	events     int
	warmup     int
	rounds     int
	users      int
	contenders string
	jar        string
	java       string
	javaOpts   string
	// streamsConfig are KEY=VALUE Kafka Streams properties over its
	// defaults, for experiments.
	streamsConfig string
	// storeCaching turns on the Kafka Streams store's record cache.
	storeCaching bool
	out          string
	pprof        string
	timeout      time.Duration
	// commitInterval overrides driftguard's processing.commit_interval.
	commitInterval time.Duration
	smoke          bool
}

// shrinkToSmoke makes o the smoke run's: enough events for every outcome
// and every partition, too few to time.
func (o *options) shrinkToSmoke() {
	o.smoke = true
	o.events, o.warmup, o.rounds, o.users = 2000, 500, 1, 200
}

func (o *options) validate() error {
	switch {
	case o.brokers == "":
		return errors.New("-brokers is required")
	case o.events < 1 || o.warmup < 1 || o.rounds < 1 || o.users < 2:
		return errors.New("-events, -warmup and -rounds must be at least 1, -users at least 2")
	}
	for _, c := range strings.Split(o.contenders, ",") {
		if !slices.Contains([]string{driftguardName, ksALOSName, ksEOSName}, c) {
			return fmt.Errorf("unknown contender %q", c)
		}
		if strings.HasPrefix(c, "kstreams") {
			if _, err := os.Stat(o.jar); err != nil {
				return fmt.Errorf("the Kafka Streams jar: %w (build it with mvn -q -B package in benchmarks/kstreams)", err)
			}
		}
	}
	return nil
}

// run measures every contender in o.rounds interleaved rounds: each round
// runs all of them, in an order rotated by one each round, so that none
// always runs first on a cold page cache or last on a busy machine.
func run(ctx context.Context, o options) (*Results, error) {
	brokers := strings.Split(o.brokers, ",")
	names := strings.Split(o.contenders, ",")
	var all []contender
	for _, name := range names {
		switch name {
		case driftguardName:
			all = append(all, driftguardContender(o))
		case ksALOSName:
			all = append(all, kstreamsContender(name, "at_least_once", o))
		case ksEOSName:
			all = append(all, kstreamsContender(name, "exactly_once_v2", o))
		}
	}
	if o.pprof != "" {
		if err := os.MkdirAll(o.pprof, 0o755); err != nil {
			return nil, err
		}
	}
	work, err := os.MkdirTemp("", "driftguard-bench-processor.")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
	if err != nil {
		return nil, err
	}
	defer cl.Close()

	mix := DefaultMix(o.events)
	mix.Users = o.users
	deliveries, exp := Generate(mix)
	warmMix := mix
	warmMix.Events, warmMix.Seed = o.warmup, mix.Seed+1
	warmDeliveries, _ := Generate(warmMix)

	cfg, err := presenceConfig(o.commitInterval, "presence")
	if err != nil {
		return nil, err
	}
	res := &Results{
		Benchmark: "presence-processor", StartedAt: time.Now().UTC(), Smoke: o.smoke,
		Setup: Setup{
			Events: o.events, Warmup: o.warmup, Rounds: o.rounds, Mix: mix,
			Partitions: cfg.Streams["presence"].Limits.Partitions, CommitIntervalMs: cfg.Processing.CommitInterval.Milliseconds(),
			StreamsConfig: strings.Fields(o.streamsConfig), StoreCaching: o.storeCaching,
			Contenders: names, CPUs: runtime.NumCPU(), Brokers: brokers, BrokerCPU: o.brokerPID > 0,
		},
		Expected: exp.Outcomes,
	}
	// Unique among benchmarks sharing a broker.
	id := fmt.Sprintf("%s-%04x", time.Now().Format("150405"), rand.IntN(1<<16))
	for round := 1; round <= o.rounds; round++ {
		rd := Round{Round: round}
		for i := range all {
			c := all[(i+round-1)%len(all)]
			name := fmt.Sprintf("bench-%s-r%d-%s", id, round, c.Name)
			r := measureOne(ctx, o, brokers, cl, work, c, name, deliveries, warmDeliveries, exp)
			r.Round, r.Order = round, i+1
			fmt.Fprintf(os.Stderr, "round %d %-14s %s\n", round, c.Name, r.line())
			rd.Runs = append(rd.Runs, r)
			if ctx.Err() != nil {
				res.Rounds = append(res.Rounds, rd)
				res.summarize()
				return res, ctx.Err()
			}
		}
		res.Rounds = append(res.Rounds, rd)
	}
	res.summarize()
	return res, nil
}

// measureOne runs contender c on fresh topics: a warm-up stream, then the
// measured stream name, each preloaded with its deliveries. The window is
// timed from the first measured outcome a read_committed reader sees to
// the last: joining the group, restoring the (empty) store and, for the
// JVM, compiling the hot paths on the warm-up stream are start-up, not
// throughput.
func measureOne(ctx context.Context, o options, brokers []string, cl *kgo.Client, work string, c contender,
	name string, ds, warm []Delivery, exp Expected) Run {
	r := Run{Contender: c.Name, Stream: name, Events: len(ds)}
	adm := kadm.NewClient(cl)
	warmName := name + "-warmup"
	dir := filepath.Join(work, name)
	fail := func(err error) Run {
		r.Failure = err.Error()
		if len(r.Failure) > 4000 {
			r.Failure = r.Failure[:4000] + "…"
		}
		return r
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	defer func() {
		cleanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := dropRun(cleanCtx, adm, name, warmName); err != nil {
			fmt.Fprintf(os.Stderr, "dropping the topics of %s: %v\n", name, err)
		}
	}()
	if err := createStreams(ctx, cl, warmName, name); err != nil {
		return fail(fmt.Errorf("creating the topics of %s and %s: %w", warmName, name, err))
	}
	if _, err := preload(ctx, brokers, warmName, warm); err != nil {
		return fail(err)
	}
	at, err := preload(ctx, brokers, name, ds)
	if err != nil {
		return fail(err)
	}
	tl, err := newTail(brokers, warmName, name)
	if err != nil {
		return fail(err)
	}
	defer tl.close()

	ch, err := start(c, warmName, name, dir)
	if err != nil {
		return fail(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = ch.stop(30 * time.Second)
		}
	}()
	if err := ch.expect("warmup "+warmName, o.timeout); err != nil {
		return fail(err)
	}
	deadline := time.Now().Add(o.timeout)
	wait := func(done func() bool, what string) error {
		for !done() {
			if _, err := tl.poll(ctx, 100*time.Millisecond); err != nil {
				return err
			}
			if err := ch.failed(); err != nil {
				return fmt.Errorf("%s %s: %w", c.Name, what, err)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %s not done within %s", c.Name, what, o.timeout)
			}
		}
		return nil
	}
	if err := wait(func() bool { return tl.warmed >= len(warm) }, "warm-up"); err != nil {
		return fail(err)
	}
	if err := ch.send("measure"); err != nil {
		return fail(err)
	}
	asked := time.Now()
	deadline = asked.Add(o.timeout)
	var first sample
	var sampleErr error
	err = wait(func() bool {
		if first.at.IsZero() && len(tl.decided) > 0 {
			first, sampleErr = takeSample(len(tl.decided), ch.pid(), o.brokerPID)
		}
		return sampleErr != nil || len(tl.decided) >= len(ds)
	}, "measured run")
	if err == nil {
		err = sampleErr
	}
	if err != nil {
		return fail(err)
	}
	last, err := takeSample(len(tl.decided), ch.pid(), o.brokerPID)
	if err != nil {
		return fail(err)
	}
	r.Load1, _ = procstat.Load1()
	stopped = true
	if err := ch.stop(time.Minute); err != nil {
		return fail(fmt.Errorf("%s did not stop cleanly: %w", c.Name, err))
	}
	// What a clean stop flushed, and any outcome written twice.
	if err := tl.drain(ctx, time.Second); err != nil {
		return fail(err)
	}
	r.StartupSeconds = first.at.Sub(asked).Seconds()
	r.window(first, last)
	r.Check = check(ds, at, exp, tl.decided, tl.states)
	if r.LogBytesPerEvent, err = logBytesPerEvent(ctx, adm, name, len(ds)); err != nil {
		return fail(fmt.Errorf("the size of the topics: %w", err))
	}
	r.OK = r.Check.OK()
	r.Failure = r.Check.Failure
	return r
}
