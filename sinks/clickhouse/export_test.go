package clickhouse

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Pipeline inserts chunks of records as Run inserts its batches: each
// decoded while the one before it is being inserted, in buffers reused
// from batch to batch.
type Pipeline struct{ w *writer }

func (s *Sink) NewPipeline() *Pipeline { return &Pipeline{s.newWriter(func([]*kgo.Record) {})} }

// Insert inserts each chunk as one batch and returns once all have landed.
func (p *Pipeline) Insert(ctx context.Context, chunks [][]*kgo.Record) error {
	defer p.w.wait()
	for _, c := range chunks {
		if err := p.w.add(ctx, c); err != nil {
			return err
		}
		if err := p.w.flush(ctx); err != nil {
			return err
		}
	}
	return p.w.settle(true)
}

// InsertStopped hands records to a background INSERT as Run does, with
// ctx already ended (a stop that came as the batch was handed over), and
// returns the INSERT's result once it is answered.
func (p *Pipeline) InsertStopped(ctx context.Context, records []*kgo.Record) error {
	if err := p.w.add(ctx, records); err != nil {
		return err
	}
	stopped, stop := context.WithCancel(ctx)
	stop()
	if err := p.w.flush(stopped); err != nil {
		return err
	}
	p.w.wait()
	return p.w.err
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

// ChunkRows is how many rows go in one Data packet of an INSERT.
const ChunkRows = chunkRows

// OnCluster renders one migration statement for a cluster.
var OnCluster = onCluster

// VersionAtLeast compares a ClickHouse version with (major, minor).
var VersionAtLeast = versionAtLeast
