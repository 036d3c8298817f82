// Command check judges a benchmark run: the deliveries the load generator
// recorded (sent.jsonl) and the state it expects (expected.json) against
// what a contender kept. For driftguard it reads `<stream>.in`, the
// outcomes and ClickHouse:
//
//	go run ./check --run run/ --kafka 127.0.0.1:29192 --clickhouse 127.0.0.1:29100 --database bench
//
// and for a peer the state it reported (its `state` subcommand's output):
//
//	go run ./check --run run/ --state peer-state.json
//
// It prints the verdict per stream, writes it as JSON with --report, and
// exits 1 when anything was lost, doubled or ends in another state.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/driftguard/driftguard/benchmarks/checker"
	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/internal/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	passed, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "check:", err)
		os.Exit(2)
	case !passed:
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (bool, error) {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("run", ".", "the load generator's --out folder (sent.jsonl, expected.json)")
	statePath := fs.String("state", "", "a peer's reported state (model.State JSON); without it, driftguard is read")
	kafka := fs.String("kafka", "127.0.0.1:9092", "driftguard's brokers (comma-separated)")
	chAddr := fs.String("clickhouse", "127.0.0.1:9000", "driftguard's ClickHouse, native protocol")
	db := fs.String("database", "driftguard", "driftguard's ClickHouse database")
	streamList := fs.String("streams", "", "streams to check (default: every stream in sent.jsonl)")
	drain := fs.Duration("drain", 2*time.Minute, "how long driftguard may take to decide and write everything sent")
	reportPath := fs.String("report", "", "write the verdict as JSON here")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	sent, err := model.ReadDeliveries(filepath.Join(*dir, "sent.jsonl"))
	if err != nil {
		return false, err
	}
	want, err := model.ReadState(filepath.Join(*dir, "expected.json"))
	if err != nil {
		return false, err
	}
	streams := model.StreamsOf(sent)
	if *streamList != "" {
		streams = strings.Split(*streamList, ",")
	}
	if len(streams) == 0 {
		return false, errors.New("nothing to check: sent.jsonl names no stream")
	}
	var r *checker.Report
	if *statePath != "" {
		got, err := model.ReadState(*statePath)
		if err != nil {
			return false, err
		}
		r = checker.CheckState(sent, want, got, streams)
	} else {
		ch := config.ClickHouse{Addr: *chAddr, Database: *db, Username: "default"}
		r, err = checker.Driftguard{Brokers: strings.Split(*kafka, ","), ClickHouse: ch, Drain: *drain}.Check(ctx, sent, want, streams)
		if err != nil {
			return false, err
		}
	}
	checker.Print(stdout, r)
	if *reportPath != "" {
		if err := model.WriteJSON(*reportPath, r); err != nil {
			return false, err
		}
	}
	return r.Verdict.Passed, nil
}
