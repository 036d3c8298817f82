package realtime

import (
	"math/rand/v2"
	"testing"
)

// The index gives back, from any sequence, the offset of each sequence's
// first record, with the sequences it never saw, or skipped, not held;
// repeats change nothing; trimming at a log start drops only whole blocks
// below it; and a conversation sending once in fewer than 128 records of
// its partition costs under two bytes a message.
func TestIndexKeepsEachSendsFirstOffset(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := newIndex(3, 1)
	want := map[int64]int64{} // seq → offset; absent: not held
	offset, seq := int64(rng.IntN(1000)), int64(0)
	for range 5000 {
		switch r := rng.IntN(100); {
		case r < 2 && x.top() > 0: // a repeat, later in the log
			offset++
			x.add(1+rng.Int64N(x.top()), offset)
		case r < 4: // a run the bridge never saw
			seq += 1 + rng.Int64N(100)
		default:
			seq++
			// Mostly near, now and then far apart in the partition.
			step := int64(1 + rng.IntN(100))
			if rng.IntN(50) == 0 {
				step = 1 << (8 + rng.IntN(33))
			}
			offset += step
			x.add(seq, offset)
			want[seq] = offset
		}
	}
	if x.top() != seq {
		t.Fatalf("top %d, want %d", x.top(), seq)
	}
	check := func(from int64) {
		t.Helper()
		e := x.from(from)
		for s := max(from, x.first); s <= x.top(); s++ {
			got, off, held, ok := e.next()
			if !ok || got != s {
				t.Fatalf("from %d: sequence %d, ok %v; want %d", from, got, ok, s)
			}
			if w, in := want[s]; held != in || held && off != w {
				t.Fatalf("from %d: sequence %d at %d (held %v), want %d (held %v)", from, s, off, held, w, in)
			}
		}
		if _, _, _, ok := e.next(); ok {
			t.Fatalf("from %d: an entry past top", from)
		}
	}
	for range 50 {
		check(x.first + rng.Int64N(x.n))
	}
	check(0)

	// The log now starts in the middle: whole blocks below it go.
	mid := want[x.first+x.n/2]
	for mid == 0 {
		mid = want[x.first+rng.Int64N(x.n)]
	}
	first := x.first
	x.trim(mid)
	if x.first == first || (x.first-first)%blockSeqs != 0 {
		t.Fatalf("trimmed from %d to %d", first, x.first)
	}
	if w, in := want[x.first+blockSeqs]; in && w < mid {
		t.Fatalf("sequence %d at %d, below the log start %d, kept a block later than needed", x.first+blockSeqs, w, mid)
	}
	for s := first; s < x.first; s++ {
		if w, in := want[s]; in && w >= mid {
			t.Fatalf("sequence %d at %d, above the log start %d, trimmed", s, w, mid)
		}
	}
	check(x.first)
	x.trim(offset + 1)
	if x.n != 0 || x.first != seq+1 {
		t.Fatalf("all gone: first %d n %d", x.first, x.n)
	}

	// Memory: one send in every 100 records.
	x = newIndex(0, 1)
	for s := int64(1); s <= 100_000; s++ {
		x.add(s, s*100)
	}
	bytes := 0
	for _, b := range x.blocks {
		bytes += cap(b.data) + 32 // the data, the base and the slice
	}
	if per := float64(bytes) / 100_000; per >= 2 {
		t.Errorf("%.2f bytes a message", per)
	}
}
