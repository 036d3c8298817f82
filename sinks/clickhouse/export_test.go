package clickhouse

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// InsertPipelined inserts each chunk as Run inserts a batch: decoded while
// the chunk before it is being inserted.
func (s *Sink) InsertPipelined(ctx context.Context, chunks [][]*kgo.Record) error {
	w := s.newWriter(func([]*kgo.Record) {})
	defer w.wait()
	for _, c := range chunks {
		if err := w.add(ctx, c); err != nil {
			return err
		}
		if err := w.flush(ctx); err != nil {
			return err
		}
	}
	return w.settle(true)
}

// Batch is a gathered batch.
type Batch = batch

// Gather decodes records into a new batch, as Run does between flushes.
func (s *Sink) Gather(ctx context.Context, records []*kgo.Record) (*Batch, error) {
	b := newBatch()
	return b, s.add(ctx, b, records)
}

// Flush inserts a gathered batch; retry says an earlier try failed.
func (s *Sink) Flush(ctx context.Context, b *Batch, retry bool) error { return s.flush(ctx, b, retry) }

// Prepare builds a gathered batch's INSERTs ahead, as Run does while the
// batch before is being written.
func (s *Sink) Prepare(ctx context.Context, b *Batch) { s.prepare(ctx, b) }
