// Package report turns benchmark rounds into the results a reader looks
// at: a dated Markdown file with the table, the raw figures as JSON
// beside it, and PNG plots of throughput, latency percentiles and CPU per
// webhook by process. Figures are medians over interleaved rounds with
// their ranges; a contender the checker failed in any round is shown as
// failed and not ranked.
package report

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/benchmarks/stats"
)

// Results are one benchmark run: what ran, on what, and every round.
type Results struct {
	Date      string    `json:"date"`
	StartedAt time.Time `json:"started_at"`
	Seconds   float64   `json:"seconds"`
	// Command is what produced them; Revision the commit measured.
	Command  string            `json:"command"`
	Revision string            `json:"revision,omitempty"`
	Machine  string            `json:"machine"`
	Smoke    bool              `json:"smoke"`
	Settings map[string]string `json:"settings"`
	// Rate is the load generator's fixed rate, webhooks a second; 0 sent
	// as fast as the contenders answered.
	Rate float64 `json:"rate,omitempty"`
	// Rounds are the end-to-end rounds, every contender fed by the load
	// generator; Processor, the processor-only comparison's (driftguard's
	// presence processor against Kafka Streams, on a preloaded topic).
	Rounds    []model.Round `json:"rounds"`
	Processor []model.Round `json:"processor,omitempty"`
	// Notes are said under the table (contenders not run, and why).
	Notes []string `json:"notes,omitempty"`
}

// Summary is one contender over its rounds.
type Summary struct {
	Contender string `json:"contender"`
	Stream    string `json:"stream"`
	Rounds    int    `json:"rounds"`
	Passed    int    `json:"passed"`
	// Failures are the verdicts of the rounds that did not pass.
	Failures  []string                 `json:"failures,omitempty"`
	PerSecond stats.Summary            `json:"per_second"`
	Latency   map[string]LatencySum    `json:"latency,omitempty"`
	CPU       map[string]stats.Summary `json:"cpu_us_per_event,omitempty"`
	CPUTotal  stats.Summary            `json:"cpu_us_per_event_total"`
	// PeakRSS is the largest peak resident size of each process over the
	// rounds, bytes.
	PeakRSS map[string]int64         `json:"peak_rss_bytes,omitempty"`
	Figures map[string]stats.Summary `json:"figures,omitempty"`
	// KafkaRequests are the Kafka requests per 1,000 webhooks by
	// "process/kind" (model.Round.KafkaRequests).
	KafkaRequests map[string]stats.Summary `json:"kafka_requests_per_1000,omitempty"`
	// BrokerThreads is the broker's CPU µs per webhook by thread role
	// (model.Round.BrokerThreads).
	BrokerThreads map[string]stats.Summary `json:"broker_cpu_us_by_thread,omitempty"`
	// IdleCPU is each process's CPU µs per second at rest
	// (model.Round.IdleCPU).
	IdleCPU map[string]stats.Summary `json:"idle_cpu_us_per_second,omitempty"`
	// IdleBrokerThreads is the broker's CPU µs per second at rest by
	// thread role (model.Round.IdleBrokerThreads).
	IdleBrokerThreads map[string]stats.Summary `json:"idle_broker_cpu_us_per_second_by_thread,omitempty"`
	// IdleKafkaRequests are the Kafka requests per second at rest by
	// "process/kind" (model.Round.IdleKafkaRequests).
	IdleKafkaRequests map[string]stats.Summary `json:"idle_kafka_requests_per_second,omitempty"`
}

// LatencySum is a latency's percentiles summarised over rounds.
type LatencySum struct {
	P50 stats.Summary `json:"p50"`
	P99 stats.Summary `json:"p99"`
}

// OK reports whether every round of the contender passed the checker.
func (s Summary) OK() bool { return s.Rounds > 0 && s.Passed == s.Rounds }

// Summarize summarises rounds per contender, in the order contenders
// first appear.
func Summarize(rounds []model.Round) []Summary {
	var order []string
	by := map[string][]model.Round{}
	for _, r := range rounds {
		if _, ok := by[r.Contender]; !ok {
			order = append(order, r.Contender)
		}
		by[r.Contender] = append(by[r.Contender], r)
	}
	var out []Summary
	for _, name := range order {
		rs := by[name]
		s := Summary{Contender: name, Stream: rs[0].Stream, Rounds: len(rs), Latency: map[string]LatencySum{},
			PeakRSS: map[string]int64{}}
		collect := func(f func(model.Round) (float64, bool)) stats.Summary {
			var v []float64
			for _, r := range rs {
				if x, ok := f(r); ok {
					v = append(v, x)
				}
			}
			return stats.Summarize(v)
		}
		for _, r := range rs {
			if r.Verdict.Passed {
				s.Passed++
			} else {
				s.Failures = append(s.Failures, fmt.Sprintf("round %d: %s", r.Round, describe(r.Verdict)))
			}
			for p, n := range r.PeakRSS {
				s.PeakRSS[p] = max(s.PeakRSS[p], n)
			}
		}
		s.PerSecond = collect(func(r model.Round) (float64, bool) { return r.PerSecond, true })
		for _, kind := range keys(rs, func(r model.Round) []string { return slices.Collect(maps.Keys(r.Latency)) }) {
			s.Latency[kind] = LatencySum{
				P50: collect(func(r model.Round) (float64, bool) { l, ok := r.Latency[kind]; return l.P50, ok }),
				P99: collect(func(r model.Round) (float64, bool) { l, ok := r.Latency[kind]; return l.P99, ok }),
			}
		}
		s.CPU = summarizeByKey(rs, func(r model.Round) map[string]float64 { return r.CPUPerEvent })
		s.CPUTotal = collect(func(r model.Round) (float64, bool) {
			// In the processes' order, so that the same rounds always sum
			// to the same last bit (a map's order is random).
			t := 0.0
			for _, name := range slices.Sorted(maps.Keys(r.CPUPerEvent)) {
				t += r.CPUPerEvent[name]
			}
			return t, len(r.CPUPerEvent) > 0
		})
		s.KafkaRequests = summarizeByKey(rs, func(r model.Round) map[string]float64 { return r.KafkaRequests })
		s.IdleCPU = summarizeByKey(rs, func(r model.Round) map[string]float64 { return r.IdleCPU })
		s.IdleBrokerThreads = summarizeByKey(rs, func(r model.Round) map[string]float64 { return r.IdleBrokerThreads })
		s.IdleKafkaRequests = summarizeByKey(rs, func(r model.Round) map[string]float64 { return r.IdleKafkaRequests })
		s.BrokerThreads = summarizeByKey(rs, func(r model.Round) map[string]float64 { return r.BrokerThreads })
		s.Figures = summarizeByKey(rs, func(r model.Round) map[string]float64 { return r.Figures })
		out = append(out, s)
	}
	return out
}

// summarizeByKey summarises, key by key, a figure the rounds keep by
// name: each key over the rounds that have it.
func summarizeByKey(rs []model.Round, get func(model.Round) map[string]float64) map[string]stats.Summary {
	out := map[string]stats.Summary{}
	for _, k := range keys(rs, func(r model.Round) []string { return slices.Collect(maps.Keys(get(r))) }) {
		var v []float64
		for _, r := range rs {
			if x, ok := get(r)[k]; ok {
				v = append(v, x)
			}
		}
		out[k] = stats.Summarize(v)
	}
	return out
}

func keys(rs []model.Round, f func(model.Round) []string) []string {
	set := map[string]bool{}
	for _, r := range rs {
		for _, k := range f(r) {
			set[k] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func describe(v model.Verdict) string {
	if v.Error != "" {
		return v.Error
	}
	return fmt.Sprintf("lost %d, doubled %d, state mismatches %d, never accepted %d", v.Lost, v.Doubled, v.Mismatched, v.Failed)
}

// Write writes <date>.md, <date>.json and the plots <date>-*.png into
// dir, and returns the Markdown file's path.
func Write(dir string, res *Results) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	base := filepath.Join(dir, res.Date)
	if err := model.WriteJSON(base+".json", res); err != nil {
		return "", err
	}
	sums := Summarize(res.Rounds)
	plots, err := drawPlots(base, sums)
	if err != nil {
		return "", err
	}
	md := Markdown(res, sums, plots)
	return base + ".md", os.WriteFile(base+".md", []byte(md), 0o644)
}

// processOrder is how processes are listed: the path of a webhook.
var processOrder = []string{"loadgen", "ingest", "peer", "broker", "processors", "sink", "clickhouse", "postgres", "redis"}

// sortProcesses sorts process names in processOrder, others after.
func sortProcesses(names []string) []string {
	slices.SortFunc(names, func(a, b string) int {
		ia, ib := slices.Index(processOrder, a), slices.Index(processOrder, b)
		if ia < 0 {
			ia = len(processOrder)
		}
		if ib < 0 {
			ib = len(processOrder)
		}
		if ia != ib {
			return ia - ib
		}
		return strings.Compare(a, b)
	})
	return names
}

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// withRange is "median (min–max)", or the median alone for one round.
func withRange(s stats.Summary) string {
	if s.N <= 1 {
		return num(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", num(s.Median), num(s.Min), num(s.Max))
}

func mib(n int64) string { return fmt.Sprintf("%.0f", float64(n)/(1<<20)) }
