// Package kafka holds the franz-go plumbing every component shares: one way
// to build a client (Kafka's murmur2 partitioning, acks=all, idempotence,
// the TLS and SASL of kafka.tls and kafka.sasl), topic setup, and the
// errors that name the security setting a broker refused.
package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/topics"
)

// NewClient returns a franz-go client of conn with driftguard's defaults;
// opts add consumer settings or override.
func NewClient(conn Conn, opts ...kgo.Opt) (*kgo.Client, error) {
	return New(Options(conn, opts...))
}

// New builds a client of opts, a component's whole option list built on
// Options (one that tests read back as well).
func New(opts []kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// Options are NewClient's options, for clients built another way (a
// transactional session): every client's seed brokers, TLS and SASL come
// from here.
func Options(conn Conn, opts ...kgo.Opt) []kgo.Opt {
	base := []kgo.Opt{
		kgo.SeedBrokers(conn.Brokers...),
		// Java's and goka's (with partition.GokaHasher) placement of keys.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		// acks=all and idempotence are franz-go's defaults; stated so a
		// reader does not have to know that.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// After a leader dies, a client learns the new one from metadata,
		// which franz-go refreshes at most every 5 s by default: with two
		// refreshes needed (the first still names the dead leader until the
		// controller fences it), ingest answered 503 on its partitions for
		// up to 12 s in the cluster fault test. A second is still cheap.
		kgo.MetadataMinAge(time.Second),
	}
	if codecs := compression(conn.compression); codecs != nil {
		base = append(base, kgo.ProducerBatchCompression(codecs...))
	}
	base = append(base, conn.securityOptions()...)
	return append(base, opts...)
}

// EnsureTopics creates (when create is true) and checks every topic of the
// configured streams, under the configured prefixes.
func EnsureTopics(ctx context.Context, cl *kgo.Client, cfg *config.Config, create bool) ([]topics.Status, error) {
	return topics.Ensure(ctx, kadm.NewClient(cl), cfg.Kafka.Naming(), cfg.StreamList(), Durability(cfg), create)
}

// Durability is the configured durability of driftguard's topics.
func Durability(cfg *config.Config) topics.Durability {
	return topics.Durability{ReplicationFactor: cfg.Kafka.ReplicationFactor, MinInsyncReplicas: cfg.Kafka.MinInsyncReplicasOrDefault()}
}

// FetchMinBytes is kgo.FetchMinBytes of n bytes (processing.fetch_min_bytes,
// clickhouse.fetch_min_bytes), held to the int32 Kafka carries: at least
// 1, at most 1 GiB.
func FetchMinBytes(n int) kgo.Opt { return kgo.FetchMinBytes(int32(max(1, min(n, 1<<30)))) }
