package model

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/driftguard/driftguard/benchmarks/stats"
)

// A round that measured no row latency (percentiles of no values, NaN) is
// still written, with nulls, and read back as NaNs.
func TestRoundWithALatencyNotMeasuredIsWritten(t *testing.T) {
	r := Round{Contender: "driftguard orders", Latency: map[string]Percentiles{
		"ack": {P50: 1, P99: 2, Max: 3},
		"row": {P50: stats.Percentile(nil, 50), P99: stats.Percentile(nil, 99), Max: stats.Percentile(nil, 100)},
	}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("the round cannot be written: %v", err)
	}
	var back Round
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Latency["ack"]; got != r.Latency["ack"] {
		t.Errorf("ack read back as %+v", got)
	}
	if row := back.Latency["row"]; !math.IsNaN(row.P50) || !math.IsNaN(row.P99) || !math.IsNaN(row.Max) {
		t.Errorf("row read back as %+v, want NaNs", row)
	}
}
