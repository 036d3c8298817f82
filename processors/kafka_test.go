package processors

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
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

func TestProcessorsRefuseTopicsThatAreNotCopartitionedKfake(t *testing.T) {
	testRefuseNotCopartitioned(t, testenv.Fake(t))
}

func TestProcessorsRefuseTopicsThatAreNotCopartitionedRealKafka(t *testing.T) {
	testRefuseNotCopartitioned(t, testenv.Kafka(t))
}

func testRefuseNotCopartitioned(t *testing.T, brokers []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	s := *cfg.Streams["presence"]
	s.Name = testenv.UniqueName("copart")
	s.Limits.Partitions = 4
	cfg.Streams = map[string]*config.Stream{s.Name: &s}
	cl, err := kafka.NewClient(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Someone created the state topic by hand with another partition count.
	stateTopic := topics.For(s.Name).State
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, stateTopic); err != nil {
		t.Fatal(err)
	}
	err = NewService(cfg, brokers, "", testenv.Logger(t), nil).Run(ctx)
	if !errors.Is(err, topics.ErrMismatch) || !strings.Contains(err.Error(), stateTopic) || !strings.Contains(err.Error(), "limits.partitions") {
		t.Fatalf("want a co-partitioning error naming %s and the config path, got %v", stateTopic, err)
	}
}
