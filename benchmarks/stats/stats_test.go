package stats

import (
	"encoding/json"
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for p, want := range map[float64]float64{50: 5, 99: 10, 100: 10, 0: 1, 10: 1, 11: 2} {
		if got := Percentile(v, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("percentile of nothing is not NaN")
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{3, math.NaN(), 1, 10, 2})
	if s != (Summary{Median: 2.5, Min: 1, Max: 10, N: 4}) {
		t.Errorf("got %+v", s)
	}
	if s := Summarize([]float64{4, 1, 9}); s.Median != 4 {
		t.Errorf("odd count: %+v", s)
	}
}

// A summary of nothing is written to JSON with null figures (JSON has no
// NaN) and read back as NaNs; a measured one is unchanged.
func TestSummaryJSONHoldsNotMeasuredAsNull(t *testing.T) {
	b, err := json.Marshal(Summarize(nil))
	if err != nil {
		t.Fatalf("a summary of nothing cannot be written: %v", err)
	}
	if string(b) != `{"median":null,"min":null,"max":null,"n":0}` {
		t.Errorf("written as %s", b)
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil || !math.IsNaN(back.Median) || !math.IsNaN(back.Min) || !math.IsNaN(back.Max) {
		t.Errorf("read back as %+v, %v; want NaNs", back, err)
	}
	measured := Summarize([]float64{1, 2, 3})
	if b, err = json.Marshal(measured); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &back); err != nil || back != measured {
		t.Errorf("%+v read back as %+v, %v", measured, back, err)
	}
}
