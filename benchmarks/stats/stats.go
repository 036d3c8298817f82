// Package stats holds the few figures the benchmarks report: percentiles
// of latencies, and medians with ranges over interleaved rounds.
package stats

import (
	"encoding/json"
	"math"
	"slices"
)

// Percentile returns the p-th percentile (0–100) of values by the
// nearest-rank method, NaN when there are none. values is sorted in place.
func Percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	if !slices.IsSorted(values) {
		slices.Sort(values)
	}
	rank := int(math.Ceil(p / 100 * float64(len(values))))
	return values[min(max(rank, 1), len(values))-1]
}

// Summary is the median of a figure over rounds and its range.
type Summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// Summarize returns the median (the mean of the middle two for an even
// count) and the range of values, ignoring NaNs.
func Summarize(values []float64) Summary {
	v := slices.DeleteFunc(slices.Clone(values), math.IsNaN)
	if len(v) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Summary{Median: m, Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// A figure that was not measured is NaN here (Percentile of no values,
// Summarize of none) and null in JSON, which has no NaN: encoding/json
// refuses to write one, and a results file with a round that measured
// nothing of one latency would not be written at all.

// NullForNaN is v, or nil for NaN.
func NullForNaN(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

// NaNForNull is *p, or NaN for nil.
func NaNForNull(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// summaryJSON is Summary as JSON holds it.
type summaryJSON struct {
	Median *float64 `json:"median"`
	Min    *float64 `json:"min"`
	Max    *float64 `json:"max"`
	N      int      `json:"n"`
}

// MarshalJSON writes NaN figures as null.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(summaryJSON{NullForNaN(s.Median), NullForNaN(s.Min), NullForNaN(s.Max), s.N})
}

// UnmarshalJSON reads null figures as NaN.
func (s *Summary) UnmarshalJSON(b []byte) error {
	var j summaryJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Summary{Median: NaNForNull(j.Median), Min: NaNForNull(j.Min), Max: NaNForNull(j.Max), N: j.N}
	return nil
}
