package eos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
)

// partitionState is where an owned partition is in its life.
type partitionState int

const (
	// restoring: assigned, its table being read back; nothing of it is
	// decided yet.
	restoring partitionState = iota
	// running: its records and visits are decided.
	running
	// revoked: taken away; its storage is closed.
	revoked
)

// offsetKey is where goka's storages keep the offset they hold the table
// to; it is no key of the table.
const offsetKey = "__offset"

// partition is a partition of the inputs this instance owns, with its
// partition of the group table: the local storage, which holds only what
// committed transactions wrote, and the values of the running
// transaction, which reach the storage when it commits.
type partition struct {
	id    int32
	state partitionState
	store storage.Storage
	// pending are the table values the running transaction set, by key
	// (nil: deleted); each key's last is written once, when it ends.
	pending map[string]any
	// encoded are the pending values as written to the changelog, kept
	// for the storage until the transaction commits: with a PartedCodec,
	// each value's head and the parts it changed, under their own keys.
	encoded map[string][]byte
	// sizes are the stored sizes of the pending values set (not deleted),
	// by key: the value cache's measure.
	sizes map[string]int
	// codec is the table's codec, nil without a table.
	codec goka.Codec
	// changelogEnd is the offset after the latest changelog record of the
	// running transaction, 0 for none; written by produce callbacks.
	changelogEnd atomic.Int64
	// touched is whether the running transaction decided a record or a
	// visit of the partition.
	touched bool
	// cache holds decoded values that committed transactions wrote.
	cache *valueCache
}

func openPartition(id int32, st storage.Storage, codec goka.Codec, cacheBytes int) (*partition, error) {
	if err := st.Open(); err != nil {
		return nil, err
	}
	return &partition{id: id, state: restoring, store: st, pending: map[string]any{}, encoded: map[string][]byte{},
		sizes: map[string]int{}, codec: codec, cache: newValueCache(cacheBytes)}, nil
}

// value is the key's table value as of the running transaction, nil
// without one.
func (part *partition) value(key string) (any, error) {
	if v, ok := part.pending[key]; ok {
		return v, nil
	}
	if v, ok := part.cache.take(key); ok {
		return v, nil
	}
	if pc, ok := part.codec.(PartedCodec); ok {
		return part.partedValue(key, pc)
	}
	codec := part.codec
	data, err := part.store.Get(key)
	if err != nil || data == nil {
		return nil, err
	}
	return codec.Decode(data)
}

func (part *partition) set(key string, value any) { part.pending[key] = value }

// keys are the partition's keys with a table value as of the running
// transaction, sorted.
func (part *partition) keys() ([]string, error) {
	it, err := part.store.Iterator()
	if err != nil {
		return nil, err
	}
	defer it.Release()
	_, parted := part.codec.(PartedCodec)
	var keys []string
	for it.Next() {
		if k := string(it.Key()); k != offsetKey && !(parted && strings.Contains(k, PartSeparator)) {
			if _, set := part.pending[k]; !set {
				keys = append(keys, k)
			}
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	for k, v := range part.pending {
		if v != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// encode encodes the running transaction's values with the table's
// codec, for the changelog and, once it commits, the storage.
func (part *partition) encode() error {
	pc, parted := part.codec.(PartedCodec)
	for k, v := range part.pending {
		if parted {
			if err := part.encodeParted(k, v, pc); err != nil {
				return err
			}
			continue
		}
		if v == nil {
			part.encoded[k] = nil
			continue
		}
		data, err := part.codec.Encode(v)
		if err != nil {
			return fmt.Errorf("encoding the table value of %q: %w", k, err)
		}
		part.encoded[k] = data
		part.sizes[k] = len(data)
	}
	return nil
}

// apply moves a committed transaction's values to the storage, with the
// changelog offset they reach.
func (part *partition) apply() error {
	pc, parted := part.codec.(PartedCodec)
	for k, data := range part.encoded {
		var err error
		if data == nil {
			err = part.store.Delete(k)
			part.cache.drop(k)
		} else {
			err = part.store.Set(k, data)
		}
		if err != nil {
			return err
		}
	}
	// The values set (parts have no entry), now stored.
	for k, size := range part.sizes {
		v := part.pending[k]
		if parted {
			pc.Stored(v)
		}
		part.cache.put(k, v, size)
	}
	if end := part.changelogEnd.Load(); end > 0 {
		return part.store.SetOffset(end - 1)
	}
	return nil
}

// reset forgets the ended transaction's values.
func (part *partition) reset() {
	clear(part.pending)
	clear(part.encoded)
	clear(part.sizes)
	part.changelogEnd.Store(0)
	part.touched = false
}

func (part *partition) close() error {
	part.state = revoked
	return part.store.Close()
}

// assigned restores the table partitions of newly assigned partitions
// before any of their records is decided, once their offsets are stable.
func (p *Processor) assigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.joined.Store(true)
	ids := assigned[p.topics[0]]
	if len(ids) == 0 {
		return
	}
	p.restoring.Add(int32(len(ids)))
	defer p.restoring.Add(-int32(len(ids)))
	p.recovery.phase(PhaseAssigned, "partitions assigned", "partitions", ids)
	if err := p.awaitStableOffsets(ctx, cl, ids); err != nil {
		p.failed = sessionLost(fmt.Errorf("group %s: awaiting the offsets of partitions %v: %w", p.group, ids, err))
		return
	}
	p.recovery.phase(PhaseStable, "offsets of the assigned partitions stable", "partitions", ids)
	var ends kadm.ListedOffsets
	if p.plan.table != nil {
		// The table's last stable offsets, once for every partition, past
		// every transaction that wrote there before the offsets were
		// stable: nothing another instance writes to these partitions from
		// now on can commit.
		var err error
		if ends, err = p.awaitChangelogEnds(ctx, cl, ids); err != nil {
			p.failed = sessionLost(fmt.Errorf("group %s: the last stable offsets of %s: %w", p.group, p.plan.table.name, err))
			return
		}
	}
	for _, id := range ids {
		if p.parts[id] != nil {
			// Held still: its revocation was not reported (see visit).
			// Another instance may have written it since.
			p.opts.Logger.Info("partition assigned again; restored anew", "group", p.group, "partition", id)
			p.drop(id)
		}
	}
	for _, id := range ids {
		part, err := p.open(id)
		if err != nil {
			p.failed = sessionLost(fmt.Errorf("group %s: opening table partition %d: %w", p.group, id, err))
			return
		}
		p.parts[id] = part // closed with the others when the session ends
	}
	// Side by side: a restart restores every partition the instance held.
	var g errgroup.Group
	for _, id := range ids {
		part := p.parts[id]
		g.Go(func() error {
			if err := p.restore(ctx, part, ends); err != nil {
				return fmt.Errorf("restoring table partition %d: %w", part.id, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		p.failed = sessionLost(fmt.Errorf("group %s: %w", p.group, err))
		return
	}
	p.recovery.phase(PhaseRestored, "tables of the assigned partitions restored", "partitions", ids)
	if p.marks != nil {
		// A previous owner's last transaction ended in a marker.
		p.marks.owe(ids...)
	}
}

// awaitStableOffsets returns once the group has no transaction pending on
// the offsets of partitions ids (KIP-447: the coordinator answers
// UNSTABLE_OFFSET_COMMIT until it ends), that is once every transaction of
// a previous owner that wrote them has committed or aborted, at the latest
// after its transaction timeout.
func (p *Processor) awaitStableOffsets(ctx context.Context, cl *kgo.Client, ids []int32) error {
	adm := kadm.NewClient(cl)
	return p.awaitPrevious(ctx, ids, func() (bool, error) {
		offsets, err := adm.FetchOffsetsForTopics(kadm.RequireStable(ctx), p.group, p.topics...)
		unstable := errors.Is(err, kerr.UnstableOffsetCommit)
		if err != nil && !unstable {
			return false, err
		}
		for _, topic := range p.topics {
			for _, id := range ids {
				if o, ok := offsets.Lookup(topic, id); ok && errors.Is(o.Err, kerr.UnstableOffsetCommit) {
					unstable = true
				} else if ok && o.Err != nil {
					return false, o.Err
				}
			}
		}
		return !unstable, nil
	})
}

// awaitChangelogEnds returns the table's last stable offsets once those of
// partitions ids have reached the high watermarks the partitions had when
// their offsets became stable. A transaction's markers reach its
// partitions one by one: a previous owner's last transaction can count as
// committed in the group's offsets while its marker on the changelog
// still trails, and a restore to the last stable offset listed then would
// miss its table writes, though its inputs count as decided (their
// timers fire again, their dedup memory is gone). Every transaction that
// wrote below those high watermarks has its marker once the last stable
// offset passes them: a previous owner's within milliseconds, a stalled
// one's when the broker aborts it at its transaction timeout.
func (p *Processor) awaitChangelogEnds(ctx context.Context, cl *kgo.Client, ids []int32) (kadm.ListedOffsets, error) {
	adm := kadm.NewClient(cl)
	table := p.plan.table.name
	written, err := adm.ListEndOffsets(ctx, table)
	if err != nil {
		return nil, err
	}
	var stable kadm.ListedOffsets
	err = p.awaitPrevious(ctx, ids, func() (bool, error) {
		var listErr error
		if stable, listErr = adm.ListCommittedOffsets(ctx, table); listErr != nil {
			return false, listErr
		}
		for _, id := range ids {
			w, wok := written.Lookup(table, id)
			s, sok := stable.Lookup(table, id)
			switch {
			case !wok || w.Err != nil:
				return false, fmt.Errorf("no high watermark of %s/%d: %v", table, id, w.Err)
			case !sok || s.Err != nil:
				return false, fmt.Errorf("no last stable offset of %s/%d: %v", table, id, s.Err)
			case s.Offset < w.Offset:
				return false, nil
			}
		}
		return true, nil
	})
	return stable, err
}

// awaitPrevious polls done, with a growing backoff, until it reports that
// what a previous owner of partitions ids left open has ended, or fails.
func (p *Processor) awaitPrevious(ctx context.Context, ids []int32, done func() (bool, error)) error {
	backoff, began := stableOffsetsBackoffMin, time.Now()
	for {
		if ok, err := done(); ok || err != nil {
			return err
		}
		p.recovery.unstable(ids, time.Since(began))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, stableOffsetsBackoffMax)
	}
}

// dropped closes the table partitions of revoked or lost partitions.
func (p *Processor) dropped(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range revoked[p.topics[0]] {
		p.drop(id)
	}
}

// drop closes partition id's table storage and forgets it; p.mu is held.
func (p *Processor) drop(id int32) {
	part := p.parts[id]
	if part == nil {
		return
	}
	if err := part.close(); err != nil {
		p.opts.Logger.Warn("closing table storage", "group", p.group, "partition", id, "err", err)
	}
	delete(p.parts, id)
}

func (p *Processor) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.parts {
		p.drop(id)
	}
}
