package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/driftguard/driftguard/benchmarks/model"
)

// processorResults is what this runner reads of benchmarks/processor's
// -out JSON: its runs, each one contender in one round.
type processorResults struct {
	Rounds []struct {
		Runs []struct {
			Contender     string  `json:"contender"`
			Round         int     `json:"round"`
			Stream        string  `json:"stream"`
			OK            bool    `json:"ok"`
			Failure       string  `json:"failure"`
			WindowEvents  int     `json:"window_events"`
			WindowSeconds float64 `json:"window_seconds"`
			EventsPerSec  float64 `json:"events_per_s"`
			CPU           float64 `json:"cpu_us_per_event"`
			BrokerCPU     float64 `json:"broker_cpu_us_per_event"`
		} `json:"runs"`
	} `json:"rounds"`
}

// runProcessor runs the Kafka Streams comparison, driftguard's presence
// processor against a Kafka Streams application on one broker of its
// own; it runs its own interleaved rounds. It returns a note instead when
// this checkout does not have it.
func (ws *Workspace) runProcessor(ctx context.Context, o options) ([]model.Round, string, error) {
	if o.processorJSON != "" {
		b, err := os.ReadFile(o.processorJSON)
		if err != nil {
			return nil, "", err
		}
		rounds, err := processorRounds(b)
		return rounds, "The Kafka Streams comparison's rounds are taken from an earlier run of benchmarks/processor (" +
			filepath.Base(o.processorJSON) + "), not run again.", err
	}
	if _, err := os.Stat(filepath.Join(ws.Bench, "processor")); err != nil {
		return nil, "The Kafka Streams comparison (benchmarks/processor) is not in this checkout, not run.", nil
	}
	if err := ws.build(ctx, ws.Bench, "./processor", "processor"); err != nil {
		return nil, "", err
	}
	jar := filepath.Join(ws.Bench, "kstreams", "target", "presence-kstreams.jar")
	if _, err := os.Stat(jar); err != nil {
		mvn := exec.CommandContext(ctx, "mvn", "-q", "-B", "package", "-f", filepath.Join(ws.Bench, "kstreams", "pom.xml"))
		if b, err := mvn.CombinedOutput(); err != nil {
			return nil, "", fmt.Errorf("building the Kafka Streams application: %v\n%s", err, b)
		}
	}
	kafka, err := ws.startServer(ctx, "scripts/kafka.sh", "kafka", "DRIFTGUARD_TEST_KAFKA_PID", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT")
	if err != nil {
		return nil, "", err
	}
	defer kafka.stop(context.WithoutCancel(ctx))
	dir, err := ws.next("processor")
	if err != nil {
		return nil, "", err
	}
	out := filepath.Join(dir, "processor.json")
	args := []string{"--brokers", kafka.Vars["DRIFTGUARD_TEST_KAFKA"], "--broker-pid", strconv.Itoa(kafka.PID),
		"--rounds", strconv.Itoa(o.rounds), "--jar", jar, "--out", out}
	if o.smoke {
		args = append(args, "--smoke")
	}
	args = append(args, strings.Fields(o.processorArgs)...)
	cmd := exec.CommandContext(ctx, ws.Bin["processor"], args...)
	cmd.Dir = ws.Bench
	logf, err := os.Create(filepath.Join(dir, "processor.log"))
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	ws.Log.Info("the Kafka Streams comparison", "log", logf.Name())
	runErr := cmd.Run()
	b, err := os.ReadFile(out)
	if err != nil {
		if runErr != nil {
			return nil, "", fmt.Errorf("benchmarks/processor: %v (see %s)", runErr, logf.Name())
		}
		return nil, "", err
	}
	rounds, err := processorRounds(b)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", out, err)
	}
	if runErr != nil {
		return rounds, "", fmt.Errorf("benchmarks/processor: %v (see %s)", runErr, logf.Name())
	}
	return rounds, "", nil
}

// processorRounds reads benchmarks/processor's JSON as rounds.
func processorRounds(b []byte) ([]model.Round, error) {
	var pr processorResults
	if err := json.Unmarshal(b, &pr); err != nil {
		return nil, err
	}
	var rounds []model.Round
	for _, r := range pr.Rounds {
		for _, run := range r.Runs {
			rounds = append(rounds, model.Round{Contender: run.Contender, Round: run.Round, Stream: run.Stream,
				Events: run.WindowEvents, Seconds: run.WindowSeconds, PerSecond: run.EventsPerSec,
				CPUPerEvent: map[string]float64{"process": run.CPU, "broker": run.BrokerCPU},
				Verdict:     model.Verdict{Passed: run.OK, Error: run.Failure}})
		}
	}
	return rounds, nil
}
