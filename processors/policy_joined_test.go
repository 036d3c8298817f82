package processors

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/envelope"
)

func orderEvent(id, typ string, receivedAtMs int64) Event {
	return Event{
		Fields:       envelope.Fields{Key: "ord", EventID: id, Type: typ},
		Body:         json.RawMessage(fmt.Sprintf(`{"event_id":%q,"event_type":%q}`, id, typ)),
		ReceivedAtMs: receivedAtMs,
	}
}

func TestJoinedDecisions(t *testing.T) {
	s := orders(t)
	s.Parent.Buffer = 2
	s.Parent.TTL = time.Minute
	p := policyFor(s)
	var e Entity
	steps := []struct {
		ev   Event
		want []decided
	}{
		{orderEvent("pay", "order.payment_received", 1_000), []decided{{"pay", "quarantined", ""}}},
		{orderEvent("pay", "order.payment_received", 1_500), []decided{{"pay", "duplicate", ""}}},
		{orderEvent("cap", "payment.captured", 2_000), []decided{{"cap", "quarantined", ""}}},
		{orderEvent("ship", "order.shipped", 3_000), []decided{{"ship", "rejected", ReasonBufferFull}}},
		// The parent applies, then every waiting child in arrival order.
		{orderEvent("ord", "order.created", 4_000), []decided{{"ord", "applied", ""}, {"pay", "reconciled", ""}, {"cap", "reconciled", ""}}},
		{orderEvent("ord", "order.created", 4_500), []decided{{"ord", "duplicate", ""}}},
		{orderEvent("ship2", "order.shipped", 5_000), []decided{{"ship2", "applied", ""}}},
	}
	for i, st := range steps {
		if got := summary(p.decide(&e, st.ev)); !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%s): got %+v, want %+v", i, st.ev.EventID, got, st.want)
		}
	}
	if len(e.Quarantine) != 0 || e.DeadlineMs != 0 || e.Version != 4 || !json.Valid(e.State) {
		t.Fatalf("final entity: %+v", e)
	}
}

func TestJoinedExpiryRacingTheParent(t *testing.T) {
	s := orders(t)
	s.Parent.TTL = time.Minute
	p := policyFor(s).(joined)
	var e Entity
	p.decide(&e, orderEvent("a", "order.payment_received", 0))
	p.decide(&e, orderEvent("b", "order.shipped", 30_000))
	if e.DeadlineMs != 60_000 {
		t.Fatalf("deadline %d, want the earliest child's", e.DeadlineMs)
	}
	// The tick at 60s wins the race for a; b still waits.
	got := p.expire(&e, 60_000)
	if s := summary(got); !slices.Equal(s, []decided{{"a", "expired", ReasonOrphanTTL}}) || deadLetter(got) != ReasonOrphanTTL {
		t.Fatalf("expire: %+v", s)
	}
	if e.DeadlineMs != 90_000 || len(e.Quarantine) != 1 {
		t.Fatalf("after expiry: deadline %d, %d waiting", e.DeadlineMs, len(e.Quarantine))
	}
	// The parent arriving right after reconciles only what still waits.
	if s := summary(p.decide(&e, orderEvent("o", "order.created", 60_001))); !slices.Equal(s, []decided{{"o", "applied", ""}, {"b", "reconciled", ""}}) {
		t.Fatalf("parent: %+v", s)
	}
	// A retried a after its expiry is a duplicate, never applied late.
	if s := summary(p.decide(&e, orderEvent("a", "order.payment_received", 61_000))); !slices.Equal(s, []decided{{"a", "duplicate", ""}}) {
		t.Fatalf("retry of an expired child: %+v", s)
	}
}

// Random interleavings of parents, children, duplicates and clock advances:
// every child ends exactly once as applied, reconciled or expired, none is
// lost or applied twice, and the quarantine never exceeds its bound.
func TestJoinedEveryChildEndsExactlyOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := orders(t)
		s.Parent.TTL = time.Duration(rapid.IntRange(1, 50).Draw(t, "ttl s")) * time.Second
		s.Parent.Buffer = rapid.IntRange(1, 8).Draw(t, "buffer")
		p := policyFor(s).(joined)
		var e Entity
		now := int64(0)
		final := map[string]string{}
		record := func(effects Effects) {
			for _, d := range effects.Decisions {
				switch d.Outcome {
				case envelope.OutcomeApplied, envelope.OutcomeReconciled, envelope.OutcomeExpired:
					if prev, done := final[d.Event.EventID]; done {
						t.Fatalf("%s ended twice: %s then %s", d.Event.EventID, prev, d.Outcome)
					}
					final[d.Event.EventID] = d.Outcome
				case envelope.OutcomeRejected:
					final[d.Event.EventID] = d.Outcome + "/" + d.Reason
				}
			}
			if len(e.Quarantine) > s.Parent.Buffer {
				t.Fatalf("%d children quarantined, bound %d", len(e.Quarantine), s.Parent.Buffer)
			}
		}
		children := map[string]bool{}
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for i := range steps {
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0:
				record(p.decide(&e, orderEvent(fmt.Sprintf("parent-%d", i), "order.created", now)))
			case 1, 2:
				now += rapid.Int64Range(0, 20_000).Draw(t, "advance ms")
				if e.DeadlineMs != 0 && e.DeadlineMs <= now {
					record(p.expire(&e, now))
				}
			case 3:
				if len(children) > 0 {
					ids := make([]string, 0, len(children))
					for id := range children {
						ids = append(ids, id)
					}
					slices.Sort(ids)
					id := rapid.SampledFrom(ids).Draw(t, "duplicate")
					record(p.decide(&e, orderEvent(id, "order.payment_received", now)))
				}
			default:
				id := fmt.Sprintf("child-%d", i)
				children[id] = true
				record(p.decide(&e, orderEvent(id, "order.payment_received", now)))
			}
		}
		// Drain the clock: every child still waiting expires.
		now += s.Parent.TTL.Milliseconds()
		if e.DeadlineMs != 0 {
			record(p.expire(&e, now))
		}
		if len(e.Quarantine) != 0 {
			t.Fatalf("%d children left after every TTL passed", len(e.Quarantine))
		}
		for id := range children {
			if _, ok := final[id]; !ok {
				t.Fatalf("child %s was lost: no final outcome", id)
			}
		}
	})
}

// Through goka, interleaving three orders: a child before its parent, a
// retried child, a retried parent, a child after its parent, an overflowing
// order, orphans expiring, and a parent that loses the race to its child's
// expiry; the DLQ records, the gauge and the three seed metrics.
func TestProcessorLostAndFoundThroughGoka(t *testing.T) {
	s := orders(t)
	s.Parent.TTL = time.Minute
	s.Parent.Buffer = 2
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	// The timer clock stands still before the TTL, so ticks only count.
	clock := func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	tt, proc, names := startTester(t, s, Options{Metrics: metrics, Now: clock})
	ctx := t.Context()
	outQ, dlqQ := tt.NewQueueTracker(names.Outcomes), tt.NewQueueTracker(names.DLQ)
	at := goka.Headers{envelope.HeaderReceivedAt: []byte("1700000000000")}
	child := func(id, parent string) {
		tt.Consume(names.In, parent, fmt.Appendf(nil, `{"event_id":%q,"event_type":"order.payment_received","parent_id":%q,"payload":{}}`, id, parent), tester.WithHeaders(at))
	}
	parent := func(id, order string) {
		tt.Consume(names.In, order, fmt.Appendf(nil, `{"event_id":%q,"event_type":"order.created","order_id":%q,"payload":{}}`, id, order), tester.WithHeaders(at))
	}
	child("p1", "o1")  // before its parent
	child("p2", "o2")  // its order never comes
	child("p1", "o1")  // retried while waiting
	child("q1", "o3")  // o3 overflows its bound of 2
	parent("c1", "o1") // reconciles p1
	child("q2", "o3")
	parent("c1", "o1") // retried parent
	child("q3", "o3")  // over the bound
	child("s1", "o1")  // after its parent

	// A tick counts the children still waiting (p2, q1, q2) for the gauge.
	timersCtx, stopTimers := context.WithCancel(ctx)
	timersDone := make(chan error, 1)
	go func() { timersDone <- proc.RunTimers(timersCtx, 10*time.Millisecond, nil) }()
	for testutil.ToFloat64(metrics.quarantined.WithLabelValues(s.Name)) != 3 {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal("the quarantine gauge never showed the waiting children")
		}
	}
	stopTimers()
	<-timersDone
	// Past the TTL the orphans expire; o2's order then arrives too late.
	if err := proc.VisitAll(ctx, tickVisitor, int64(1_700_000_000_000+time.Minute.Milliseconds())); err != nil {
		t.Fatal(err)
	}
	parent("c2", "o2")
	child("p2", "o2") // a retry of the expired child

	var got []string
	for _, o := range outcomes(t, outQ) {
		got = append(got, o.Key+"/"+o.EventID+":"+o.Outcome+map[bool]string{true: "/" + o.Reason}[o.Reason != ""])
	}
	want := []string{
		"o1/p1:quarantined", "o2/p2:quarantined", "o1/p1:duplicate", "o3/q1:quarantined",
		"o1/c1:applied", "o1/p1:reconciled", "o3/q2:quarantined", "o1/c1:duplicate",
		"o3/q3:rejected/buffer_full", "o1/s1:applied",
		"o2/p2:expired/orphan_ttl", "o3/q1:expired/orphan_ttl", "o3/q2:expired/orphan_ttl",
		"o2/c2:applied", "o2/p2:duplicate",
	}
	slices.Sort(got[10:13]) // the visit order of keys is the storage's
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes\n%v\nwant\n%v", got, want)
	}
	var reasons []string
	for {
		_, raw, ok := dlqQ.NextRaw()
		if !ok {
			break
		}
		var dl envelope.DeadLetter
		if err := json.Unmarshal(raw, &dl); err != nil || dl.Topic != names.In || dl.EventID == "" {
			t.Fatalf("DLQ record %s", raw)
		}
		reasons = append(reasons, dl.Key+"/"+dl.EventID+":"+dl.Reason)
	}
	slices.Sort(reasons)
	if want := []string{"o2/p2:orphan_ttl", "o3/q1:orphan_ttl", "o3/q2:orphan_ttl", "o3/q3:buffer_full"}; !slices.Equal(reasons, want) {
		t.Fatalf("DLQ %v, want %v", reasons, want)
	}
	for name, want := range map[string]float64{"stored": 4, "reconciled": 1, "expired": 3} {
		c := map[string]*prometheus.CounterVec{"stored": metrics.stored, "reconciled": metrics.reconciled, "expired": metrics.expired}[name]
		if got := testutil.ToFloat64(c.WithLabelValues(s.Name)); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
