package kafka_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/testenv"
)

// ReadCommitted reads each partition to its last stable offset and stops
// there: committed records only, in order, an aborted transaction's and a
// partition emptied by retention passed over without waiting.
func TestReadCommittedStopsAtTheEnd(t *testing.T) {
	ctx := testenv.Context(t, 30*time.Second)
	conn := kafka.Conn{Brokers: testenv.Kafka(t)}
	topic := testenv.UniqueName("scan")
	cl, err := kgo.NewClient(kgo.SeedBrokers(conn.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	at := func(p int32, v string) *kgo.Record { return &kgo.Record{Partition: p, Value: []byte(v)} }
	cl2, err := kgo.NewClient(kgo.SeedBrokers(conn.Brokers...), kgo.TransactionalID(topic), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	testenv.Transact(t, ctx, cl2, true, at(0, "a"), at(0, "b"), at(2, "gone"))
	testenv.Transact(t, ctx, cl2, false, at(0, "aborted"), at(1, "aborted"))
	testenv.Transact(t, ctx, cl2, true, at(0, "c"))
	// Partition 2 loses its records to retention: it starts at its end.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	del := kadm.Offsets{}
	end2, _ := ends.Lookup(topic, 2)
	del.Add(kadm.Offset{Topic: topic, Partition: 2, At: end2.Offset})
	if _, err := adm.DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = kafka.ReadCommitted(ctx, conn, topic, nil, func(r *kgo.Record) error {
		got = append(got, string(r.Value))
		return nil
	})
	if err != nil || !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("read %q, %v; want a, b, c", got, err)
	}
	p, err := kafka.PartitionOf(ctx, conn, topic, "some key")
	if err != nil || p < 0 || p > 2 {
		t.Fatalf("partition %d, %v", p, err)
	}
}
