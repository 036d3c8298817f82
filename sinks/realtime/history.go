package realtime

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/record"
)

// A conversation's history is its applied sends in `<stream>.outcomes`,
// read back by offset: the bridge keeps, per conversation, the offset of
// each send's outcome record by conversation_seq (an index), and the
// bodies of the recent ones only (the window). Kafka holds the rest for
// the topic's retention; docs/bridge.md says why this store.

// blockSeqs is how many sequences one block of an index holds.
const blockSeqs = 64

// block is blockSeqs entries (fewer in the last block) of an index: one
// uvarint per sequence, its record's offset minus the offset of the
// previous entry held (base for the first), 0 for a sequence not held.
// Offsets of a conversation's sends only grow, so every delta held is at
// least 1: a conversation that sends once in k records of its partition
// costs about one byte per message for k < 128, two below 16,384, three
// below 2,097,152.
type block struct {
	base int64
	data []byte
}

// index is the offsets of a conversation's send outcome records by
// conversation_seq: entries for first .. first+n-1, each the offset of
// that sequence's first outcome record in partition, or not held.
type index struct {
	partition int32
	// first is the lowest sequence the index can hold: those below were
	// decided before what the bridge read (its start, chat_history,
	// retention) or have been trimmed.
	first int64
	n     int64
	// last is the offset of the last entry held, -1 before any.
	last   int64
	blocks []block
}

// maxHoles bounds the entries not held that one outcome record may add
// (a sequence after a run the bridge never saw): beyond, the index starts
// anew at that sequence, and what came before is not held.
const maxHoles = 1 << 16

func newIndex(partition int32, first int64) index {
	return index{partition: partition, first: max(first, 1), last: -1}
}

// top is the highest sequence with an entry, first-1 when none.
func (x *index) top() int64 { return x.first + x.n - 1 }

// add records the offset of sequence seq's outcome record. A sequence at
// or below top is a repeated record (a processor restart wrote it again,
// or an older one): the first stays. A sequence beyond top+1 leaves the
// ones between not held.
func (x *index) add(seq, offset int64) {
	if seq <= x.top() {
		return
	}
	if x.n == 0 {
		x.first = seq
	}
	if holes := seq - x.top() - 1; holes > maxHoles {
		*x = newIndex(x.partition, seq)
	}
	for x.top() < seq-1 {
		x.push(0)
	}
	if offset <= x.last { // never for a partition's log; kept unreadable
		x.push(0)
		return
	}
	x.push(uint64(offset - x.last))
	x.last = offset
}

// push appends one entry.
func (x *index) push(delta uint64) {
	if x.n%blockSeqs == 0 {
		if len(x.blocks) > 0 {
			// A full block is never written again: keep exactly its bytes.
			full := &x.blocks[len(x.blocks)-1]
			full.data = bytes.Clone(full.data)
		}
		x.blocks = append(x.blocks, block{base: x.last, data: make([]byte, 0, blockSeqs)})
	}
	b := &x.blocks[len(x.blocks)-1]
	b.data = binary.AppendUvarint(b.data, delta)
	x.n++
}

// trim drops the blocks whose records are all below start, the
// partition's log start: retention has deleted them.
func (x *index) trim(start int64) {
	k := 0
	for k+1 < len(x.blocks) && x.blocks[k+1].base < start {
		k++
	}
	if k == len(x.blocks)-1 && x.last < start {
		k = len(x.blocks) // every entry is gone
	}
	if k == 0 {
		return
	}
	if k == len(x.blocks) {
		*x = index{partition: x.partition, first: x.top() + 1, last: x.last}
		return
	}
	x.blocks = slices.Clone(x.blocks[k:])
	x.first += int64(k) * blockSeqs
	x.n -= int64(k) * blockSeqs
}

// entries walks the index from sequence seq (at least first) to top.
type entries struct {
	x      *index
	seq    int64
	blk    int
	data   []byte
	offset int64
}

func (x *index) from(seq int64) *entries {
	seq = min(max(seq, x.first), x.top()+1)
	e := &entries{x: x, seq: x.first + (seq-x.first)/blockSeqs*blockSeqs, blk: int((seq - x.first) / blockSeqs)}
	if e.blk < len(x.blocks) {
		e.data, e.offset = x.blocks[e.blk].data, x.blocks[e.blk].base
	}
	for e.seq < seq {
		e.next()
	}
	return e
}

// next returns the next sequence and its offset, held false for one not
// held; ok is false past top.
func (e *entries) next() (seq, offset int64, held, ok bool) {
	if e.seq > e.x.top() {
		return 0, 0, false, false
	}
	if len(e.data) == 0 {
		e.blk++
		e.data, e.offset = e.x.blocks[e.blk].data, e.x.blocks[e.blk].base
	}
	delta, n := binary.Uvarint(e.data)
	e.data = e.data[n:]
	seq = e.seq
	e.seq++
	if delta == 0 {
		return seq, 0, false, true
	}
	e.offset += int64(delta)
	return seq, e.offset, true, true
}

// wanted is a send whose outcome record is read back from Kafka.
type wanted struct {
	seq, offset int64
}

// historyWait bounds how long one read of older messages waits for Kafka.
const historyWait = 10 * time.Second

// historyFetchBytes bounds one fetch of older messages: the records
// wanted are a conversation's among others, and a fetch of the default
// size would bring megabytes to serve a few. The broker still sends a
// whole record batch larger than that.
const historyFetchBytes = 64 << 10

// rangeGap is the most records between two wanted ones that one fetch
// range reads through; further apart, the reader seeks.
const rangeGap = 256

// fetchSends reads the outcome records of want (ascending offsets) from
// partition p of topic with one short-lived reader, calling each with
// every one found. A record not found is below the log start: retention
// has deleted it. Offsets closer than rangeGap are read as one range.
func (b *Bridge) fetchSends(ctx context.Context, topic string, p int32, want []wanted, each func(w wanted, o *record.Outcome)) error {
	if len(want) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, historyWait)
	defer cancel()
	cl, err := b.reader("bridge-"+topic+"-history", nil, topic, map[int32]kgo.Offset{p: kgo.NewOffset().At(want[0].offset)}, 100*time.Millisecond,
		kgo.FetchMaxPartitionBytes(historyFetchBytes), kgo.FetchMaxBytes(historyFetchBytes))
	if err != nil {
		return err
	}
	defer cl.Close()
	var o record.Outcome
	i, seen, sought := 0, int64(-1), want[0].offset
	for i < len(want) {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("reading %s partition %d: %w", topic, p, ctx.Err())
		}
		var failed error
		fetches.EachError(func(_ string, _ int32, err error) {
			// A reader that started below the log start resumes at it:
			// the records it passed are gone, which is what it learns.
			if loss := (*kgo.ErrDataLoss)(nil); !errors.As(err, &loss) {
				failed = fmt.Errorf("reading %s partition %d: %w", topic, p, err)
			}
		})
		if failed != nil {
			return failed
		}
		for _, r := range fetches.Records() {
			seen = max(seen, r.Offset)
			// The log has no holes but at its start (a partition's records
			// are only ever deleted from it) and where aborted writes were,
			// which were never indexed: a wanted offset passed over is gone.
			for i < len(want) && want[i].offset < r.Offset {
				i++
			}
			if i == len(want) {
				break
			}
			if want[i].offset != r.Offset {
				continue
			}
			w := want[i]
			i++
			if outcomeOf(r, &o) {
				each(w, &o)
			}
		}
		if i < len(want) && want[i].offset > seen+rangeGap && want[i].offset != sought {
			sought = want[i].offset
			cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {p: {Epoch: -1, Offset: want[i].offset}}})
		}
	}
	return nil
}
