package eos

import (
	"context"
	"fmt"

	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A partition's table is restored from its changelog before any of its
// records is decided: from where its storage stands, so a restart reads
// only what was written since the storage's last flush.

// open opens partition id's table storage, not yet restored. Storages are
// opened one after the other: a storage.Builder need not be safe to call
// concurrently.
func (p *Processor) open(id int32) (*partition, error) {
	table := "-"
	var codec goka.Codec
	if p.plan.table != nil {
		table, codec = p.plan.table.name, p.plan.table.codec
	}
	st, err := p.opts.Storage(table, id)
	if err != nil {
		return nil, err
	}
	return openPartition(id, st, codec, p.opts.ValueCacheBytes)
}

// restore reads part's changelog to its last stable offset in ends. The
// partitions of one assignment are restored side by side, each with its
// own storage and reader.
func (p *Processor) restore(ctx context.Context, part *partition, ends kadm.ListedOffsets) error {
	if p.plan.table == nil {
		part.state = running
		return nil
	}
	table := p.plan.table.name
	end, ok := ends.Lookup(table, part.id)
	if !ok || end.Err != nil {
		return fmt.Errorf("no last stable offset of %s/%d: %v", table, part.id, end.Err)
	}
	reader := func(from int64) (*kgo.Client, error) {
		return kgo.NewClient(p.ChangelogReaderOptions(part.id, from)...)
	}
	return part.restore(ctx, reader, end.Offset)
}

// ChangelogReaderOptions are the franz-go options of the client that
// restores table partition id from offset from: committed records only,
// with the transaction markers that tell where the end is.
func (p *Processor) ChangelogReaderOptions(id int32, from int64) []kgo.Opt {
	return append(p.clientFor("restore"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{p.plan.table.name: {id: kgo.NewOffset().At(from)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
}

// restore reads the partition's changelog, committed records only, from
// where the storage stands to end (the last stable offset), then marks it
// running. A storage that stands at or past end holds what this changelog
// never had (the topic was deleted and created anew): it is emptied and
// the changelog read from its start.
func (part *partition) restore(ctx context.Context, reader func(from int64) (*kgo.Client, error), end int64) error {
	stored, err := part.store.GetOffset(-1)
	if err != nil {
		return err
	}
	if stored >= end {
		if err := part.empty(); err != nil {
			return err
		}
		stored = -1
	}
	if stored+1 < end {
		if err := part.readChangelog(ctx, reader, stored+1, end); err != nil {
			return err
		}
	}
	if err := part.store.MarkRecovered(); err != nil {
		return err
	}
	part.state = running
	return nil
}

// empty deletes every value and the offset of the partition's storage.
func (part *partition) empty() error {
	it, err := part.store.Iterator()
	if err != nil {
		return err
	}
	var keys []string
	for it.Next() {
		keys = append(keys, string(it.Key()))
	}
	it.Release()
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		if err := part.store.Delete(k); err != nil {
			return err
		}
	}
	return part.store.SetOffset(-1)
}

// readChangelog applies the committed records in [from, end). Transaction
// markers take offsets too: they are read (and passed over) so that the
// end is known to be reached.
func (part *partition) readChangelog(ctx context.Context, reader func(from int64) (*kgo.Client, error), from, end int64) error {
	rd, err := reader(from)
	if err != nil {
		return err
	}
	defer rd.Close()
	last := from - 1
	for last < end-1 {
		fetches := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fetches.Err0(); err != nil {
			return err
		}
		var serr error
		fetches.EachRecord(func(rec *kgo.Record) {
			last = max(last, rec.Offset)
			if serr != nil || rec.Attrs.IsControl() || IsViewMark(rec) {
				return
			}
			if rec.Value == nil {
				serr = part.store.Delete(string(rec.Key))
			} else {
				serr = part.store.Set(string(rec.Key), rec.Value)
			}
		})
		if serr != nil {
			return serr
		}
	}
	return part.store.SetOffset(last)
}
