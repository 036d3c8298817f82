package eos

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The marks owed against a model: a partition is taken once markQuiet
// has passed since the last transaction that wrote it, never before, and
// once; next is the earliest time another will be due; a stop takes
// everything owed.
func TestMarksWaitForAQuietPartition(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := newViewMarks("g", []string{"t"}, nil, time.Second, nil)
		start := time.Unix(1_700_000_000, 0)
		now := start
		wrote := map[int32]time.Time{} // the model: the last write of each partition owed
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 1500).Draw(rt, "ms")) * time.Millisecond)
			switch rapid.IntRange(0, 2).Draw(rt, "action") {
			case 0, 1:
				p := int32(rapid.IntRange(0, 5).Draw(rt, "partition"))
				m.owed[p], wrote[p] = now, now
			case 2:
				all := rapid.IntRange(0, 9).Draw(rt, "stop") == 0
				ps, next := m.take(now, all)
				var want []int32
				var wantNext time.Time
				for p, at := range wrote {
					if due := at.Add(markQuiet); all || !due.After(now) {
						want = append(want, p)
						delete(wrote, p)
					} else if wantNext.IsZero() || due.Before(wantNext) {
						wantNext = due
					}
				}
				slices.Sort(want)
				if !slices.Equal(ps, want) || !next.Equal(wantNext) {
					rt.Fatalf("at %s (stop %v): took %v, next %v; want %v, next %v", now.Sub(start), all, ps, next, want, wantNext)
				}
			}
		}
	})
}
