package processors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/partition"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
)

// goka's defaults lose data or cannot talk to Kafka 4; each override is
// asserted so a refactor cannot drop one silently.
func TestSaramaConfigOverridesGokaDefaults(t *testing.T) {
	c := saramaConfig()
	if !c.Version.IsAtLeast(sarama.V2_1_0_0) {
		t.Errorf("protocol version %s: Kafka 4 needs 2.1 or later", c.Version)
	}
	if c.Producer.RequiredAcks != sarama.WaitForAll {
		t.Errorf("acks %v, want all", c.Producer.RequiredAcks)
	}
	if !c.Producer.Idempotent {
		t.Error("producer is not idempotent")
	}
	if c.Consumer.Offsets.Initial != sarama.OffsetOldest {
		t.Error("a new group must start at the oldest offset")
	}
	if err := c.Validate(); err != nil {
		t.Errorf("sarama rejects the config: %v", err)
	}
}

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

// The producer goka writes through keeps acks=all and idempotence, places
// each key on the partition Kafka's murmur2 names (where goka's consumers,
// using partition.GokaHasher, look for it), and resolves each promise
// with the record's offset, from which goka tracks the table offset.
func TestProducerIsSafeAndCopartitioned(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := testenv.Context(t, time.Minute)
	p, err := newProducer(brokers, "producer-test")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cl := p.(*producer).cl
	if acks := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		t.Errorf("acks %v, want all", acks)
	}
	if cl.OptValue(kgo.DisableIdempotentWrite).(bool) {
		t.Error("idempotent writes are off")
	}
	topic := testenv.UniqueName("producer")
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 6, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	type result struct {
		key       string
		partition int32
		offset    int64
		err       error
	}
	results := make(chan result, 60)
	for i := range cap(results) {
		key := fmt.Sprintf("user-%d", i%20)
		p.Emit(topic, key, []byte("v")).ThenWithMessage(func(msg *sarama.ProducerMessage, err error) {
			r := result{key: key, err: err}
			if msg != nil {
				r.partition, r.offset = msg.Partition, msg.Offset
			}
			results <- r
		})
	}
	next := map[int32]int64{}
	for range cap(results) {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if want := partition.For([]byte(r.key), 6); r.partition != want {
			t.Errorf("%s on partition %d, murmur2 says %d", r.key, r.partition, want)
		}
		// Promises of one partition resolve in offset order.
		if r.offset != next[r.partition] {
			t.Errorf("partition %d: offset %d, want %d", r.partition, r.offset, next[r.partition])
		}
		next[r.partition] = r.offset + 1
	}
}
