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
