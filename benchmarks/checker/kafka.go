package checker

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/record"
)

// readTopic reads topic from its start to the end it has now, as a
// read_committed consumer (what the sink and the bridge read), and calls
// each for every data record and, when marker is not nil, marker for
// every transaction marker. It returns the last data record's offset per
// partition (-1 for none).
func readTopic(ctx context.Context, brokers []string, topic string, each, marker func(*kgo.Record)) (map[int32]int64, error) {
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
			switch {
			case r.Attrs.IsControl():
				if marker != nil {
					marker(r)
				}
			case !record.IsViewMark(r.Key, r.Value):
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

// commitTimes tell when each record a transaction wrote became readable
// by read_committed readers: the time of the commit marker that ended its
// transaction, which the broker stamps as it writes it. Records are
// added in log order per partition, each before the marker that follows
// it.
type commitTimes struct {
	// pending are the records of each partition and producer not yet
	// followed by their marker.
	pending map[producerPartition][]func(atMs int64)
}

type producerPartition struct {
	partition int32
	producer  int64
}

// wrote notes that rec, a data record, is told its commit time by at.
func (c *commitTimes) wrote(rec *kgo.Record, at func(atMs int64)) {
	if c.pending == nil {
		c.pending = map[producerPartition][]func(int64){}
	}
	k := producerPartition{rec.Partition, rec.ProducerID}
	c.pending[k] = append(c.pending[k], at)
}

// marker ends the transaction of its producer on its partition: a commit
// tells its records the marker's time; an abort forgets them (a
// read_committed reader never sees an aborted record, so none is there
// unless the broker's filtering failed).
func (c *commitTimes) marker(rec *kgo.Record) {
	k := producerPartition{rec.Partition, rec.ProducerID}
	if isCommitMarker(rec) {
		for _, at := range c.pending[k] {
			at(rec.Timestamp.UnixMilli())
		}
	}
	delete(c.pending, k)
}

// isCommitMarker reports whether a control record is a transaction's
// commit marker: its key is the marker's version and then its type, two
// big-endian int16s, type 1 for a commit and 0 for an abort.
func isCommitMarker(rec *kgo.Record) bool {
	return len(rec.Key) >= 4 && binary.BigEndian.Uint16(rec.Key[2:4]) == 1
}
