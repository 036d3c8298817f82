package main

import (
	"context"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
)

// Contender is a system the benchmark feeds the same webhooks: it is
// started as processes on this machine, fed by the load generator at a
// URL, and judged afterwards by the checker from what it kept.
type Contender interface {
	// Name says what runs, e.g. "driftguard presence".
	Name() string
	// Stream is the stream it takes.
	Stream() string
	// Start starts its processes (and the servers they need) and returns
	// once it takes webhooks.
	Start(ctx context.Context, ws *Workspace) (Instance, error)
}

// Instance is a started contender.
type Instance interface {
	// Target is where the load generator sends, and how it signs.
	Target() Target
	// Processes are its processes by role ("ingest", "broker", ...),
	// charged for CPU and memory with everything below them.
	Processes() map[string]int
	// Judge checks the run once the load generator is done: the verdict,
	// and the latencies beyond the ack it can measure ("decision",
	// "row"), and figures of its own (e.g. "decided_per_second").
	Judge(ctx context.Context, run *Run) (Judgement, error)
	// Stop stops everything Start started.
	Stop(ctx context.Context) error
}

// Target is where and how to send webhooks.
type Target struct {
	URL    string
	Secret string
	Scheme string
}

// Run is one load generator run against an instance.
type Run struct {
	Dir      string
	Sent     []model.Delivery
	Expected model.State
	// Phases maps an event id to the phase of its first delivery.
	Phases map[string]string
	// Window is the measured window, as the load generator marked it.
	WindowStart, WindowEnd time.Time
}

// Judgement is what Judge found.
type Judgement struct {
	Verdict model.Verdict
	Latency map[string]model.Percentiles
	Figures map[string]float64
}
