package record

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

func ExampleInputDecisionID() {
	fmt.Println(InputDecisionID("presence", 3, 1234, 0))
	fmt.Println(TimerDecisionID("orders", "o-1/eu", 1_700_000_000_000, ReasonOrphanTTL, 1))
	// Output:
	// presence/3/1234/0
	// orders/t/1700000000000/orphan_ttl/1/o-1/eu
}

// Two decisions share an id exactly when they are the same decision:
// the same input position and index, or the same timer, key included
// (any key, slashes and all), and no timer id is an input id.
func TestDecisionIDsAreDistinct(t *testing.T) {
	name := rapid.StringMatching(`[a-z][a-z0-9_.-]{0,8}`)
	type input struct {
		stream    string
		partition int32
		offset    int64
		index     int
	}
	type timer struct {
		stream, key string
		deadline    int64
		kind        Reason
		index       int
	}
	inputs := rapid.Custom(func(t *rapid.T) input {
		return input{name.Draw(t, "stream"), rapid.Int32Range(0, 3).Draw(t, "partition"),
			rapid.Int64Range(0, 3).Draw(t, "offset"), rapid.IntRange(0, 3).Draw(t, "index")}
	})
	timers := rapid.Custom(func(t *rapid.T) timer {
		return timer{name.Draw(t, "stream"), rapid.StringMatching(`[a-z/0-9]{0,6}`).Draw(t, "key"),
			rapid.Int64Range(0, 3).Draw(t, "deadline"),
			rapid.SampledFrom([]Reason{ReasonGapTimeout, ReasonOrphanTTL, Reason(Expired)}).Draw(t, "kind"),
			rapid.IntRange(0, 3).Draw(t, "index")}
	})
	rapid.Check(t, func(t *rapid.T) {
		a, b := inputs.Draw(t, "a"), inputs.Draw(t, "b")
		idA, idB := InputDecisionID(a.stream, a.partition, a.offset, a.index), InputDecisionID(b.stream, b.partition, b.offset, b.index)
		if (idA == idB) != (a == b) {
			t.Fatalf("inputs %+v and %+v: ids %q and %q", a, b, idA, idB)
		}
		x, y := timers.Draw(t, "x"), timers.Draw(t, "y")
		idX, idY := TimerDecisionID(x.stream, x.key, x.deadline, x.kind, x.index), TimerDecisionID(y.stream, y.key, y.deadline, y.kind, y.index)
		if (idX == idY) != (x == y) {
			t.Fatalf("timers %+v and %+v: ids %q and %q", x, y, idX, idY)
		}
		if idA == idX {
			t.Fatalf("input %+v and timer %+v share id %q", a, x, idA)
		}
	})
}
