package checker

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/record"
)

// readTopic reads topic from its start to the end it has now, as a
// read_committed consumer (what the sink and the bridge read), and calls
// each for every record. It returns the last data record's offset per
// partition (-1 for none).
func readTopic(ctx context.Context, brokers []string, topic string, each func(*kgo.Record)) (map[int32]int64, error) {
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
	}
	admCl.Close()
	if err != nil {
		return nil, fmt.Errorf("offsets of %s: %w", topic, err)
	}
	last := map[int32]int64{}
	from := map[int32]kgo.Offset{}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		last[o.Partition] = -1
		start, _ := starts.Lookup(topic, o.Partition)
		if o.Offset > start.Offset {
			from[o.Partition] = kgo.NewOffset().At(start.Offset)
			want[o.Partition] = o.Offset
		}
	})
	if len(from) == 0 {
		return last, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) come too, so that the
		// position is known exactly when the last record of a partition
		// is a marker.
		kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %d partitions short of their end: %w", topic, len(want), err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, fmt.Errorf("reading %s: %w", topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, open := want[r.Partition]
			if !open {
				return
			}
			// The processors' marks for goka's view (on the state topic)
			// are positions only, like transaction markers: no sink row
			// has their offset.
			if !r.Attrs.IsControl() && !record.IsViewMark(r.Key, r.Value) {
				each(r)
				last[r.Partition] = r.Offset
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return last, nil
}

// waitGroupCaughtUp waits until group has committed the end of every
// partition of topic, or until d passes; it says how far behind it is.
func waitGroupCaughtUp(ctx context.Context, brokers []string, group, topic string, d time.Duration) (behind int64, err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(d)
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return 0, err
		}
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return 0, err
		}
		behind = 0
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := committed.Lookup(topic, o.Partition)
			at := int64(0)
			if ok && c.At >= 0 {
				at = c.At
			}
			behind += max(o.Offset-at, 0)
		})
		if behind == 0 || time.Now().After(deadline) {
			return behind, nil
		}
		select {
		case <-ctx.Done():
			return behind, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
