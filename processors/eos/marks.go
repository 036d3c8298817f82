package eos

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// viewMarks make the group table, and the topics of Options.ViewTopics,
// readable by goka's view as released. The runtime writes them in
// transactions, so the last
// offset of a quiet partition is a commit (or abort) marker, which no
// consumer receives; goka's partition table ends its recovery only on
// receiving a record at the high watermark minus one, which sarama reads
// without an isolation level, so a view never finished recovering. After
// the transactions that wrote a partition, one view mark
// (IsViewMark: a tombstone of the empty key) is written to it by
// a producer of its own, idempotent and outside any transaction, once
// the partition's last stable offset shows their markers are written:
// the partition then ends in a record every read_committed reader gets.
//
// A mark matters only where writes stop: goka ends a recovery at any
// record at or past the high watermark it began with, so while
// transactions keep writing a partition the next one's records end it.
// A partition is marked once no transaction has written it for
// markQuiet, and under steady load not at all: each round costs the
// brokers a list of end offsets, lists of last stable offsets, their
// metadata and a produce, and one every commit interval was a fifth of
// the processors' requests. The marks of one round cover every
// transaction that ended before it began; a partition whose last record
// is already this instance's mark gets none. A stop marks what is owed
// at once. Readers pass marks over; compaction drops them.
type viewMarks struct {
	opts   []kgo.Opt
	topics []string
	log    *slog.Logger
	group  string
	// stableWait bounds how long a round waits for a transaction to end.
	stableWait time.Duration

	mu sync.Mutex
	// owed holds when a transaction last wrote each partition owed a
	// mark.
	owed map[int32]time.Time
	wake chan struct{}
	// last is the offset of the last mark written per topic and
	// partition; only the round loop touches it.
	last map[string]map[int32]int64
}

// Bounds of a round of marks.
const (
	// markQuiet is how long no transaction may write a partition before
	// it is marked: the longest a view started on a partition that has
	// just gone quiet waits for its recovery to end, beyond the round.
	markQuiet = time.Second
	// markStableBackoff is how often a round asks whether the markers of
	// the transactions it covers are written: they follow the end of a
	// transaction by a few milliseconds.
	markStableBackoff = 20 * time.Millisecond
	// markRetry is the wait before a failed round is tried again.
	markRetry = time.Second
	// markStopTimeout bounds how long a stop waits for the marks owed:
	// a round takes milliseconds when the brokers answer.
	markStopTimeout = 5 * time.Second
)

// newViewMarks marks topics; a round waits for a transaction up to
// stableWait (the transaction timeout: a partition whose transaction is
// still open then, a previous owner's, gets its mark from the transaction
// that writes it next, or from the instance it is assigned to next).
func newViewMarks(group string, topics []string, log *slog.Logger, stableWait time.Duration, opts []kgo.Opt) *viewMarks {
	return &viewMarks{opts: opts, topics: topics, log: log, group: group, stableWait: stableWait,
		owed: map[int32]time.Time{}, wake: make(chan struct{}, 1), last: map[string]map[int32]int64{}}
}

// owe asks for a mark on partitions ps of the topics, after whatever
// transaction of them has ended by the time they are quiet. It never
// blocks.
func (m *viewMarks) owe(ps ...int32) {
	if len(ps) == 0 {
		return
	}
	now := time.Now()
	m.mu.Lock()
	for _, p := range ps {
		m.owed[p] = now
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// start writes the marks owed until the returned stop is called; stop
// writes what is owed by then (a clean stop leaves no partition ending in
// a marker), within markStopTimeout.
func (m *viewMarks) start() (stop func(), err error) {
	cl, err := kgo.NewClient(append(slices.Clone(m.opts), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return nil, fmt.Errorf("group %s: the view marks' producer: %w", m.group, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopping := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.run(ctx, cl, stopping)
	}()
	return func() {
		close(stopping)
		timer := time.AfterFunc(markStopTimeout, cancel)
		<-done
		timer.Stop()
		cancel()
		cl.Close()
	}, nil
}

// run writes rounds of marks as partitions owed one go quiet, until
// stopping is closed, when it marks everything owed, or ctx ends.
func (m *viewMarks) run(ctx context.Context, cl *kgo.Client, stopping <-chan struct{}) {
	adm := kadm.NewClient(cl)
	quiet := time.NewTimer(markQuiet)
	defer quiet.Stop()
	for {
		final := false
		select {
		case <-stopping:
			final = true
		default:
		}
		ps, next := m.take(time.Now(), final)
		if len(ps) > 0 {
			if err := m.round(ctx, cl, adm, ps); err != nil {
				if ctx.Err() != nil {
					return
				}
				if final {
					// A stop does not wait out an outage: the instance
					// that takes the partitions over marks them.
					m.log.Warn("writing view marks failed while stopping", "group", m.group, "partitions", ps, "err", err)
					return
				}
				m.log.Warn("writing view marks failed; tried again", "group", m.group, "partitions", ps, "err", err)
				m.oweAgain(ps)
				select {
				case <-ctx.Done():
					return
				case <-time.After(markRetry):
				}
			}
			continue
		}
		if final {
			return
		}
		var due <-chan time.Time
		if !next.IsZero() {
			quiet.Reset(time.Until(next))
			due = quiet.C
		}
		select {
		case <-ctx.Done():
			return
		case <-stopping:
		case <-m.wake:
		case <-due:
		}
	}
}

// take returns the partitions owed a mark that have been quiet for
// markQuiet at now (all of them when all), sorted, and forgets them;
// next is when the earliest of the others will have been, zero when
// none is left.
func (m *viewMarks) take(now time.Time, all bool) (ps []int32, next time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, wrote := range m.owed {
		due := wrote.Add(markQuiet)
		if all || !due.After(now) {
			ps = append(ps, p)
			delete(m.owed, p)
		} else if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	slices.Sort(ps)
	return ps, next
}

// oweAgain owes the marks of a failed round again, at once once tried
// again: a partition written since keeps its later time.
func (m *viewMarks) oweAgain(ps []int32) {
	past := time.Now().Add(-markQuiet)
	m.mu.Lock()
	for _, p := range ps {
		if _, written := m.owed[p]; !written {
			m.owed[p] = past
		}
	}
	m.mu.Unlock()
}

// markAt is a partition owed a mark after offset after: its end when the
// round began.
type markAt struct {
	topic     string
	partition int32
	after     int64
}

// round writes one mark to each topic's partitions ps once the
// transactions that wrote it by the time the round began have ended: once
// its last stable offset passed the offset before its end then (a mark
// written earlier may lie among the records of a transaction that was
// still open, before its marker: the end must be read after the
// transaction ended). A partition that still ends in this instance's
// last mark gets none.
func (m *viewMarks) round(ctx context.Context, cl *kgo.Client, adm *kadm.Client, ps []int32) error {
	ends, err := adm.ListEndOffsets(ctx, m.topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("end offsets: %w", err)
	}
	var owed []markAt
	for _, t := range m.topics {
		for _, p := range ps {
			if end, ok := ends.Lookup(t, p); ok && end.Offset > 0 {
				owed = append(owed, markAt{t, p, end.Offset - 1})
			}
		}
	}
	deadline := time.Now().Add(m.stableWait)
	for len(owed) > 0 {
		stable, err := adm.ListCommittedOffsets(ctx, m.topics...)
		if err == nil {
			err = stable.Error()
		}
		if err != nil {
			return fmt.Errorf("last stable offsets: %w", err)
		}
		var ready []*kgo.Record
		owed = slices.DeleteFunc(owed, func(w markAt) bool {
			lso, ok := stable.Lookup(w.topic, w.partition)
			if !ok || lso.Offset <= w.after {
				return false // a transaction that began by then is open
			}
			// Already ending in this instance's mark, with nothing after
			// it but an open transaction (whose end owes its own mark)?
			// A marker written after the mark would have moved the last
			// stable offset past it.
			if last, marked := m.last[w.topic][w.partition]; !marked || last != w.after || lso.Offset != w.after+1 {
				ready = append(ready, &kgo.Record{Topic: w.topic, Partition: w.partition, Key: []byte{}})
			}
			return true
		})
		if len(ready) > 0 {
			if err := cl.ProduceSync(ctx, ready...).FirstErr(); err != nil {
				return fmt.Errorf("producing: %w", err)
			}
		}
		for _, r := range ready {
			if m.last[r.Topic] == nil {
				m.last[r.Topic] = map[int32]int64{}
			}
			m.last[r.Topic][r.Partition] = r.Offset
		}
		if len(owed) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			m.log.Info("a transaction stayed open on partitions owed a view mark; the next transaction that writes them marks them",
				"group", m.group, "partitions", owed)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(markStableBackoff):
		}
	}
	return nil
}

// IsViewMark reports whether a record of a marked topic is a view mark: a
// tombstone of the empty key, which no entity has. Readers pass it over.
func IsViewMark(rec *kgo.Record) bool { return len(rec.Key) == 0 && rec.Value == nil }
