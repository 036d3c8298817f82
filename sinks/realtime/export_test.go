package realtime

import (
	"testing"
	"time"
)

// SetSweepBounds sets how many batches a catch-up sweep keeps ahead of its
// slowest client and how long it waits for one, until the test ends.
func SetSweepBounds(t *testing.T, ahead int, wait time.Duration) {
	wasAhead, wasWait := sweepAhead, sweepWait
	sweepAhead, sweepWait = ahead, wait
	t.Cleanup(func() { sweepAhead, sweepWait = wasAhead, wasWait })
}
