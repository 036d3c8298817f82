package realtime

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
)

// The gate against a model that remembers every signal let through: of
// any history of signals of a few keys, a signal goes through exactly
// when no signal of its key went through within the interval before it,
// and the gate remembers no key whose last signal is two intervals old.
func TestGateLetsOneSignalThroughPerInterval(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		every := time.Duration(rapid.Int64Range(1, 1000).Draw(t, "every"))
		g := newGate(every)
		var at time.Duration
		g.clock = func() time.Duration { return at }
		passed := map[string]time.Duration{} // key → last signal let through
		for i, n := 0, rapid.IntRange(1, 200).Draw(t, "signals"); i < n; i++ {
			at += time.Duration(rapid.Int64Range(0, int64(2*every)).Draw(t, "step"))
			key := fmt.Sprint(rapid.IntRange(0, 3).Draw(t, "key"))
			last, held := passed[key]
			want := !held || at-last >= every
			got, ago := g.pass(key)
			if got != want || !got && ago != at-last {
				t.Fatalf("signal of %s at %d, last through at %d (held %v), every %d: through %v %d ago, want %v", key, at, last, held, every, got, ago, want)
			}
			if got {
				passed[key] = at
			}
			for k, t0 := range g.last {
				if at-t0 >= 2*every {
					t.Fatalf("the gate still holds %s from %d at %d, every %d", k, t0, at, every)
				}
			}
		}
	})
}

// A client that does not take its typing events loses the ones over its
// queue, counted; the signal's fan-out never blocks on it, and the client
// is not reset for it.
func TestTypingForAFullClientIsDropped(t *testing.T) {
	b := &Bridge{typingMetrics: newTypingMetrics(nil), cfg: config.Bridge{TypingRate: 1, TypingTTL: time.Second}}
	s := &config.Stream{Name: "chat", Policy: config.PolicyAssign, Assign: config.Assign{Typing: config.AssignTyping{Type: "typing", User: "/user_id"}}}
	ts := b.newTyping(s, "chat.ephemeral")
	st := &stream{cfg: s, typing: ts}
	slow := &client{b: b, q: &request{stream: st, user: &claims{}}, key: "room"}
	slow.q.user.Subject = "bob"
	defer b.followTyping(slow)()
	a := &access{members: []string{"alice", "bob"}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range typingQueue + 5 {
			ts.show(&typingSignal{key: "room", user: "alice", expiresAtMs: int64(i)}, a, func(reason string) {
				b.typingMetrics.dropped.WithLabelValues("chat", reason).Inc()
			})
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("showing typing blocked on a client that takes none")
	}
	if n := len(slow.typing); n != typingQueue {
		t.Errorf("the client has %d typing events queued, want %d", n, typingQueue)
	}
	if got := testutil.ToFloat64(b.typingMetrics.dropped.WithLabelValues("chat", "queue_full")); got != 5 {
		t.Errorf("dropped %v for a full queue, want 5", got)
	}
}

// The typing producer waits for the leader only, without idempotence:
// a typing signal never waits behind the replication of messages.
func TestTypingProducerAcksAtTheLeader(t *testing.T) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, TypingProducerOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if v := cl.OptValue(kgo.RequiredAcks); v != kgo.LeaderAck() {
		t.Errorf("acks %v, want the leader's", v)
	}
	if v := cl.OptValue(kgo.DisableIdempotentWrite); v != true {
		t.Errorf("idempotent writes disabled: %v, want true", v)
	}
	if v := cl.OptValue(kgo.RecordDeliveryTimeout); v != typingProduceWait {
		t.Errorf("delivery timeout %v, want %s", v, typingProduceWait)
	}
}
