package processors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/partition"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
)

func TestProcessorsRefuseTopicsThatAreNotCopartitioned(t *testing.T) {
	testenv.OnBothBrokers(t, testRefuseNotCopartitioned)
}

func testRefuseNotCopartitioned(t *testing.T, brokers []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := testenv.Shipped(t, "presence")
	s.Name = testenv.UniqueName("copart")
	s.Limits.Partitions = 4
	cfg := testenv.OnlyStream(t, s)
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Someone created the state topic by hand with another partition count.
	stateTopic := naming.Prefixes{}.For(s.Name).State
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, stateTopic); err != nil {
		t.Fatal(err)
	}
	err = NewService(ServiceOptions{Config: cfg, Brokers: brokers, Logger: testenv.Logger(t), InMemoryTables: true}).Run(ctx)
	if !errors.Is(err, topics.ErrMismatch) || !strings.Contains(err.Error(), stateTopic) || !strings.Contains(err.Error(), "limits.partitions") {
		t.Fatalf("want a co-partitioning error naming %s and the config path, got %v", stateTopic, err)
	}
}

// The runtime's session writes with acks=all and idempotence, places a
// keyed emit on the partition Kafka's murmur2 names (where goka's
// consumers, with partition.GokaHasher, and ingest look for it), and a
// table record on the partition of the input it was decided for.
func TestRuntimeWritesSafelyAndPlacesKeysAsKafka(t *testing.T) {
	r, err := NewRuntime(kafka.Conn{Brokers: []string{"127.0.0.1:1"}}, testenv.Shipped(t, "presence"), Options{}, RuntimeOptions{TransactionalID: "placement"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(r.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if acks := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		t.Errorf("acks %v, want all", acks)
	}
	if cl.OptValue(kgo.DisableIdempotentWrite).(bool) {
		t.Error("idempotent writes are off")
	}
	placer := cl.OptValue(kgo.RecordPartitioner).(kgo.Partitioner).ForTopic("presence.state")
	for i := range 60 {
		key := fmt.Sprintf("user-%d", i)
		if got, want := placer.Partition(&kgo.Record{Key: []byte(key), Partition: -1}, 6), partition.For([]byte(key), 6); int32(got) != want {
			t.Errorf("%s on partition %d, murmur2 says %d", key, got, want)
		}
		if got := placer.Partition(&kgo.Record{Key: []byte(key), Partition: 4}, 6); got != 4 {
			t.Errorf("a table record of partition 4 placed on %d", got)
		}
	}
}
