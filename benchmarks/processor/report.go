package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/driftguard/driftguard/benchmarks/stats"
	"github.com/driftguard/driftguard/internal/record"
)

// Results are one invocation's rounds and what they add up to: the JSON
// the command writes with -out (README.md describes every field).
type Results struct {
	Benchmark string    `json:"benchmark"`
	StartedAt time.Time `json:"started_at"`
	Smoke     bool      `json:"smoke"`
	Setup     Setup     `json:"setup"`
	// Expected counts the outcomes the rules give the measured input.
	Expected map[record.Result]int `json:"expected"`
	Rounds   []Round               `json:"rounds"`
	Summary  []Summary             `json:"summary"`
	Ratios   []Ratio               `json:"ratios"`
}

// Setup is what every run of the invocation shares.
type Setup struct {
	Events           int      `json:"events"`
	Warmup           int      `json:"warmup"`
	Rounds           int      `json:"rounds"`
	Mix              Mix      `json:"mix"`
	Partitions       int      `json:"partitions"`
	CommitIntervalMs int64    `json:"driftguard_commit_interval_ms"`
	Contenders       []string `json:"contenders"`
	// StreamsConfig are the properties the Kafka Streams application ran
	// with over its defaults (-kstreams-config); empty in a benchmark run.
	StreamsConfig []string `json:"kstreams_config,omitempty"`
	// StoreCaching is set when the store's record cache was on
	// (-kstreams-caching).
	StoreCaching bool     `json:"kstreams_caching,omitempty"`
	CPUs         int      `json:"cpus"`
	Brokers      []string `json:"brokers"`
	// BrokerCPU is set when the broker's CPU time was read (-broker-pid).
	BrokerCPU bool `json:"broker_cpu"`
}

// Round is one pass over every contender, in the order run.
type Round struct {
	Round int   `json:"round"`
	Runs  []Run `json:"runs"`
}

// Run is one contender deciding one preloaded input.
type Run struct {
	Contender string `json:"contender"`
	Round     int    `json:"round"`
	// Order is the contender's place in its round, from 1.
	Order  int    `json:"order"`
	Stream string `json:"stream"`
	// OK is set when the check passed; a failed run is not ranked.
	OK      bool   `json:"ok"`
	Failure string `json:"failure,omitempty"`
	// Events is how many inputs the run decided; WindowEvents how many
	// became visible inside the measured window, over WindowSeconds.
	Events        int     `json:"events"`
	WindowEvents  int     `json:"window_events"`
	WindowSeconds float64 `json:"window_seconds"`
	EventsPerSec  float64 `json:"events_per_s"`
	// CPU time per event in the window: the contender's process (every
	// thread), and the broker's when its pid was given.
	CPUMicrosPerEvent       float64 `json:"cpu_us_per_event"`
	BrokerCPUMicrosPerEvent float64 `json:"broker_cpu_us_per_event,omitempty"`
	// ReaderCPUMicrosPerEvent is the benchmark's own, reading the
	// outcomes and states as they arrive, on the same cores.
	ReaderCPUMicrosPerEvent float64 `json:"reader_cpu_us_per_event"`
	// StartupSeconds is from the switch to the measured stream to its
	// first visible outcome (joining the group, the first commit).
	StartupSeconds float64 `json:"startup_s"`
	// Load1 is the machine's one-minute load average at the window's end.
	Load1 float64 `json:"load1"`
	// LogBytesPerEvent is what the run left on the broker per input event,
	// by topic: in, outcomes, state, table (the store's changelog).
	LogBytesPerEvent map[string]float64 `json:"log_bytes_per_event"`
	Check            Check              `json:"check"`
}

// window fills the rates of the window from first to last.
func (r *Run) window(first, last sample) {
	r.WindowEvents = last.decided - first.decided
	r.WindowSeconds = last.at.Sub(first.at).Seconds()
	if r.WindowEvents <= 0 || r.WindowSeconds <= 0 {
		// Everything became visible at once (a smoke run's one commit).
		return
	}
	n := float64(r.WindowEvents)
	r.EventsPerSec = n / r.WindowSeconds
	perEvent := func(from, to time.Duration) float64 { return float64((to - from).Microseconds()) / n }
	r.CPUMicrosPerEvent = perEvent(first.cpu, last.cpu)
	r.BrokerCPUMicrosPerEvent = perEvent(first.broker, last.broker)
	r.ReaderCPUMicrosPerEvent = perEvent(first.reader, last.reader)
}

func (r *Run) line() string {
	if !r.OK {
		return "FAILED: " + r.Failure
	}
	b := r.LogBytesPerEvent
	return fmt.Sprintf("%8.0f events/s  %6.1f CPU µs/event  broker %6.1f µs/event  reader %4.1f µs/event  (%d events in %.2fs, start-up %.1fs, load %.1f; bytes/event: in %.0f, outcomes %.0f, state %.0f, table %.0f)",
		r.EventsPerSec, r.CPUMicrosPerEvent, r.BrokerCPUMicrosPerEvent, r.ReaderCPUMicrosPerEvent, r.WindowEvents, r.WindowSeconds, r.StartupSeconds, r.Load1,
		b["in"], b["outcomes"], b["state"], b["table"])
}

// Stat is the median and range of one figure over the runs that passed.
type Stat = stats.Summary

// statOf is xs's Stat, zeros (not NaNs) when no run passed.
func statOf(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	return stats.Summarize(xs)
}

// Summary is one contender over every round.
type Summary struct {
	Contender         string `json:"contender"`
	Runs              int    `json:"runs"`
	Passed            int    `json:"passed"`
	EventsPerSec      Stat   `json:"events_per_s"`
	CPUMicrosPerEvent Stat   `json:"cpu_us_per_event"`
	BrokerCPUMicros   Stat   `json:"broker_cpu_us_per_event"`
}

// Ratio compares driftguard with a peer round by round (both passed, the
// same round): events/s driftguard over the peer's, and CPU per event the
// peer's over driftguard's (so more is better for driftguard in both).
type Ratio struct {
	Name         string  `json:"name"`
	Peer         string  `json:"peer"`
	EventsPerSec Stat    `json:"events_per_s"`
	CPUPerEvent  Stat    `json:"cpu_per_event"`
	Target       float64 `json:"target"`
	// Met is set when the median events/s ratio reaches Target.
	Met bool `json:"met"`
}

// targets are issue 15's: driftguard's presence processor at least 5× the
// Kafka Streams application's events/s at at-least-once, 3× at
// exactly_once_v2.
var targets = map[string]float64{ksALOSName: 5, ksEOSName: 3}

func (res *Results) summarize() {
	res.Summary, res.Ratios = nil, nil
	for _, name := range res.Setup.Contenders {
		s := Summary{Contender: name}
		var rate, cpu, broker []float64
		for _, rd := range res.Rounds {
			for _, r := range rd.Runs {
				if r.Contender != name {
					continue
				}
				s.Runs++
				if r.OK {
					s.Passed++
				}
				if r.OK && r.EventsPerSec > 0 {
					rate, cpu, broker = append(rate, r.EventsPerSec), append(cpu, r.CPUMicrosPerEvent), append(broker, r.BrokerCPUMicrosPerEvent)
				}
			}
		}
		s.EventsPerSec, s.CPUMicrosPerEvent = statOf(rate), statOf(cpu)
		if res.Setup.BrokerCPU {
			s.BrokerCPUMicros = statOf(broker)
		}
		res.Summary = append(res.Summary, s)
	}
	if res.Smoke {
		// Too short to time: no ratio, and no target judged.
		return
	}
	for _, peer := range []string{ksALOSName, ksEOSName} {
		var rate, cpu []float64
		for _, rd := range res.Rounds {
			dg, p := rd.find(driftguardName), rd.find(peer)
			if dg == nil || p == nil || !dg.OK || !p.OK || dg.EventsPerSec == 0 || p.EventsPerSec == 0 {
				continue
			}
			rate = append(rate, dg.EventsPerSec/p.EventsPerSec)
			if dg.CPUMicrosPerEvent > 0 {
				cpu = append(cpu, p.CPUMicrosPerEvent/dg.CPUMicrosPerEvent)
			}
		}
		if len(rate) == 0 {
			continue
		}
		r := Ratio{Name: driftguardName + "/" + peer, Peer: peer, EventsPerSec: statOf(rate), CPUPerEvent: statOf(cpu), Target: targets[peer]}
		r.Met = r.EventsPerSec.Median >= r.Target
		res.Ratios = append(res.Ratios, r)
	}
}

func (rd *Round) find(contender string) *Run {
	for i := range rd.Runs {
		if rd.Runs[i].Contender == contender {
			return &rd.Runs[i]
		}
	}
	return nil
}

// AllPassed reports whether every run passed its check.
func (res *Results) AllPassed() bool {
	for _, rd := range res.Rounds {
		for _, r := range rd.Runs {
			if !r.OK {
				return false
			}
		}
	}
	return true
}

// Markdown is the results as tables: per contender, then the ratios.
func (res *Results) Markdown() string {
	var b strings.Builder
	s := res.Setup
	if res.Smoke {
		b.WriteString("Smoke run: it shows that every contender works; its figures are too short to mean anything.\n\n")
	}
	fmt.Fprintf(&b, "Presence processor catch-up: %d events (%d applied, %d duplicate, %d stale) after a %d-event warm-up, %d partitions, %d round(s), %d CPUs\n\n",
		s.Events, res.Expected[record.Applied], res.Expected[record.Duplicate], res.Expected[record.Stale], s.Warmup, s.Partitions, s.Rounds, s.CPUs)
	b.WriteString("| contender | events/s, median (range) | CPU µs/event | broker CPU µs/event | check |\n|---|---|---|---|---|\n")
	for _, sum := range res.Summary {
		check := fmt.Sprintf("%d/%d passed", sum.Passed, sum.Runs)
		if sum.Passed == 0 {
			fmt.Fprintf(&b, "| %s | failed | | | %s |\n", sum.Contender, check)
			continue
		}
		if sum.EventsPerSec.N == 0 {
			fmt.Fprintf(&b, "| %s | too short to time | | | %s |\n", sum.Contender, check)
			continue
		}
		broker := "–"
		if s.BrokerCPU {
			broker = figure(sum.BrokerCPUMicros, "%.1f")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", sum.Contender, figure(sum.EventsPerSec, "%.0f"), figure(sum.CPUMicrosPerEvent, "%.1f"), broker, check)
	}
	if len(res.Ratios) > 0 {
		b.WriteString("\n| ratio (per round) | events/s, median (range) | CPU per event, peer / driftguard | target | met |\n|---|---|---|---|---|\n")
		for _, r := range res.Ratios {
			met := "no"
			if r.Met {
				met = "yes"
			}
			fmt.Fprintf(&b, "| %s | %s× | %s× | ≥%g× | %s |\n", r.Name, figure(r.EventsPerSec, "%.2f"), figure(r.CPUPerEvent, "%.2f"), r.Target, met)
		}
	}
	for _, rd := range res.Rounds {
		for _, r := range rd.Runs {
			if !r.OK {
				fmt.Fprintf(&b, "\nround %d, %s FAILED: %s\n", rd.Round, r.Contender, r.Failure)
			}
		}
	}
	return b.String()
}

func figure(s Stat, format string) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 {
		return fmt.Sprintf(format, s.Median)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s.Median, s.Min, s.Max)
}
