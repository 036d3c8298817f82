package model

import (
	"encoding/json"

	"github.com/driftguard/driftguard/benchmarks/stats"
)

// Round is one measured run of one contender, as the benchmark runner
// records it in the results' JSON (the Kafka Streams comparison's runs
// are read into it too).
type Round struct {
	// Contender names what ran, e.g. "driftguard presence" or
	// "postgres presence"; rounds of one contender are summarised together.
	Contender string `json:"contender"`
	// Round numbers the interleaved rounds from 1.
	Round int `json:"round"`
	// Stream is the stream the contender was fed.
	Stream string `json:"stream"`
	// Events counts what was measured: webhooks accepted in the measured
	// window (or, for a processor on its own, events decided), over
	// Seconds; PerSecond is their ratio.
	Events    int     `json:"events"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// Latency holds percentiles in milliseconds by what they measure:
	// "ack" (the contender's HTTP answer), "decision" (accepted → decided,
	// inside the decision's transaction), "committed" (accepted → the
	// commit of that transaction, when a read_committed reader sees the
	// decision) and "row" (accepted → row in ClickHouse).
	Latency map[string]Percentiles `json:"latency,omitempty"`
	// CPUPerEvent is CPU µs (user + system) per measured event, by
	// process ("ingest", "processors", "sink", "broker", "clickhouse",
	// "loadgen", ...), over the measured window.
	CPUPerEvent map[string]float64 `json:"cpu_us_per_event,omitempty"`
	// KafkaRequests are the Kafka requests each process wrote per 1,000
	// measured events, as "process/kind" (ingest/Produce,
	// processors/EndTxn…), with the pseudo-kinds "produce batches" and
	// "produce records" for records per batch; for contenders whose
	// processes report them.
	KafkaRequests map[string]float64 `json:"kafka_requests_per_1000,omitempty"`
	// BrokerThreads is the broker's CPU µs per measured event by what its
	// threads do ("request handlers", "network", "JIT compilation"…),
	// from the JVM's thread dumps at the window's edges; for contenders
	// with a broker.
	BrokerThreads map[string]float64 `json:"broker_cpu_us_by_thread,omitempty"`
	// IdleCPU is each process's CPU µs per second while nothing was sent,
	// measured before the load (--idle-seconds): what it costs at rest.
	IdleCPU map[string]float64 `json:"idle_cpu_us_per_second,omitempty"`
	// IdleBrokerThreads is the broker's CPU µs per second at rest by what
	// its threads do, as BrokerThreads: what of its rest is the JIT
	// compilation of a broker just started.
	IdleBrokerThreads map[string]float64 `json:"idle_broker_cpu_us_per_second_by_thread,omitempty"`
	// IdleKafkaRequests are the Kafka requests each process wrote per
	// second at rest, keyed as KafkaRequests.
	IdleKafkaRequests map[string]float64 `json:"idle_kafka_requests_per_second,omitempty"`
	// PeakRSS is each process's peak resident memory (VmHWM), bytes.
	PeakRSS map[string]int64 `json:"peak_rss_bytes,omitempty"`
	// Figures are further measurements by name, e.g. "decided_per_second"
	// (decisions made in the measured window, over its length) or
	// "outcome_applied" (how many decisions had that outcome).
	Figures map[string]float64 `json:"figures,omitempty"`
	// Settings are the knobs this round ran with (connections, linger...).
	Settings map[string]string `json:"settings,omitempty"`
	// Verdict is the checker's; a round that did not pass is reported,
	// never ranked.
	Verdict Verdict `json:"verdict"`
}

// Percentiles of one latency, milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// percentilesJSON is Percentiles as JSON holds them.
type percentilesJSON struct {
	P50 *float64 `json:"p50"`
	P99 *float64 `json:"p99"`
	Max *float64 `json:"max"`
}

// MarshalJSON writes percentiles of no values (NaN) as null.
func (p Percentiles) MarshalJSON() ([]byte, error) {
	return json.Marshal(percentilesJSON{stats.NullForNaN(p.P50), stats.NullForNaN(p.P99), stats.NullForNaN(p.Max)})
}

// UnmarshalJSON reads null percentiles as NaN.
func (p *Percentiles) UnmarshalJSON(b []byte) error {
	var j percentilesJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = Percentiles{P50: stats.NaNForNull(j.P50), P99: stats.NaNForNull(j.P99), Max: stats.NaNForNull(j.Max)}
	return nil
}

// Verdict is the checker's finding on one run.
type Verdict struct {
	Passed bool `json:"passed"`
	// Lost counts deliveries acknowledged with a 2xx that are missing
	// downstream; Doubled, events decided (or rows written) more than
	// once; Mismatched, entities whose final state differs from the
	// model's.
	Lost       int `json:"lost"`
	Doubled    int `json:"doubled"`
	Mismatched int `json:"mismatched"`
	// Failed counts deliveries that never got a 2xx (after retries): they
	// are not losses, but a run with any is not a clean run.
	Failed int `json:"failed"`
	// Notes are the first findings, in words.
	Notes []string `json:"notes,omitempty"`
	// Error is set when the run or the check could not complete.
	Error string `json:"error,omitempty"`
}

// Pseudo-kinds of Round.KafkaRequests: the records produced and the
// batches they went in, for records per batch, and the bytes of those
// batches as sent (compressed) and before compression.
const (
	KindProduceBatches  = "produce batches"
	KindProduceRecords  = "produce records"
	KindProduceBytes    = "produce bytes"
	KindProduceRawBytes = "produce bytes uncompressed"
)

// IsPseudoKind reports whether kind is one of the pseudo-kinds, not a
// request.
func IsPseudoKind(kind string) bool {
	switch kind {
	case KindProduceBatches, KindProduceRecords, KindProduceBytes, KindProduceRawBytes:
		return true
	}
	return false
}
