package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/driftguard/driftguard/benchmarks/model"
)

func round(name string, n int, perSecond float64, passed bool) model.Round {
	return model.Round{Contender: name, Round: n, Stream: "presence", PerSecond: perSecond,
		Latency:     map[string]model.Percentiles{"ack": {P50: 2, P99: 9}, "decision": {P50: 40, P99: 200}},
		CPUPerEvent: map[string]float64{"ingest": 50, "broker": 150},
		PeakRSS:     map[string]int64{"ingest": 64 << 20},
		Verdict:     model.Verdict{Passed: passed, Lost: map[bool]int{true: 0, false: 3}[passed]}}
}

// A contender that failed a round is listed as failed, with its verdict,
// and neither ranked nor compared; the others get medians and ranges.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	res := &Results{Date: "2026-01-02", Command: "go tool task bench", Machine: "2 cores", Rounds: []model.Round{
		round("driftguard presence", 1, 9000, true), round("postgres presence", 1, 800, true),
		round("driftguard presence", 2, 11000, true), round("postgres presence", 2, 900, false),
		round("driftguard presence", 3, 10000, true), round("postgres presence", 3, 700, true),
	}}
	path, err := Write(dir, res)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"| driftguard presence | 3/3 | 10000 (9000–11000) | – |",
		"- **postgres presence**: 2 of 3 rounds passed; round 2: lost 3",
		"driftguard presence over redis orders: not compared, redis orders did not run",
		"driftguard presence: driftguard's own CPU (every process but loadgen) 200 µs per webhook, against ≤ 70: **not met**",
		"driftguard presence: the broker's CPU 150 µs per webhook, against ≤ 20: **not met**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the results lack %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| postgres presence |") {
		t.Errorf("a failed contender is in the table:\n%s", md)
	}
	for _, f := range []string{"2026-01-02.json", "2026-01-02-throughput.png", "2026-01-02-latency.png", "2026-01-02-cpu.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// A run that timed its decisions' commits has a column for them; one
// from before, regenerated, has none.
func TestCommittedColumn(t *testing.T) {
	before := round("driftguard orders", 1, 9000, true)
	if md := Markdown(&Results{Date: "2026-01-02", Rounds: []model.Round{before}}, Summarize([]model.Round{before}), Plots{}); strings.Contains(md, "committed") {
		t.Errorf("results without commit times name them:\n%s", md)
	}
	after := round("driftguard orders", 1, 9000, true)
	after.Latency = map[string]model.Percentiles{"ack": {P50: 2, P99: 9}, "decision": {P50: 40, P99: 200}, "committed": {P50: 120, P99: 300}, "row": {P50: 1500, P99: 2000}}
	md := Markdown(&Results{Date: "2026-01-02", Rounds: []model.Round{after}}, Summarize([]model.Round{after}), Plots{})
	for _, want := range []string{
		"| contender | rounds passed | webhooks/s | decided/s | ack p50 / p99 | decision p50 / p99 | committed p50 / p99 | row p50 / p99 | CPU µs/webhook | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|\n",
		"| driftguard orders | 1/1 | 9000 | – | 2.00 / 9.00 | 40.0 / 200 | 120 / 300 | 1500 / 2000 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the results lack %q:\n%s", want, md)
		}
	}
}

// A ratio just short of its target does not read as the target.
func TestRatio(t *testing.T) {
	for _, c := range []struct {
		r, target float64
		want      string
	}{{4.997, 5, "4.997"}, {5, 5, "5.00"}, {5.004, 5, "5.00"}, {1.19999, 1.2, "1.19999"}, {0.54, 1.2, "0.54"}, {4.9999999, 5, "5.000000"}} {
		if got := ratio(c.r, c.target); got != c.want {
			t.Errorf("ratio(%v, %v) = %s, want %s", c.r, c.target, got, c.want)
		}
	}
}

// The Kafka requests of the contenders that report them: a row per
// process, kinds most written first, records per produce batch; none
// for a peer.
func TestKafkaRequestsTable(t *testing.T) {
	rounds := []model.Round{round("postgres presence", 1, 800, true)}
	for n, produce := range []float64{10, 12, 14} {
		r := round("driftguard presence", n+1, 9000, true)
		r.KafkaRequests = map[string]float64{"ingest/Produce": produce, "ingest/Metadata": 0.1,
			"ingest/" + model.KindProduceBatches: 100, "ingest/" + model.KindProduceRecords: 1000,
			"ingest/" + model.KindProduceBytes: 150_000, "ingest/" + model.KindProduceRawBytes: 400_000,
			"processors/Fetch": 3, "processors/EndTxn": 2}
		rounds = append(rounds, r)
	}
	md := Markdown(&Results{Date: "2026-01-02", Rounds: rounds}, Summarize(rounds), Plots{})
	for _, want := range []string{
		"| contender | process | Produce | Fetch | EndTxn | Metadata | records per produce batch | bytes produced per webhook (before compression) |",
		"| driftguard presence | ingest | 12.0 (10.0–14.0) |  |  | 0.10 (0.10–0.10) | 10.0 | 150 (400) |",
		"| driftguard presence | processors |  | 3.00 (3.00–3.00) | 2.00 (2.00–2.00) |  |  |  |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the results lack %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| postgres presence | ingest") {
		t.Errorf("a peer has Kafka requests:\n%s", md)
	}
}

// The targets: the ratio over the Redis design with the decision p99, the
// own and broker CPU per webhook at the maximum rate, and the broker's
// share of a core judged only at the low rate.
func TestTargets(t *testing.T) {
	dg := round("driftguard orders", 1, 12000, true)
	dg.CPUPerEvent = map[string]float64{"loadgen": 30, "ingest": 30, "broker": 18, "processors": 10}
	peer := round("redis orders", 1, 10000, true)
	got := strings.Join(targets(Summarize([]model.Round{dg, peer}), nil, 0), "\n")
	for _, want := range []string{
		"driftguard orders over redis orders: 1.20× the webhooks/s with p99 accept → decision 200 ms, against ≥ 1.2× with p99 ≤ 250 ms: **met**",
		"driftguard orders: driftguard's own CPU (every process but loadgen) 58.0 µs per webhook, against ≤ 70: **met**",
		"driftguard orders: the broker's CPU 18.0 µs per webhook, against ≤ 20: **met**",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("targets lack %q:\n%s", want, got)
		}
	}
	// Where the run timed each decision's commit, the target judges that:
	// a decision no reader sees yet is not made.
	committed := dg
	committed.Latency = map[string]model.Percentiles{"ack": {P50: 2, P99: 9}, "decision": {P50: 40, P99: 200}, "committed": {P50: 120, P99: 300}}
	if late := strings.Join(targets(Summarize([]model.Round{committed, peer}), nil, 0), "\n"); !strings.Contains(late,
		"1.20× the webhooks/s with p99 accept → committed decision 300 ms, against ≥ 1.2× with p99 ≤ 250 ms: **not met**") {
		t.Errorf("the decision target without the commit's latency:\n%s", late)
	}
	dg.BrokerThreads = map[string]float64{"JIT compilation": 10, "request handlers": 8}
	if jit := strings.Join(targets(Summarize([]model.Round{dg, peer}), nil, 0), "\n"); !strings.Contains(jit,
		"the broker's CPU 18.0 µs per webhook, 10.0 of it the JIT compilation of a broker started for the round; 8.00 without it, against ≤ 20: **met**") ||
		!strings.Contains(jit, "driftguard's own CPU (every process but loadgen) 58.0 µs per webhook, 48.0 without the broker's JIT compilation, against ≤ 70: **met**") {
		t.Errorf("the broker's target without its JIT compilation:\n%s", jit)
	}
	dg.BrokerThreads = nil
	dg.CPUPerEvent["broker"] = 400 // 400 µs × 200/s = 8% of a core
	low := strings.Join(targets(Summarize([]model.Round{dg}), nil, 200), "\n")
	if want := "the broker 8.0% of a core, idle included, against ≤ 10% at 200/s: **met**"; !strings.Contains(low, want) {
		t.Errorf("low-rate targets lack %q:\n%s", want, low)
	}
	dg.IdleCPU = map[string]float64{"broker": 30_000} // 3% of a core at rest
	if above := strings.Join(targets(Summarize([]model.Round{dg}), nil, 200), "\n"); !strings.Contains(above, "the broker 5.0% of a core above its 3.0% at rest, against ≤ 10% at 200/s: **met**") {
		t.Errorf("low-rate target above the broker's rest:\n%s", above)
	}
	dg.BrokerThreads = map[string]float64{"JIT compilation": 150, "request handlers": 100} // 3% of a core compiling under load
	dg.IdleBrokerThreads = map[string]float64{"JIT compilation": 20_000}                   // 2% of a core compiling at rest
	if noJIT := strings.Join(targets(Summarize([]model.Round{dg}), nil, 200), "\n"); !strings.Contains(noJIT,
		"the broker 4.0% of a core above its 1.0% at rest, both without the JIT compilation of a broker started for the round (5.0% with it), against ≤ 10% at 200/s: **met**") {
		t.Errorf("low-rate target without the broker's JIT compilation:\n%s", noJIT)
	}
	dg.BrokerThreads, dg.IdleBrokerThreads = nil, nil
	if mid := strings.Join(targets(Summarize([]model.Round{dg}), nil, 5000), "\n"); !strings.Contains(mid, "not judged") {
		t.Errorf("the low-rate target judged at 5000/s:\n%s", mid)
	}
}

// The processes at rest: CPU as a share of a core, the broker's by thread
// largest first, and each process's own requests a second, without the
// pseudo-kinds.
func TestRestTable(t *testing.T) {
	r := round("driftguard all", 1, 200, true)
	r.IdleCPU = map[string]float64{"broker": 120_000, "processors": 46_000}
	r.IdleBrokerThreads = map[string]float64{"network": 48_000, "request handlers": 27_000, "log maintenance": 10}
	r.IdleKafkaRequests = map[string]float64{"processors/Heartbeat": 4, "processors/Fetch": 12.5, "processors/produce records": 3, "bridge/Fetch": 5}
	got := restTable(Summarize([]model.Round{r}))
	for _, want := range []string{
		"| driftguard all | broker | 12.0 | network 4.80, request handlers 2.70 |  |\n",
		"| driftguard all | processors | 4.60 |  | Fetch 12.5, Heartbeat 4.00 |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table at rest lacks %q:\n%s", want, got)
		}
	}
	if restTable(Summarize([]model.Round{round("driftguard all", 1, 200, true)})) != "" {
		t.Error("a table at rest for rounds that measured none")
	}
}

// The same rounds always give the same total CPU, to the last bit: the
// processes are summed in one order, whatever a map's.
func TestCPUTotalIsTheSameEveryTime(t *testing.T) {
	r := round("driftguard orders", 1, 9000, true)
	// Summed in another order, 1e16 + 1 - 1e16 is 0 or 1 in float64.
	r.CPUPerEvent = map[string]float64{"a": 1e16, "b": 1, "c": -1e16, "d": 0.5, "e": 0.25}
	want := Summarize([]model.Round{r})[0].CPUTotal.Median
	for range 100 {
		if got := Summarize([]model.Round{r})[0].CPUTotal.Median; got != want {
			t.Fatalf("total CPU %v, then %v", want, got)
		}
	}
}
