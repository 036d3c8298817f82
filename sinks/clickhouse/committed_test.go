package clickhouse_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The processors write transactionally: the outcomes of an aborted
// transaction never reach events, those of committed ones all do, around
// it in the same partition.
func TestSinkWritesCommittedTransactionsOnly(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	b := newBrokerSink(t, ctx, "committed")
	txn, err := kafka.NewClient(kafka.Conn{Brokers: b.cfg.Kafka.Brokers}, kgo.TransactionalID(b.stream+"-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	transaction := func(commit bool, ids ...string) {
		t.Helper()
		var records []*kgo.Record
		for _, id := range ids {
			records = append(records, b.outcome(id))
		}
		testenv.Transact(t, ctx, txn, commit, records...)
	}
	transaction(true, "c1", "c2")
	transaction(false, "a1", "a2")
	b.run()
	transaction(true, "c3")
	transaction(false, "a3")
	b.produce(b.outcome("plain")) // a producer without transactions too
	b.waitForEvents(4)
	time.Sleep(4 * b.cfg.ClickHouse.BatchPeriod) // an aborted row would show by now
	if got, want := b.eventIDs(), []string{"c1", "c2", "c3", "plain"}; !slices.Equal(got, want) {
		t.Fatalf("events holds %v, want the committed %v", got, want)
	}
	// Read to the end of a partition ending in a transaction's marker, the
	// sink is not behind.
	transaction(true, "c4")
	b.waitForEvents(5)
	lagCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	testenv.WaitFor(t, lagCtx, "no consumer lag after the last transaction", func() bool {
		lag, ok := b.metricSum("driftguard_sink_consumer_lag")
		return ok && lag == 0
	})
}
