package decide

import (
	"slices"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A redriven dead letter is decided again although its event id is
// remembered from its first delivery, and a second redrive of the same
// dead letter is a duplicate; a redrive of another dead letter of the
// same event is not.
func TestRedrivenEventIsDecidedOnceMore(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	s.Parent.TTL = time.Minute
	p := For(s)
	var e Entity
	redriven := func(of string, atMs int64) Event {
		ev := orderEvent("pay", "order.payment_received", atMs)
		ev.RedriveOf = of
		return ev
	}
	p.Decide(&e, orderEvent("pay", "order.payment_received", 0))
	if got := summary(p.Expire(&e, 60_000)); !slices.Equal(got, []decided{{"pay", "expired", record.ReasonOrphanTTL}}) {
		t.Fatalf("expiry: %+v", got)
	}
	steps := []struct {
		ev   Event
		want []decided
	}{
		{orderEvent("pay", "order.payment_received", 61_000), []decided{{"pay", "duplicate", ""}}},
		{redriven("orders.dlq/0/7", 62_000), []decided{{"pay", "quarantined", ""}}},
		{redriven("orders.dlq/0/7", 63_000), []decided{{"pay", "duplicate", ""}}},
		{orderEvent("ord", "order.created", 64_000), []decided{{"ord", "applied", ""}, {"pay", "reconciled", ""}}},
		{redriven("orders.dlq/0/7", 65_000), []decided{{"pay", "duplicate", ""}}},
		{redriven("orders.dlq/3/1", 66_000), []decided{{"pay", "applied", ""}}},
	}
	for i, st := range steps {
		if got := summary(p.Decide(&e, st.ev)); !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%s of %q): got %+v, want %+v", i, st.ev.EventID, st.ev.RedriveOf, got, st.want)
		}
	}
}
