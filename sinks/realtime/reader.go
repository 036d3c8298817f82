package realtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// stream is one stream the bridge serves.
type stream struct {
	cfg   *config.Stream
	topic string
	// outcomes is the stream's outcomes topic, read for chat catch-up.
	outcomes string
	// store is replaced when the state topic's epoch changes (the topic was
	// deleted and created again): cursors of the old one are gone.
	store atomic.Pointer[store]
	// caughtUp is set once the store has read every partition to where it
	// ended when reading began.
	caughtUp atomic.Bool
	// chat serves the applied sends of an assign stream; nil otherwise.
	chat *chat
	// typing shows an assign stream's typing signals; nil without one.
	typing *typingStream
	// writer writes clients' sends and receipts to an assign stream; nil
	// otherwise.
	writer *writer
	// catchUps serve the clients resuming from cursors older than the
	// log (catchup.go).
	catchUps *catchUps
	// failure is why reading the stream last failed, for /readyz.
	failure atomic.Pointer[error]
	// droppedLogAt is when entities dropped over bridge.max_entities were
	// last logged; only the stream's reader reads and writes it.
	droppedLogAt time.Time
}

// dropLogEvery is how often a stream over bridge.max_entities is logged
// while it keeps dropping entities: a stream at its limit drops on most
// fetches, and one line per fetch would flood the logs.
const dropLogEvery = time.Minute

// dropLogged logs that the stream dropped entities over
// bridge.max_entities, at most once per dropLogEvery.
func (st *stream) dropLogged(b *Bridge, s *store) {
	if now := time.Now(); now.Sub(st.droppedLogAt) >= dropLogEvery {
		st.droppedLogAt = now
		b.log.Error("stream over bridge.max_entities: new entities are dropped (counted in driftguard_bridge_entities_dropped_total); the bridge keeps serving those it holds; raise the limit",
			"stream", st.cfg.Name, "max_entities", b.cfg.MaxEntities, "dropped", s.droppedCount())
	}
}

// errEpochChanged ends a reading of a topic that was deleted and created
// again, or whose partitions changed.
var errEpochChanged = errors.New("the topic's epoch changed")

// epochCheck is how often a reader looks for a new epoch of its topic.
const epochCheck = 5 * time.Second

// liveReaderWait is how long the broker holds a live reader's fetch when
// there is nothing to read. A fetch answers as soon as one record is
// there (readers ask no minimum size), so the wait delays nothing; it is
// only how often a reader of a quiet topic asks again. At 200 ms the
// bridge's readers (a stream's states, a chat's messages, its typing)
// were 35 fetches a second at rest.
const liveReaderWait = 5 * time.Second

// readState reads the stream's state topic from the start of every
// partition, without a consumer group (every bridge reads everything, so a
// cursor is good on any of them), until ctx ends; it starts over on a new
// epoch.
func (b *Bridge) readState(ctx context.Context, st *stream) error {
	for {
		err := b.readEpoch(ctx, st)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errEpochChanged) {
			b.log.Warn("state topic recreated: its cursors are gone, the bridge reads it anew", "topic", st.topic)
		} else {
			st.failure.Store(&err)
			b.log.Warn("reading the state topic failed; retrying", "topic", st.topic, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// describe returns the topic's epoch and partition count.
func describe(ctx context.Context, adm *kadm.Client, topic string) ([16]byte, int, error) {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return [16]byte{}, 0, err
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return [16]byte{}, 0, fmt.Errorf("topic %s: %v", topic, td.Err)
	}
	return td.ID, len(td.Partitions), nil
}

func (b *Bridge) readEpoch(ctx context.Context, st *stream) error {
	epoch, partitions, err := describe(ctx, b.adm, st.topic)
	if err != nil {
		return err
	}
	ends, err := b.adm.ListCommittedOffsets(ctx, st.topic)
	if err != nil {
		return err
	}
	s := newStore(epoch, partitions, b.cfg.Window*partitions, b.cfg.MaxEntities, st.cfg.Policy == config.PolicyAssign)
	st.caughtUp.Store(false)
	st.store.Store(s)
	b.metrics.overLimit.WithLabelValues(st.cfg.Name).Set(0)
	defer close(s.retired)
	start := map[int32]kgo.Offset{}
	for p := range int32(partitions) {
		start[p] = kgo.NewOffset().AtStart()
	}
	cl, err := b.reader("bridge-"+st.topic, b.ops.Registry, st.topic, start, liveReaderWait)
	if err != nil {
		return err
	}
	defer cl.Close()
	lastCheck := time.Now()
	for {
		if s.caughtUpTo(ends) {
			st.caughtUp.Store(true)
		}
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				b.log.Debug("fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			recs := make([]stateRecord, 0, len(fp.Records))
			for _, r := range fp.Records {
				sr := stateRecord{offset: r.Offset}
				if r.Attrs.IsControl() || record.IsViewMark(r.Key, r.Value) {
					// A position only: a transaction marker, or the mark
					// the processors end a partition with for goka's view.
					recs = append(recs, sr)
					continue
				}
				var err error
				if sr.state, err = record.DecodeState(r.Value, &sr.st); err != nil || sr.st.Key == "" {
					// A record no reader can use is passed over, its
					// position read, so the partition keeps flowing.
					b.log.Warn("state record skipped", "topic", st.topic, "partition", r.Partition, "offset", r.Offset, "err", err)
					sr.st = record.State{}
				}
				// The scanner's strings share the record's bytes: keep copies.
				sr.st.Key, sr.state = strings.Clone(sr.st.Key), strings.Clone(sr.state)
				recs = append(recs, sr)
			}
			if dropped := s.apply(fp.Partition, recs); dropped > 0 {
				b.metrics.dropped.WithLabelValues(st.cfg.Name).Add(float64(dropped))
				b.metrics.overLimit.WithLabelValues(st.cfg.Name).Set(1)
				st.dropLogged(b, s)
			}
			b.metrics.entities.WithLabelValues(st.cfg.Name).Set(float64(s.len()))
		})
		if time.Since(lastCheck) > epochCheck {
			lastCheck = time.Now()
			if now, n, err := describe(ctx, b.adm, st.topic); err == nil && (now != epoch || n != partitions) {
				return errEpochChanged
			}
		}
	}
}

// caughtUpTo reports whether every partition has been read to its end
// offset in ends.
func (s *store) caughtUpTo(ends kadm.ListedOffsets) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	caught := true
	ends.Each(func(o kadm.ListedOffset) {
		if int(o.Partition) < len(s.next) && s.next[o.Partition] < o.Offset {
			caught = false
		}
	})
	return caught
}

func (s *store) len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.entities.Len()
}

// readRange reads partitions of topic from the offsets in from up to (not
// including) the offsets in to, calling each with every state record in
// offset order. A client resuming from a cursor older than the log reads
// this way.
func (b *Bridge) readRange(ctx context.Context, topic string, from, to map[int32]int64, each func(p int32, r stateRecord) error) error {
	start := map[int32]kgo.Offset{}
	for p, o := range from {
		if o < to[p] {
			start[p] = kgo.NewOffset().At(o)
		}
	}
	if len(start) == 0 {
		return nil
	}
	// Fetches are bounded: a catch-up reader's memory is part of the
	// bound of a reconnect storm (catchup.go).
	cl, err := b.reader("bridge-"+topic+"-catchup", nil, topic, start, 100*time.Millisecond,
		kgo.FetchMaxBytes(catchUpFetchBytes), kgo.FetchMaxPartitionBytes(catchUpFetchBytes), kgo.MaxConcurrentFetches(1))
	if err != nil {
		return err
	}
	defer cl.Close()
	pending := len(start)
	done := map[int32]bool{}
	for pending > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var failed error
		fetches.EachError(func(_ string, p int32, err error) { failed = fmt.Errorf("partition %d: %w", p, err) })
		if failed != nil {
			return failed
		}
		for _, r := range fetches.Records() {
			if done[r.Partition] {
				continue
			}
			if r.Offset < to[r.Partition] && !r.Attrs.IsControl() {
				sr := stateRecord{offset: r.Offset}
				if sr.state, err = record.DecodeState(r.Value, &sr.st); err == nil && sr.st.Key != "" {
					sr.st.Key, sr.state = strings.Clone(sr.st.Key), strings.Clone(sr.state)
					if err := each(r.Partition, sr); err != nil {
						return err
					}
				}
			}
			if r.Offset+1 >= to[r.Partition] {
				done[r.Partition] = true
				pending--
			}
		}
	}
	return nil
}
