// Command processor measures driftguard's presence processor against a
// Kafka Streams application doing the same job (benchmarks/kstreams) at
// at-least-once and at exactly_once_v2, on one broker: catch-up throughput
// over the same preloaded presence events, in interleaved rounds, each
// contender checked for deciding every event once and leaving the right
// state. It prints a Markdown table and writes the rounds as JSON.
//
//	cd benchmarks && (cd kstreams && mvn -q -B package)
//	go run ./processor -brokers 127.0.0.1:39192 -broker-pid <pid> -out processor.json
//	go run ./processor -brokers 127.0.0.1:39192 -smoke
//
// See benchmarks/processor/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == workerCommand {
		os.Exit(runWorker(os.Args[2:]))
	}
	var o options
	flag.StringVar(&o.brokers, "brokers", "", "the Kafka broker(s) to measure on, comma-separated (required; not a shared test broker)")
	flag.IntVar(&o.brokerPID, "broker-pid", 0, "pid of the broker, to report its CPU time per event (optional)")
	flag.IntVar(&o.events, "events", 200_000, "presence events each run decides")
	flag.IntVar(&o.warmup, "warmup", 100_000, "events each contender decides first, outside the measured window")
	flag.IntVar(&o.rounds, "rounds", 5, "interleaved rounds")
	flag.IntVar(&o.users, "users", 5000, "members publishing presence")
	flag.StringVar(&o.contenders, "contenders", strings.Join([]string{driftguardName, ksALOSName, ksEOSName}, ","), "contenders to run, comma-separated")
	flag.StringVar(&o.jar, "jar", "kstreams/target/presence-kstreams.jar", "the Kafka Streams application's jar (mvn -q -B package in benchmarks/kstreams)")
	flag.StringVar(&o.java, "java", "java", "the java command")
	flag.StringVar(&o.javaOpts, "java-opts", "", "JVM options, space-separated (default: the JVM's own)")
	flag.StringVar(&o.streamsConfig, "kstreams-config", "", "Kafka Streams properties over its defaults, KEY=VALUE space-separated (an experiment: the contenders the targets name run with the defaults)")
	flag.BoolVar(&o.storeCaching, "kstreams-caching", false, "turn on the Kafka Streams store's record cache (an experiment: off by default for a Processor API store)")
	flag.StringVar(&o.out, "out", "", "write the results as JSON to this file")
	flag.StringVar(&o.pprof, "pprof", "", "write a CPU profile and a profile of the waits (block) of each driftguard run's measured phase into this folder")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "longest a contender may take for its warm-up or its measured events")
	flag.DurationVar(&o.commitInterval, "commit-interval", 0, "driftguard's processing.commit_interval (default: driftguard's, 100ms); Kafka Streams keeps its own default")
	flag.BoolVar(&o.smoke, "smoke", false, "a short run that only checks that every contender works: 2,000 events, 1 round, no warm-up to speak of")
	flag.Parse()
	if o.smoke {
		o.shrinkToSmoke()
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "processor:", err)
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := run(ctx, o)
	if res != nil {
		fmt.Print(res.Markdown())
		if o.out != "" {
			if werr := model.WriteJSON(o.out, res); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "processor:", err)
		os.Exit(1)
	}
	if !res.AllPassed() {
		fmt.Fprintln(os.Stderr, "processor: a contender failed its check")
		os.Exit(1)
	}
}
