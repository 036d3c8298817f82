// Package stats holds the few figures the benchmarks report: percentiles
// of latencies, and medians with ranges over interleaved rounds.
package stats

import (
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
