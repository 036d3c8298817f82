package processors

import (
	"fmt"
	"hash"
	"log/slog"
	"path/filepath"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"

	"github.com/driftguard/driftguard/internal/partition"
)

// saramaConfig returns goka's defaults with the unsafe ones overridden
// (design §5). Each builder gets its own copy: goka's *WithConfig builders
// write the client id into a shared config.
func saramaConfig() *sarama.Config {
	c := goka.DefaultConfig()
	// goka pins 2.0.0; Kafka 4 dropped request versions older than 2.1.
	c.Version = sarama.V3_6_0_0
	// A new group must read the whole input, not only what arrives later.
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	// State, outcome and table records are only safe once every replica
	// has them, and retries must not duplicate them. The processor writes
	// them through franz-go (producer.go), which does the same; these keep
	// any sarama producer built from this config safe too.
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1
	return c
}

// GokaOptions are the Kafka-facing options every driftguard processor uses:
// Kafka's murmur2 partitioning, the safe sarama config, the replication
// factor for the tables goka creates, table storage under dataDir (in
// memory when dataDir is empty), and goka's chatter at debug level.
func GokaOptions(replication int, dataDir string, log *slog.Logger) []goka.ProcessorOption {
	tm := goka.NewTopicManagerConfig()
	tm.Table.Replication = replication
	tm.Stream.Replication = replication
	tm.MismatchBehavior = goka.TMConfigMismatchBehaviorFail
	store := storage.MemoryBuilder()
	if dataDir != "" {
		store = tableStorageBuilder(filepath.Join(dataDir, "tables"))
	}
	return []goka.ProcessorOption{
		goka.WithLogger(gokaLogger{log}),
		goka.WithHasher(partition.GokaHasher()),
		goka.WithStorageBuilder(store),
		goka.WithTopicManagerBuilder(func(brokers []string) (goka.TopicManager, error) {
			return goka.NewTopicManager(brokers, saramaConfig(), tm)
		}),
		// franz-go places keys with murmur2 like the hasher above.
		goka.WithProducerBuilder(func(brokers []string, clientID string, _ func() hash.Hash32) (goka.Producer, error) {
			return newProducer(brokers, clientID)
		}),
		goka.WithConsumerGroupBuilder(func(brokers []string, group, clientID string) (sarama.ConsumerGroup, error) {
			c := saramaConfig()
			c.ClientID = clientID
			return sarama.NewConsumerGroup(brokers, group, c)
		}),
		goka.WithConsumerSaramaBuilder(func(brokers []string, clientID string) (sarama.Consumer, error) {
			c := saramaConfig()
			c.ClientID = clientID
			return sarama.NewConsumer(brokers, c)
		}),
	}
}

// gokaLogger sends goka's log lines to slog at debug level: they describe
// goka's own life cycle, which operators rarely need.
type gokaLogger struct{ log *slog.Logger }

func (g gokaLogger) Print(v ...any)   { g.log.Debug(fmt.Sprint(v...), "component", "goka") }
func (g gokaLogger) Println(v ...any) { g.log.Debug(fmt.Sprint(v...), "component", "goka") }
func (g gokaLogger) Printf(format string, v ...any) {
	g.log.Debug(fmt.Sprintf(format, v...), "component", "goka")
}
