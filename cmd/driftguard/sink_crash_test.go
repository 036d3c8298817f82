package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Design §6, issue 6: 100,000 outcome records while `driftguard sink` is
// killed with SIGKILL at random points at least five times and restarted;
// then events holds every record exactly once.
func TestSinkKilledRepeatedlyWritesEveryOutcomeOnce(t *testing.T) {
	const records, kills = 100_000, 6
	ctx := testenv.Context(t, 6*time.Minute)
	h := newSinkHarness(t, ctx, "crash", "  batch_period: 300ms\n")

	// The records go in while the sink dies and comes back, in rounds
	// spread over the kills.
	produced := make(chan error, 1)
	go func() {
		const rounds = 20
		const round = records / rounds
		for r := range rounds {
			if err := h.produce(r*round, (r+1)*round); err != nil {
				produced <- err
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		produced <- nil
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))
	for k := range kills {
		before := h.rows()
		sink := h.start()
		// Each incarnation makes progress, then dies at a random instant
		// after: mid-gather, mid-insert, or between insert and commit.
		testenv.WaitFor(t, ctx, fmt.Sprintf("incarnation %d to insert", k+1), func() bool { n := h.rows(); return n > before || n >= records })
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		peak := peakRSS(sink.Process.Pid)
		sigkill(t, sink)
		t.Logf("kill %d: %d rows before it, %d after; sink peak RSS %s", k+1, before, h.rows(), peak)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	last := h.start()
	testenv.WaitFor(t, ctx, "every record in events", func() bool { return h.rows() >= records })
	// A few more flush periods: a doubled row would show up now.
	time.Sleep(time.Second)
	t.Logf("last incarnation peak RSS %s", peakRSS(last.Process.Pid))

	var total, positions, ids uint64
	if err := h.conn.QueryRow(ctx, "SELECT count(), uniqExact(`topic`, `partition`, `offset`), uniqExact(event_id) FROM "+
		h.cfg.ClickHouse.Database+".events").Scan(&total, &positions, &ids); err != nil {
		t.Fatal(err)
	}
	if total != records || positions != records || ids != records {
		t.Fatalf("events has %d rows for %d source positions and %d event ids, want %d of each", total, positions, ids, records)
	}
	// The view over events counted each block once: a block is written
	// whole or not at all, and never twice.
	var counted uint64
	if err := h.conn.QueryRow(ctx, "SELECT sum(events) FROM "+h.cfg.ClickHouse.Database+".ordering_minute").Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if counted != records {
		t.Fatalf("ordering_minute counts %d events, want %d", counted, records)
	}
}

// The memory of a `driftguard sink` process with the default batch sizes
// while it works through a backlog of 500,000 outcome records:
//
//	go test -run '^$' -bench SinkBacklog -benchtime 1x ./cmd/driftguard
func BenchmarkSinkBacklogMemory(b *testing.B) {
	const records = 500_000
	ctx := testenv.Context(b, 10*time.Minute)
	h := newSinkHarness(b, ctx, "backlog", os.Getenv("SINK_BENCH_CLICKHOUSE"))
	if err := h.produce(0, records); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	sink := h.start()
	testenv.WaitFor(b, ctx, "every record in events", func() bool { return h.rows() >= records })
	took := time.Since(start)
	peak := peakRSS(sink.Process.Pid)
	b.StopTimer()
	b.Logf("sink peak RSS %s; %d records in %s", peak, records, took.Round(time.Millisecond))
	b.ReportMetric(float64(records)/took.Seconds(), "rows/s")
}

// sinkHarness is one stream of its own on the real broker and server,
// written to ClickHouse by `driftguard sink` processes a test can kill.
type sinkHarness struct {
	tb         testing.TB
	ctx        context.Context
	cfg        *config.Config
	configFile string
	bin        string
	conn       driver.Conn
	cl         *kgo.Client
	stream     string
}

// newSinkHarness configures a stream named after prefix, with the given
// extra lines of the clickhouse section, a consumer group of its own and
// the shortest session the broker allows (a killed sink's partitions move
// to its successor after 6 s).
func newSinkHarness(tb testing.TB, ctx context.Context, prefix, clickhouse string) *sinkHarness {
	tb.Helper()
	stream := testenv.UniqueName(prefix)
	yaml := fmt.Sprintf("clickhouse:\n%s  consumer_group: %s\n  session_timeout: 6s\nstreams:\n", clickhouse, stream+"-sink") +
		presenceStreamYAML(stream)
	h := &sinkHarness{tb: tb, ctx: ctx, configFile: testenv.WriteConfig(tb, tb.TempDir(), yaml), stream: stream, bin: buildDriftguard(tb)}
	h.cfg, h.conn, h.cl = loadOnServices(tb, ctx, h.configFile, prefix)
	return h
}

// start runs `driftguard sink` on the harness's config.
func (h *sinkHarness) start() *exec.Cmd {
	h.tb.Helper()
	return startSink(h.tb, h.bin, h.configFile, h.cfg)
}

// produce writes outcome records from to to (exclusive) over 500 keys, as
// the processors write them.
func (h *sinkHarness) produce(from, to int) error {
	recs := make([]*kgo.Record, 0, to-from)
	for i := from; i < to; i++ {
		key := fmt.Sprintf("u%03d", i%500)
		value, err := json.Marshal(record.Outcome{Stream: h.stream, Key: key,
			EventID: fmt.Sprintf("e%06d", i), EventType: "presence.changed", Version: int64(i), Outcome: record.Applied,
			ProcessedAtMs: time.Now().UnixMilli(), Payload: json.RawMessage(`{"presence":"ONLINE","user_id":"` + key + `"}`)})
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: naming.Prefixes{}.For(h.stream).Outcomes, Key: []byte(key), Value: value})
	}
	return h.cl.ProduceSync(h.ctx, recs...).FirstErr()
}

// rows counts events, 0 while ClickHouse cannot say.
func (h *sinkHarness) rows() uint64 {
	var n uint64
	_ = h.conn.QueryRow(h.ctx, "SELECT count() FROM "+h.cfg.ClickHouse.Database+".events").Scan(&n)
	return n
}

// peakRSS is a process's peak resident memory as Linux reports it.
func peakRSS(pid int) string {
	peak, err := procstat.PeakRSS(pid)
	if err != nil {
		return "unknown"
	}
	return mib(peak)
}
