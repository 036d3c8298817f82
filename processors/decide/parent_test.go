package decide

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

func orderEvent(id, typ string, receivedAtMs int64) Event {
	return Event{
		Fields:       envelope.Fields{Key: "ord", EventID: id, Type: typ},
		Body:         json.RawMessage(fmt.Sprintf(`{"event_id":%q,"event_type":%q}`, id, typ)),
		ReceivedAtMs: receivedAtMs,
	}
}

func TestJoinedDecisions(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	s.Parent.Buffer = 2
	s.Parent.TTL = time.Minute
	p := For(s)
	var e Entity
	steps := []struct {
		ev   Event
		want []decided
	}{
		{orderEvent("pay", "order.payment_received", 1_000), []decided{{"pay", "quarantined", ""}}},
		{orderEvent("pay", "order.payment_received", 1_500), []decided{{"pay", "duplicate", ""}}},
		{orderEvent("cap", "payment.captured", 2_000), []decided{{"cap", "quarantined", ""}}},
		{orderEvent("ship", "order.shipped", 3_000), []decided{{"ship", "rejected", record.ReasonBufferFull}}},
		// The parent applies, then every waiting child in arrival order.
		{orderEvent("ord", "order.created", 4_000), []decided{{"ord", "applied", ""}, {"pay", "reconciled", ""}, {"cap", "reconciled", ""}}},
		{orderEvent("ord", "order.created", 4_500), []decided{{"ord", "duplicate", ""}}},
		{orderEvent("ship2", "order.shipped", 5_000), []decided{{"ship2", "applied", ""}}},
	}
	for i, st := range steps {
		if got := summary(p.Decide(&e, st.ev)); !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%s): got %+v, want %+v", i, st.ev.EventID, got, st.want)
		}
	}
	if len(e.Quarantine) != 0 || e.DeadlineMs != 0 || e.Version != 4 || !json.Valid(e.State) {
		t.Fatalf("final entity: %+v", e)
	}
}

func TestJoinedExpiryRacingTheParent(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	s.Parent.TTL = time.Minute
	p := For(s)
	var e Entity
	p.Decide(&e, orderEvent("a", "order.payment_received", 0))
	p.Decide(&e, orderEvent("b", "order.shipped", 30_000))
	if e.DeadlineMs != 60_000 {
		t.Fatalf("deadline %d, want the earliest child's", e.DeadlineMs)
	}
	// The tick at 60s wins the race for a; b still waits.
	got := p.Expire(&e, 60_000)
	if s := summary(got); !slices.Equal(s, []decided{{"a", "expired", record.ReasonOrphanTTL}}) || deadLetter(got) != record.ReasonOrphanTTL {
		t.Fatalf("expire: %+v", s)
	}
	if e.DeadlineMs != 90_000 || len(e.Quarantine) != 1 {
		t.Fatalf("after expiry: deadline %d, %d waiting", e.DeadlineMs, len(e.Quarantine))
	}
	// The parent arriving right after reconciles only what still waits.
	if s := summary(p.Decide(&e, orderEvent("o", "order.created", 60_001))); !slices.Equal(s, []decided{{"o", "applied", ""}, {"b", "reconciled", ""}}) {
		t.Fatalf("parent: %+v", s)
	}
	// A retried a after its expiry is a duplicate, never applied late.
	if s := summary(p.Decide(&e, orderEvent("a", "order.payment_received", 61_000))); !slices.Equal(s, []decided{{"a", "duplicate", ""}}) {
		t.Fatalf("retry of an expired child: %+v", s)
	}
}

// A parent join with terminal states: a terminal child applied after its
// parent closes the order, and later children, parents and orphans are
// rejected with reason terminal; children waiting when a terminal parent
// reconciles are rejected too.
func TestJoinedTerminal(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	s.Terminal = config.Terminal{Field: "/event_type", Values: []string{"order.cancelled"}}
	s.Parent.Children = append(s.Parent.Children, "order.cancelled")
	s.KeyByType["order.cancelled"] = "/parent_id"
	p := For(s)
	ev := func(id, typ string) Event {
		field := "parent_id"
		if slices.Contains(s.Parent.Types, typ) {
			field = "order_id"
		}
		return read(t, p, fmt.Appendf(nil, `{"event_id":%q,"event_type":%q,%q:"o1","payload":{}}`, id, typ, field), 0)
	}
	var e Entity
	steps := []struct {
		ev   Event
		want []decided
	}{
		{ev("pay", "order.payment_received"), []decided{{"pay", "quarantined", ""}}},
		{ev("ord", "order.created"), []decided{{"ord", "applied", ""}, {"pay", "reconciled", ""}}},
		{ev("cancel", "order.cancelled"), []decided{{"cancel", "applied", ""}}},
		{ev("ship", "order.shipped"), []decided{{"ship", "rejected", record.ReasonTerminal}}},
		{ev("ord2", "order.created"), []decided{{"ord2", "rejected", record.ReasonTerminal}}},
		{ev("cancel", "order.cancelled"), []decided{{"cancel", "duplicate", ""}}},
	}
	for i, st := range steps {
		if got := summary(p.Decide(&e, st.ev)); !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%s): got %+v, want %+v", i, st.ev.EventID, got, st.want)
		}
	}

	// A cancellation before the order: it waits like any child, and when
	// the order comes it reconciles and closes the order, so the children
	// after it in the quarantine are rejected.
	var f Entity
	for _, st := range []struct {
		ev   Event
		want []decided
	}{
		{ev("c", "order.cancelled"), []decided{{"c", "quarantined", ""}}},
		{ev("p", "order.payment_received"), []decided{{"p", "quarantined", ""}}},
		{ev("o", "order.created"), []decided{{"o", "applied", ""}, {"c", "reconciled", ""}, {"p", "rejected", record.ReasonTerminal}}},
	} {
		if got := summary(p.Decide(&f, st.ev)); !slices.Equal(got, st.want) {
			t.Fatalf("%s: got %+v, want %+v", st.ev.EventID, got, st.want)
		}
	}
}
