package processors

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// startTester runs the processor of s on goka's tester until the test ends.
func startTester(t *testing.T, s *config.Stream, opts Options) (*tester.Tester, *Processor, naming.Topics) {
	t.Helper()
	tt := tester.New(t)
	proc, err := New(nil, s, opts, goka.WithTester(tt))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	})
	// A visit before the partitions run finds no table to iterate.
	if err := proc.WaitForReadyContext(testenv.Context(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	return tt, proc, proc.h.names
}

// rawReader is a topic's records in order: goka's tester's QueueTracker,
// or the shipped runtime's tracker.
type rawReader interface {
	NextRaw() (key string, value []byte, ok bool)
}

func outcomes(t testenv.Fataler, qt rawReader) []record.Outcome {
	return records[record.Outcome](t, qt)
}

// records decodes every record left on qt.
func records[T any](t testenv.Fataler, qt rawReader) []T {
	t.Helper()
	var out []T
	for _, raw := range rawRecords(qt) {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal("record ", string(raw), ": ", err)
		}
		out = append(out, v)
	}
	return out
}

// rawRecords takes every record left on a tracker.
func rawRecords(qt rawReader) [][]byte {
	var out [][]byte
	for {
		_, raw, ok := qt.NextRaw()
		if !ok {
			return out
		}
		out = append(out, raw)
	}
}
