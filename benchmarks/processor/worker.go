package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"

	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/processors"
)

// workerCommand is the first argument that makes this binary the
// driftguard contender: the presence processor in a process of its own, so
// that its CPU time is its alone, measured as the JVM's is.
const workerCommand = "driftguard-worker"

// runWorker decides the warm-up stream, then the measured one, with the
// processors service `driftguard process` runs (the transactional runtime,
// LevelDB table storage under -data), speaking the contender protocol.
func runWorker(args []string) int {
	fs := flag.NewFlagSet(workerCommand, flag.ContinueOnError)
	brokers := fs.String("brokers", "", "Kafka brokers, comma-separated")
	warmup := fs.String("warmup", "", "stream decided first, until the line \"measure\"")
	measure := fs.String("measure", "", "stream decided until the line \"stop\"")
	data := fs.String("data", "", "folder of the table storage")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured stream's run here")
	blockProfile := fs.String("blockprofile", "", "write a profile of where the measured run's goroutines waited here")
	commitInterval := fs.Duration("commit-interval", 0, "processing.commit_interval (0: driftguard's default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *brokers == "" || *measure == "" || *data == "" {
		fmt.Fprintln(os.Stderr, workerCommand+": -brokers, -measure and -data are required")
		return 2
	}
	log := telemetry.NewLogger(os.Stderr, "warn", false)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- strings.TrimSpace(sc.Text())
		}
		close(lines)
	}()
	// run decides stream until the line want (or the end of stdin).
	run := func(stream, want string) (bool, error) {
		cfg, err := presenceConfig(*commitInterval, stream)
		if err != nil {
			return false, err
		}
		cfg.DataDir = filepath.Join(*data, stream)
		svc := processors.NewService(processors.ServiceOptions{Config: cfg, Brokers: strings.Split(*brokers, ","), Logger: log, Ops: telemetry.NewOps()})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		for {
			select {
			case err := <-done:
				if err == nil {
					err = fmt.Errorf("processor of %s stopped", stream)
				}
				return false, err
			case line, ok := <-lines:
				if ok && line != want {
					continue
				}
				cancel()
				return ok, <-done
			}
		}
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, workerCommand+":", err)
		return 1
	}
	if *warmup != "" {
		fmt.Println("warmup " + *warmup)
		if more, err := run(*warmup, "measure"); err != nil {
			return fail(err)
		} else if !more {
			return 0
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	if *blockProfile != "" {
		// Every wait of 10 µs or more, on average: the decide loop's
		// waits for its polls and its commits are what it shows.
		runtime.SetBlockProfileRate(10_000)
		defer func() {
			if err := writeProfile("block", *blockProfile); err != nil {
				fmt.Fprintln(os.Stderr, workerCommand+":", err)
			}
		}()
	}
	fmt.Println("measure " + *measure)
	if _, err := run(*measure, "stop"); err != nil {
		return fail(err)
	}
	return 0
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
