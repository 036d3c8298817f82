package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// syncBuffer is written by several services at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `dev --demo` on the embedded broker shows outcomes and fills ClickHouse.
func TestDevDemoShowsOutcomesAndFillsClickHouse(t *testing.T) {
	chAddr := testenv.ClickHouse(t)
	cfg, err := config.Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.ClickHouse.Addr = chAddr
	cfg.ClickHouse.Database = testenv.UniqueName("dg_dev")
	cfg.ClickHouse.BatchPeriod = 100 * time.Millisecond

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- dev(ctx, cfg, devOptions{Demo: true, Out: &out, Log: slog.New(slog.DiscardHandler), SummaryEvery: 200 * time.Millisecond})
	}()
	conn, err := sinkch.Open(ctx, cfg.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+cfg.ClickHouse.Database)
		conn.Close()
	}()
	// Its own loop rather than testenv.Poll: it also watches dev stop
	// early, and stopping dev on Poll's shorter period made the test's
	// teardown take about two minutes in some runs after the crash test.
	for {
		var rows uint64
		_ = conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.events WHERE outcome = 'applied'", cfg.ClickHouse.Database)).Scan(&rows)
		text := out.String()
		if rows > 0 && strings.Contains(text, "outcomes last") && strings.Contains(text, "outcome  applied") {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("dev stopped early: %v\n%s", err, text)
		case <-ctx.Done():
			t.Fatalf("no outcomes within the deadline; output:\n%s", text)
		case <-time.After(200 * time.Millisecond):
		}
	}
	text := out.String()
	for _, want := range []string{"webhooks:  POST http://127.0.0.1:", demoSecret, "ClickHouse at " + chAddr} {
		if !strings.Contains(text, want) {
			t.Errorf("banner lacks %q:\n%s", want, text)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev did not stop cleanly: %v", err)
	}
}

func TestDisorderKeepsEveryDeliveryAndOnlyRepeats(t *testing.T) {
	rng := newTestRand()
	history := presenceHistory(rng, "u", 10, 50)
	got := disorder(rng, history, 0.5)
	count := map[string]int{}
	for _, d := range got {
		count[d.ID]++
	}
	for _, d := range history {
		if n := count[d.ID]; n < 1 || n > 2 {
			t.Fatalf("delivery %s appears %d times", d.ID, n)
		}
	}
	if len(count) != len(history) {
		t.Fatalf("%d distinct ids, want %d", len(count), len(history))
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }
