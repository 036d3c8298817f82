package report

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/benchmarks/stats"
)

// Targets of a webhook's whole cost, checked in the results: driftguard
// ahead of the Redis design in the same run, its own CPU and the broker's
// per webhook at the maximum rate, and the broker's share of a core at a
// low fixed rate.
const (
	TargetRatioOverRedis      = 1.2
	TargetDecisionP99Ms       = 250
	TargetOwnCPUMicros        = 70
	TargetBrokerCPUMicros     = 20
	TargetBrokerCoreAtLowRate = 0.10
	LowRate                   = 200
	redisPeer                 = "redis orders"
	// brokerJIT is the broker's thread role of its JIT compiler threads
	// (model.Round.BrokerThreads).
	brokerJIT        = "JIT compilation"
	driftguardPrefix = "driftguard "
)

// Markdown renders the results: what ran, the table of the passing
// contenders, the failed ones apart, CPU by process, the targets, and the
// processor-only comparison.
func Markdown(res *Results, sums []Summary, plots Plots) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmarks, %s\n\n", res.Date)
	if res.Smoke {
		w("**A smoke run**: small counts that only show the tools work; the figures mean nothing.\n\n")
	}
	for _, n := range res.Notes {
		w("%s\n\n", n)
	}
	w("Produced by `%s`", res.Command)
	if res.Revision != "" {
		w(" at revision `%s`", res.Revision)
	}
	w(" on %s, in %.0f s.\n\n", res.Machine, res.Seconds)
	if len(res.Settings) > 0 {
		w("Settings: ")
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(res.Settings)) {
			parts = append(parts, fmt.Sprintf("%s `%s`", k, res.Settings[k]))
		}
		w("%s.\n\n", strings.Join(parts, ", "))
	}

	var ok, failed []Summary
	for _, s := range sums {
		if s.OK() {
			ok = append(ok, s)
		} else {
			failed = append(failed, s)
		}
	}
	slices.SortStableFunc(ok, func(a, b Summary) int { return cmp.Compare(b.PerSecond.Median, a.PerSecond.Median) })
	w("## End to end\n\n")
	w("Each contender fed the same signed webhooks by `benchmarks/loadgen`, in interleaved rounds; medians with the range over rounds in parentheses. ")
	w("webhooks/s are those accepted (2xx) in the measured window; decided/s, driftguard's first decisions of webhooks made in the same window (below webhooks/s when the processors fall behind). ")
	latencies := latencyKinds(ok)
	timedCommits := slices.Contains(latencies, committedLatency)
	w("Latencies in ms: ack is the HTTP answer, decision is accepted → decided (driftguard's outcome record, inside its transaction), ")
	if timedCommits {
		w("committed is accepted → the commit of that transaction (its commit marker's time), when a read_committed reader (the sink, the bridge, any consumer) sees the decision, ")
	}
	w("row is accepted → row in ClickHouse (sampled every 100 ms). ")
	w("Every contender listed passed `benchmarks/check` in every round: nothing lost, nothing doubled, the final state the model's.\n\n")
	w("| contender | rounds passed | webhooks/s | decided/s |")
	for _, kind := range latencies {
		w(" %s p50 / p99 |", kind)
	}
	w(" CPU µs/webhook | peak RSS MiB |\n")
	w("|---|---|---|---|%s---|---|\n", strings.Repeat("---|", len(latencies)))
	for _, s := range ok {
		decided := "–"
		if d, found := s.Figures["decided_per_second"]; found {
			decided = withRange(d)
		}
		w("| %s | %d/%d | %s | %s |", s.Contender, s.Passed, s.Rounds, withRange(s.PerSecond), decided)
		for _, kind := range latencies {
			w(" %s |", latency(s, kind))
		}
		w(" %s | %s |\n", withRange(s.CPUTotal), rss(s))
	}
	w("\n")
	if len(failed) > 0 {
		w("Failed the checker, not ranked:\n\n")
		for _, s := range failed {
			w("- **%s**: %d of %d rounds passed; %s\n", s.Contender, s.Passed, s.Rounds, strings.Join(s.Failures, "; "))
		}
		w("\n")
	}
	if plots.Throughput != "" {
		w("![throughput](%s)\n\n![latency percentiles](%s)\n\n![CPU per webhook by process](%s)\n\n",
			filepath.Base(plots.Throughput), filepath.Base(plots.Latency), filepath.Base(plots.CPU))
	}

	if len(ok) > 0 {
		w("### CPU µs per webhook by process\n\n")
		procs := map[string]bool{}
		for _, s := range ok {
			for p := range s.CPU {
				procs[p] = true
			}
		}
		names := sortProcesses(slices.Collect(maps.Keys(procs)))
		w("| contender | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---|", len(names)))
		for _, s := range ok {
			var cells []string
			for _, p := range names {
				if c, found := s.CPU[p]; found {
					cells = append(cells, withRange(c))
				} else {
					cells = append(cells, "")
				}
			}
			w("| %s | %s |\n", s.Contender, strings.Join(cells, " | "))
		}
		w("\nCPU is user + system time from `/proc/<pid>/stat` (every thread, and the processes below it) over the measured window, divided by the webhooks accepted in it; peak RSS is `VmHWM` (summed over a server's processes).\n\n")
	}

	if table := brokerThreadsTable(ok); table != "" {
		w("%s", table)
	}
	if table := kafkaRequestsTable(ok); table != "" {
		w("%s", table)
	}
	if table := restTable(ok); table != "" {
		w("%s", table)
	}

	w("## Targets\n\n")
	for _, line := range append(targets(ok, failed, res.Rate), processorTargets(Summarize(res.Processor))...) {
		w("- %s\n", line)
	}
	w("\n")

	if len(res.Processor) > 0 {
		w("## The presence processor alone, against Kafka Streams\n\n")
		w("`benchmarks/processor`: each contender decides the same preloaded `presence.in` on one broker, in interleaved rounds.\n\n")
		w("| contender | rounds passed | events/s | CPU µs/event (process) | broker CPU µs/event |\n|---|---|---|---|---|\n")
		for _, s := range Summarize(res.Processor) {
			verdict := fmt.Sprintf("%d/%d", s.Passed, s.Rounds)
			if !s.OK() {
				verdict += " (failed: " + strings.Join(s.Failures, "; ") + ")"
			}
			w("| %s | %s | %s | %s | %s |\n", s.Contender, verdict, withRange(s.PerSecond), withRange(s.CPU["process"]), withRange(s.CPU["broker"]))
		}
		w("\n")
	}
	return b.String()
}

// committedLatency is the latency kind of a decision's commit (see
// model.Contender.Latency).
const committedLatency = "committed"

// latencyKinds are the latencies, in the order of a webhook's path, that
// some contender measured: results from before the commit of each
// decision was timed have no "committed".
func latencyKinds(ok []Summary) []string {
	return slices.DeleteFunc([]string{"ack", "decision", committedLatency, "row"}, func(k string) bool {
		return !slices.ContainsFunc(ok, func(s Summary) bool { _, found := s.Latency[k]; return found })
	})
}

func latency(s Summary, kind string) string {
	l, found := s.Latency[kind]
	if !found || l.P50.N == 0 {
		return "–"
	}
	return fmt.Sprintf("%s / %s", num(l.P50.Median), withRange(l.P99))
}

func rss(s Summary) string {
	var total int64
	for _, n := range s.PeakRSS {
		total += n
	}
	return mib(total)
}

// targets says, for each target, whether these results meet it. rate is
// the run's fixed rate (0: as fast as answered): the throughput and
// per-webhook CPU targets are set at the maximum rate, the broker's share
// of a core at a low one.
func targets(ok, failed []Summary, rate float64) []string {
	var out []string
	var redis *Summary
	for i := range ok {
		if ok[i].Contender == redisPeer {
			redis = &ok[i]
		}
	}
	redisFailed := slices.ContainsFunc(failed, func(s Summary) bool { return s.Contender == redisPeer })
	for _, s := range ok {
		if !strings.HasPrefix(s.Contender, driftguardPrefix) {
			continue
		}
		// The decision's p99 as readers see it: at its commit, where the
		// run timed it.
		p99, decisionSaid := s.Latency["decision"].P99.Median, "decision"
		if c, found := s.Latency[committedLatency]; found {
			p99, decisionSaid = c.P99.Median, "committed decision"
		}
		own := s.CPUTotal.Median - s.CPU["loadgen"].Median
		broker := s.CPU["broker"].Median
		if rate > 0 {
			share, rest := broker*rate/1e6, ", idle included"
			if idle, ok := s.IdleCPU["broker"]; ok {
				// The target counts what the load adds to a broker at rest.
				share -= idle.Median / 1e6
				rest = fmt.Sprintf(" above its %.1f%% at rest", idle.Median/1e4)
				jit, inWindow := s.BrokerThreads[brokerJIT]
				restJIT, atRest := s.IdleBrokerThreads[brokerJIT]
				if inWindow && atRest {
					// As at full rate, the JIT compilation of a broker
					// started for the round is left out, at rest and
					// under load alike.
					withJIT := share
					share -= (jit.Median*rate - restJIT.Median) / 1e6
					rest = fmt.Sprintf(" above its %.1f%% at rest, both without the JIT compilation of a broker started for the round (%.1f%% with it)",
						(idle.Median-restJIT.Median)/1e4, 100*withJIT)
				}
			}
			out = append(out, fmt.Sprintf("%s at %s webhooks/s: driftguard's own CPU %s µs per webhook; the broker %.1f%% of a core%s, against ≤ %.0f%% at %d/s%s",
				s.Contender, num(rate), num(own), 100*share, rest, 100*TargetBrokerCoreAtLowRate, LowRate, lowRateVerdict(rate, share)))
			continue
		}
		switch {
		case redis != nil && redis.PerSecond.Median > 0:
			r := s.PerSecond.Median / redis.PerSecond.Median
			out = append(out, fmt.Sprintf("%s over %s: %s× the webhooks/s with p99 accept → %s %s ms, against ≥ %.1f× with p99 ≤ %d ms: %s",
				s.Contender, redisPeer, ratio(r, TargetRatioOverRedis), decisionSaid, num(p99), TargetRatioOverRedis, TargetDecisionP99Ms, metOrNot(r >= TargetRatioOverRedis && p99 <= TargetDecisionP99Ms)))
		case redisFailed:
			out = append(out, fmt.Sprintf("%s over %s: not compared, %s failed the checker", s.Contender, redisPeer, redisPeer))
		default:
			out = append(out, fmt.Sprintf("%s over %s: not compared, %s did not run", s.Contender, redisPeer, redisPeer))
		}
		ownSaid := fmt.Sprintf("%s: driftguard's own CPU (every process but loadgen) %s µs per webhook", s.Contender, num(own))
		brokerSaid := fmt.Sprintf("%s: the broker's CPU %s µs per webhook", s.Contender, num(broker))
		if jit, ok := s.BrokerThreads[brokerJIT]; ok {
			// Every round starts its own broker, whose JVM compiles its hot
			// code during the first minutes: a cost a broker running for
			// weeks has long paid, so the targets are judged without it.
			own, broker = own-jit.Median, broker-jit.Median
			ownSaid += ", " + num(own) + " without the broker's JIT compilation"
			brokerSaid += ", " + num(jit.Median) + " of it the JIT compilation of a broker started for the round; " + num(broker) + " without it"
		}
		out = append(out, fmt.Sprintf("%s, against ≤ %d: %s", ownSaid, TargetOwnCPUMicros, metOrNot(own <= TargetOwnCPUMicros)))
		out = append(out, fmt.Sprintf("%s, against ≤ %d: %s", brokerSaid, TargetBrokerCPUMicros, metOrNot(broker <= TargetBrokerCPUMicros)))
	}
	for _, s := range failed {
		if strings.HasPrefix(s.Contender, driftguardPrefix) {
			out = append(out, fmt.Sprintf("%s: no target met, it failed the checker", s.Contender))
		}
	}
	return out
}

// lowRateVerdict judges the broker's share of a core against its target
// when the run's rate is the low rate the target names, or at most it.
func lowRateVerdict(rate, share float64) string {
	if rate > LowRate {
		return " (not judged: the target is at " + strconv.Itoa(LowRate) + "/s)"
	}
	return ": " + metOrNot(share <= TargetBrokerCoreAtLowRate)
}

// ratio writes r, a ratio judged against target, with two decimals, or
// as many more as it takes to read on the side of the target it is: a
// 4.997× short of 5× does not read as 5.00×.
func ratio(r, target float64) string {
	for digits := 2; ; digits++ {
		s := strconv.FormatFloat(r, 'f', digits, 64)
		if shown, _ := strconv.ParseFloat(s, 64); (shown >= target) == (r >= target) || digits == 6 {
			return s
		}
	}
}

func metOrNot(met bool) string {
	if met {
		return "**met**"
	}
	return "**not met**"
}

// processorTargets compares driftguard's presence processor with the
// Kafka Streams application, median over median, as the issue sets them.
func processorTargets(sums []Summary) []string {
	var dg *Summary
	for i := range sums {
		if sums[i].Contender == "driftguard" {
			dg = &sums[i]
		}
	}
	if dg == nil {
		return nil
	}
	var out []string
	for _, t := range []struct {
		peer   string
		target float64
	}{{"kstreams-alos", 5}, {"kstreams-eos", 3}} {
		for _, s := range sums {
			if s.Contender != t.peer {
				continue
			}
			if !dg.OK() || !s.OK() || s.PerSecond.Median <= 0 {
				out = append(out, fmt.Sprintf("the presence processor over %s: not compared, one of them failed its check", t.peer))
				continue
			}
			r := dg.PerSecond.Median / s.PerSecond.Median
			out = append(out, fmt.Sprintf("the presence processor over %s: %s× the events/s (median over median), against ≥ %.0f×: %s", t.peer, ratio(r, t.target), t.target,
				metOrNot(r >= t.target)))
		}
	}
	return out
}

// kafkaRequestsTable is the Kafka requests each process of the contenders
// that report them wrote per 1,000 webhooks, by kind, the kinds most
// written first, and its records per produce batch; empty when none
// reports them.
func kafkaRequestsTable(sums []Summary) string {
	total := map[string]float64{}
	procs := map[string]bool{}
	for _, s := range sums {
		for key, v := range s.KafkaRequests {
			process, kind, _ := strings.Cut(key, "/")
			procs[process] = true
			if !model.IsPseudoKind(kind) {
				total[kind] += v.Median
			}
		}
	}
	if len(total) == 0 {
		return ""
	}
	kinds := slices.SortedFunc(maps.Keys(total), func(a, b string) int {
		if c := cmp.Compare(total[b], total[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	b.WriteString("### Kafka requests per 1,000 webhooks by process\n\n")
	fmt.Fprintf(&b, "| contender | process | %s | records per produce batch | bytes produced per webhook (before compression) |\n|---|---|%s---|---|\n", strings.Join(kinds, " | "), strings.Repeat("---|", len(kinds)))
	for _, s := range sums {
		for _, process := range sortProcesses(slices.Collect(maps.Keys(procs))) {
			var cells []string
			shown := false
			for _, kind := range kinds {
				if v, found := s.KafkaRequests[process+"/"+kind]; found {
					cells = append(cells, withRange(v))
					shown = true
				} else {
					cells = append(cells, "")
				}
			}
			if !shown {
				continue
			}
			perBatch := ""
			if batches, found := s.KafkaRequests[process+"/"+model.KindProduceBatches]; found && batches.Median > 0 {
				perBatch = num(s.KafkaRequests[process+"/"+model.KindProduceRecords].Median / batches.Median)
			}
			bytes := ""
			if sent, found := s.KafkaRequests[process+"/"+model.KindProduceBytes]; found {
				bytes = num(sent.Median / 1000)
				if raw, found := s.KafkaRequests[process+"/"+model.KindProduceRawBytes]; found {
					bytes += " (" + num(raw.Median/1000) + ")"
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", s.Contender, process, strings.Join(cells, " | "), perBatch, bytes)
		}
	}
	b.WriteString("\nRequests each process's Kafka clients wrote over the measured window (`driftguard_kafka_requests_total`, by the protocol's request name), per 1,000 webhooks accepted in it, medians over rounds with their ranges; records per produce batch from franz-go's `produce_records_total` over `produce_batches_total`; bytes produced per webhook from `produce_compressed_bytes_total`, as the batches went to the broker (`kafka.compression`), and `produce_bytes_total` before compression. The broker's cost follows its requests more than its records.\n\n")
	return b.String()
}

// brokerThreadsTable is the broker's CPU per webhook by what its threads
// do, the roles that cost most first; empty when no contender has a
// broker's thread dumps.
func brokerThreadsTable(sums []Summary) string {
	total := map[string]float64{}
	for _, s := range sums {
		for role, v := range s.BrokerThreads {
			total[role] += v.Median
		}
	}
	if len(total) == 0 {
		return ""
	}
	roles := slices.SortedFunc(maps.Keys(total), func(a, b string) int {
		return cmp.Or(cmp.Compare(total[b], total[a]), strings.Compare(a, b))
	})
	var b strings.Builder
	b.WriteString("### The broker's CPU µs per webhook by thread\n\n")
	fmt.Fprintf(&b, "| contender | %s |\n|---|%s\n", strings.Join(roles, " | "), strings.Repeat("---|", len(roles)))
	for _, s := range sums {
		if len(s.BrokerThreads) == 0 {
			continue
		}
		cells := make([]string, len(roles))
		for i, role := range roles {
			if v, found := s.BrokerThreads[role]; found {
				cells[i] = withRange(v)
			}
		}
		fmt.Fprintf(&b, "| %s | %s |\n", s.Contender, strings.Join(cells, " | "))
	}
	b.WriteString("\nThe CPU each of the broker's threads used over the measured window, from the JVM's thread dumps (`jcmd <pid> Thread.print`) at its edges, summed by what the threads do and divided by the webhooks accepted in it; medians over rounds with their ranges. Request handlers run the requests, network threads read and write them, the coordinators keep consumer groups and transactions.\n\n")
	return b.String()
}

// restTable is what each process of the contenders measured at rest
// (--idle-seconds) cost a second: its CPU, the broker's by thread role,
// and the Kafka requests it wrote; empty when none was.
func restTable(sums []Summary) string {
	var b strings.Builder
	for _, s := range sums {
		if len(s.IdleCPU) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("### At rest\n\n| contender | process | CPU, % of a core | the broker's by thread, % of a core | Kafka requests a second |\n|---|---|---|---|---|\n")
		}
		for _, process := range sortProcesses(slices.Collect(maps.Keys(s.IdleCPU))) {
			var threads, requests []string
			if process == "broker" {
				threads = largestFirst(s.IdleBrokerThreads, "", 1e-4)
			}
			requests = largestFirst(s.IdleKafkaRequests, process+"/", 1)
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", s.Contender, process, num(s.IdleCPU[process].Median/1e4),
				strings.Join(threads, ", "), strings.Join(requests, ", "))
		}
	}
	if b.Len() == 0 {
		return ""
	}
	b.WriteString("\nEach process over the seconds at rest before the load (`--idle-seconds`), medians over rounds: its CPU, the broker's split by what its threads do, and the Kafka requests each process's clients wrote, by kind. What a target counts \"above rest\" is above these.\n\n")
	return b.String()
}

// largestFirst lists the figures of m whose key starts with prefix, as
// "name value" with the prefix cut and the value scaled, largest first,
// leaving out pseudo-kinds and what rounds to zero.
func largestFirst(m map[string]stats.Summary, prefix string, scale float64) []string {
	var names []string
	for k, v := range m {
		if name, ok := strings.CutPrefix(k, prefix); ok && !model.IsPseudoKind(name) && v.Median*scale >= 0.005 {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(m[prefix+b].Median, m[prefix+a].Median), strings.Compare(a, b))
	})
	out := make([]string, len(names))
	for i, name := range names {
		out[i] = name + " " + num(m[prefix+name].Median*scale)
	}
	return out
}
