package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
)

// tail prints the first outcomes one per line, then counts by outcome, so
// the decisions are visible without any other tool.
type tail struct {
	conn  kafka.Conn
	cfg   *config.Config
	out   io.Writer
	every time.Duration
}

// firstOutcomes are printed one per line before switching to summaries.
const firstOutcomes = 12

func (t *tail) Name() string { return "dev outcome printer" }

func (t *tail) Run(ctx context.Context) error {
	var names []string
	for _, s := range t.cfg.StreamNames() {
		names = append(names, t.cfg.Kafka.Naming().For(s).Outcomes)
	}
	// Committed outcomes only: a processor's aborted transaction shows nothing.
	cl, err := kafka.NewClient(t.conn, kgo.ConsumeTopics(names...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	printed := 0
	window := map[string]int{}
	total := map[string]int{}
	tick := time.NewTicker(t.every)
	defer tick.Stop()
	for {
		pollCtx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		fetches := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		fetches.EachRecord(func(r *kgo.Record) {
			var o record.Outcome
			if json.Unmarshal(r.Value, &o) != nil {
				return
			}
			window[string(o.Outcome)]++
			total[string(o.Outcome)]++
			if printed < firstOutcomes {
				printed++
				fmt.Fprintf(t.out, "outcome  %-9s %s key=%s version=%d event=%s%s\n", o.Outcome, o.Stream, o.Key, o.Version, o.EventID, gapNote(o))
			}
		})
		select {
		case <-tick.C:
			if len(window) > 0 {
				fmt.Fprintf(t.out, "outcomes last %s: %s | total: %s\n", t.every, counts(window), counts(total))
				clear(window)
			}
		default:
		}
	}
}

func gapNote(o record.Outcome) string {
	if o.Gap > 0 {
		return fmt.Sprintf(" gap=%d", o.Gap)
	}
	return ""
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
