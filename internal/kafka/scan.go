package kafka

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/partition"
)

// ReadCommitted calls fn with every committed record of topic's
// partitions (every partition when partitions is nil), each partition
// from its start to its last stable offset as listed when called, in
// offset order within a partition. Transaction markers take offsets too:
// they are read (and not passed to fn) so that the end is known to be
// reached, never guessed from a quiet period. fn returning an error stops
// the read with it.
func ReadCommitted(ctx context.Context, conn Conn, topic string, partitions []int32, fn func(*kgo.Record) error) error {
	return ReadCommittedSince(ctx, conn, topic, partitions, time.Time{}, fn)
}

// ReadCommittedSince is ReadCommitted from the first record of each
// partition whose timestamp is at or after since (from the start when
// since is zero).
func ReadCommittedSince(ctx context.Context, conn Conn, topic string, partitions []int32, since time.Time, fn func(*kgo.Record) error) error {
	admin, err := NewClient(conn)
	if err != nil {
		return err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("last stable offsets of %s: %w", topic, err)
	}
	// Where each partition starts: a partition whose records retention
	// has all deleted starts at its end, and has nothing to wait for.
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err == nil && !since.IsZero() {
		if starts, err = adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic); err == nil {
			err = starts.Error()
		}
	}
	if err != nil {
		return fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if partitions != nil && !slices.Contains(partitions, o.Partition) {
			return
		}
		s, ok := starts.Lookup(topic, o.Partition)
		if !ok || s.Offset >= o.Offset {
			return
		}
		want[o.Partition] = o.Offset
		from[o.Partition] = kgo.NewOffset().At(s.Offset)
	})
	if len(want) == 0 {
		return nil
	}
	cl, err := NewClient(conn, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return err
	}
	defer cl.Close()
	for len(want) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return fmt.Errorf("reading %s/%d: %w", topic, errs[0].Partition, errs[0].Err)
		}
		var stop error
		fetches.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if stop != nil || !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				stop = fn(r)
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
		if stop != nil {
			return stop
		}
	}
	return nil
}

// PartitionOf is the partition of topic where key lives: Kafka's murmur2
// over the topic's partition count, as every component places keys.
func PartitionOf(ctx context.Context, conn Conn, topic, key string) (int32, error) {
	cl, err := NewClient(conn)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	d, ok := topics[topic]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return 0, fmt.Errorf("topic %s not found: %v", topic, d.Err)
	}
	return partition.For([]byte(key), int32(len(d.Partitions))), nil
}
