package ingest

import (
	"context"
	"testing"
	"time"
)

// A shared produce deadline is never later than a request's own would be,
// and at most a step earlier; requests within a step share one, and a
// request a step later gets another.
func TestSharedDeadlinesAreNeverLate(t *testing.T) {
	const timeout = 5 * time.Second
	d := newDeadlines(timeout)
	next := func() context.Context {
		ctx, start := d.next()
		deadline, ok := ctx.Deadline()
		if !ok {
			t.Fatal("a produce context without a deadline")
		}
		if late := deadline.Sub(start.Add(timeout)); late > 0 {
			t.Fatalf("deadline %s after the request's own", late)
		}
		if early := start.Add(timeout).Sub(deadline); early > d.step {
			t.Fatalf("deadline %s before the request's own, more than the step %s", early, d.step)
		}
		return ctx
	}
	shared := false
	for range 3 { // a step may end between two calls, but not three times
		if next() == next() {
			shared = true
			break
		}
	}
	if !shared {
		t.Error("back-to-back requests do not share a deadline")
	}
	first := next()
	time.Sleep(2 * d.step)
	if next() == first {
		t.Error("a request two steps later shares the deadline")
	}
}

// A short timeout still expires: the context ends, so the edge answers 503.
func TestSharedDeadlineExpires(t *testing.T) {
	d := newDeadlines(20 * time.Millisecond)
	ctx, _ := d.next()
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
		t.Fatal("the produce context outlived its deadline")
	}
}
