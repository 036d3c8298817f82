package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/record"
)

// tail reads, as a read_committed reader such as the sink does, the
// outcomes of the warm-up stream (only counted) and the outcomes and
// state of the measured one (kept for the check). An event counts as
// decided when its outcome is visible there: for a transactional
// contender, once its transaction committed.
type tail struct {
	cl              *kgo.Client
	warmOutcomes    string
	outcomes, state string
	warmed          int
	decided, states []*kgo.Record
}

func newTail(brokers []string, warmup, measure string) (*tail, error) {
	w, m := naming.Prefixes{}.For(warmup), naming.Prefixes{}.For(measure)
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers},
		kgo.ConsumeTopics(w.Outcomes, m.Outcomes, m.State),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A poll hands over what arrived at once; the rate is read off
		// the time each batch became visible.
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	return &tail{cl: cl, warmOutcomes: w.Outcomes, outcomes: m.Outcomes, state: m.State}, nil
}

// poll waits up to wait for records and files them; it reports whether
// any arrived.
func (t *tail) poll(ctx context.Context, wait time.Duration) (bool, error) {
	pollCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	fetches := t.cl.PollFetches(pollCtx)
	var err error
	fetches.EachError(func(topic string, p int32, e error) {
		if pollCtx.Err() == nil && err == nil {
			err = fmt.Errorf("reading %s[%d]: %w", topic, p, e)
		}
	})
	if err != nil {
		return false, err
	}
	n := 0
	fetches.EachRecord(func(r *kgo.Record) {
		n++
		switch r.Topic {
		case t.warmOutcomes:
			t.warmed++
		case t.outcomes:
			t.decided = append(t.decided, r)
		case t.state:
			// The processors' marks for goka's view hold no state.
			if !record.IsViewMark(r.Key, r.Value) {
				t.states = append(t.states, r)
			}
		}
	})
	return n > 0, ctx.Err()
}

// drain reads until nothing more arrives for idle.
func (t *tail) drain(ctx context.Context, idle time.Duration) error {
	for {
		got, err := t.poll(ctx, idle)
		if err != nil {
			return err
		}
		if !got {
			return nil
		}
	}
}

func (t *tail) close() { t.cl.Close() }

// sample is one reading of the clocks that a measured window spans.
type sample struct {
	at      time.Time
	decided int
	cpu     time.Duration // the contender's
	broker  time.Duration // the broker's, 0 without -broker-pid
	reader  time.Duration // this process's: the reader timing the run
}

func takeSample(decided, pid, brokerPID int) (sample, error) {
	s := sample{at: time.Now(), decided: decided}
	var err error
	if s.cpu, err = procstat.CPU(pid); err != nil {
		return s, err
	}
	if s.reader, err = procstat.CPU(os.Getpid()); err != nil {
		return s, err
	}
	if brokerPID > 0 {
		if s.broker, err = procstat.CPU(brokerPID); err != nil {
			return s, fmt.Errorf("the broker's CPU time: %w", err)
		}
	}
	return s, nil
}
