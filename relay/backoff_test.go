package relay_test

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/relay"
)

// Every wait lies between half and all of its step, the step doubles
// from min and never passes max, and a later retry never has a smaller
// step.
func TestBackoffStaysWithinItsStep(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		minWait := time.Duration(rapid.Int64Range(1, int64(time.Minute)).Draw(t, "min"))
		maxWait := minWait + time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "extra"))
		n := rapid.IntRange(1, 200).Draw(t, "retry")
		jitter := rapid.Float64Range(0, 0.999999).Draw(t, "jitter")
		// min·2^(n-1), capped at max, in floating point: no overflow.
		step := maxWait
		if f := float64(minWait) * math.Pow(2, float64(n-1)); f < float64(maxWait) {
			step = time.Duration(f)
		}
		got := relay.Backoff(minWait, maxWait, n, jitter)
		if got < step/2 || got > step {
			t.Fatalf("retry %d between %s and %s: waited %s, want within [%s, %s]", n, minWait, maxWait, got, step/2, step)
		}
		if next := relay.Backoff(minWait, maxWait, n+1, 0.999999); next < relay.Backoff(minWait, maxWait, n, 0.999999) {
			t.Fatalf("retry %d waits less than retry %d", n+1, n)
		}
	})
}
