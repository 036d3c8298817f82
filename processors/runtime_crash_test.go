package processors

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The transactional runtime dies while the dead letter of its first input
// cannot be acknowledged, after deciding the inputs after it: nothing of
// that transaction is visible, and the instance that takes over (with the
// same transactional id) decides every input once, the dead letter
// included.
func TestRuntimeDiesWithWritesInFlightAndLosesNothing(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "presence", nil)
	brokers := cluster.ListenAddrs()
	for _, r := range []*kgo.Record{
		{Topic: names.In, Key: []byte("alice"), Value: []byte("not json")},
		bob(names.In, 1),
		bob(names.In, 2),
	} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var hold atomic.Bool
	hold.Store(true)
	holdProduceTo(t, ctx, cluster, cl, names.DLQ, &hold)

	network, _ := startFaultyRuntime(t, ctx, brokers, s, "presence-0", 0)
	// Its transaction cannot commit while the dead letter is refused;
	// bob's outcomes are written, uncommitted.
	testenv.WaitFor(t, ctx, "bob's outcomes written, uncommitted", func() bool {
		return len(readTopic(t, ctx, cl, names.Outcomes, false)) >= 2
	})
	if n := len(readTopic(t, ctx, cl, names.Outcomes, true)); n != 0 {
		t.Fatalf("%d outcomes committed while the dead letter of an earlier input is unacknowledged", n)
	}
	// It dies: its connections are cut under the pending commit and it
	// never reaches the broker again, as a killed process would not. (Its
	// goroutines wait out their timeouts in the background.)
	network.sever()

	hold.Store(false)
	startRuntime(t, ctx, brokers, s, RuntimeOptions{TransactionalID: "presence-0"})
	waitInputsCommitted(t, ctx, cl, s, 3)
	if want, got := []string{"b1:applied", "b2:applied"}, committedOutcomeIDs(t, ctx, cl, names.Outcomes); !slices.Equal(got, want) {
		t.Errorf("committed outcomes %v, want %v", got, want)
	}
	if n := len(readTopic(t, ctx, cl, names.DLQ, true)); n != 1 {
		t.Errorf("%d committed dead letters, want the one of input 0", n)
	}
}

// A catch-up: a thousand inputs of one key decided in one transaction,
// then the process dies before it commits. None is lost and none is
// decided twice: the instance that takes over decides them all again.
func TestRuntimeCatchUpOfOneKeyDiesAndLosesNothing(t *testing.T) {
	const inputs = 1000
	brokers, ctx, s, names, cl := onePartitionStream(t, "presence")
	for i := range inputs {
		cl.Produce(ctx, &kgo.Record{Topic: names.In, Key: []byte("alice"),
			Value: testenv.Presence{EventID: fmt.Sprint("e", i), User: "alice", Version: int64(i + 1)}.Body()}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A transaction long enough to hold the whole catch-up.
	network, _ := startFaultyRuntime(t, ctx, brokers, s, "catch-up", time.Minute)
	testenv.WaitFor(t, ctx, "the catch-up decided, uncommitted", func() bool {
		return len(readTopic(t, ctx, cl, names.Outcomes, false)) >= inputs
	})
	network.sever()

	startRuntime(t, ctx, brokers, s, RuntimeOptions{TransactionalID: "catch-up"})
	var applied map[string]int
	testenv.WaitFor(t, ctx, "every input committed", func() bool {
		applied = map[string]int{}
		for _, o := range committedOutcomes(t, ctx, cl, names.Outcomes) {
			if o.Outcome == record.Applied {
				applied[o.EventID]++
			}
		}
		return len(applied) == inputs
	})
	for id, n := range applied {
		if n != 1 {
			t.Errorf("%s applied %d times", id, n)
		}
	}
}

// The broker refuses to end a transaction (as a transaction coordinator
// that moved while a broker stalled can, with INVALID_TXN_STATE, failing
// the producer id for good): the runtime begins a new Kafka session, which
// aborts what the refused transaction wrote, and carries on; every input
// is decided once.
func TestRuntimeBeginsANewSessionWhenATransactionCannotEnd(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "presence", nil)
	refuse, refused := refuseACommit(cluster, kerr.InvalidTxnState)
	// Stopping it at the end must return no error: it rode out the
	// refused transaction.
	metrics := startRuntime(t, ctx, cluster.ListenAddrs(), s, RuntimeOptions{TransactionalID: "presence-0"})
	outcomes := func() []string { return committedOutcomeIDs(t, ctx, cl, names.Outcomes) }
	if err := cl.ProduceSync(ctx, bob(names.In, 1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "the first decision committed", func() bool { return len(outcomes()) == 1 })
	refuse()
	if err := cl.ProduceSync(ctx, bob(names.In, 2), bob(names.In, 3)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitInputsCommitted(t, ctx, cl, s, 3)
	if !refused.Load() {
		t.Fatal("no end of a transaction was refused: the test proves nothing")
	}
	if want, got := []string{"b1:applied", "b2:applied", "b3:applied"}, outcomes(); !slices.Equal(got, want) {
		t.Errorf("committed outcomes %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(metrics.sessionRestarts.WithLabelValues(s.Name)); n != 1 {
		t.Errorf("driftguard_processor_session_restarts_total = %v, want 1", n)
	}
	// The transaction that did not end was decided again: its outcomes
	// were written twice, once aborted. Its decisions are counted once,
	// when they committed, and so is their latency.
	if written := len(readTopic(t, ctx, cl, names.Outcomes, false)); written <= 3 {
		t.Errorf("%d outcomes written: the refused transaction's were not decided again", written)
	}
	if made := testutil.ToFloat64(metrics.decisions.WithLabelValues(s.Name, string(record.Applied))); made != 3 {
		t.Errorf("%v decisions counted, want one per committed decision, 3", made)
	}
	if n := histogramCount(t, metrics.decisionLatency.WithLabelValues(s.Name).(prometheus.Histogram)); n != 3 {
		t.Errorf("%d decision latencies observed, want one per committed decision, 3", n)
	}
}

// refuseACommit makes the fake broker answer the first commit of a
// transaction after refuse is called with code, leaving the transaction
// open; refused reports whether it did.
func refuseACommit(cluster *kfake.Cluster, code *kerr.Error) (refuse func(), refused *atomic.Bool) {
	var armed atomic.Bool
	refused = new(atomic.Bool)
	cluster.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		req := kreq.(*kmsg.EndTxnRequest)
		if !req.Commit || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		refused.Store(true)
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = code.Code
		return resp, nil, true
	})
	return func() { armed.Store(true) }, refused
}

// What no new Kafka session mends stops the runtime with its error: here
// the cluster refuses the instance's transactional id.
func TestRuntimeStopsWhenTheClusterRefusesItsTransactionalID(t *testing.T) {
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "presence", nil)
	refuse, refused := refuseACommit(cluster, kerr.TransactionalIDAuthorizationFailed)
	r, metrics := newRuntime(t, cluster.ListenAddrs(), s, RuntimeOptions{TransactionalID: "presence-0"})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	refuse()
	if err := cl.ProduceSync(ctx, bob(names.In, 1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
			t.Errorf("Run returned %v, want TRANSACTIONAL_ID_AUTHORIZATION_FAILED", err)
		}
	case <-ctx.Done():
		t.Fatal("the runtime still runs after the cluster refused its transactional id")
	}
	if !refused.Load() {
		t.Error("no commit was refused")
	}
	if n := testutil.ToFloat64(metrics.sessionRestarts.WithLabelValues(s.Name)); n != 0 {
		t.Errorf("driftguard_processor_session_restarts_total = %v, want 0", n)
	}
}
