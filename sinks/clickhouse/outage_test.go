package clickhouse_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/chlocal"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"

	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// The outage is this long: the "ClickHouse stopped for 30 s".
const outage = 30 * time.Second

// ClickHouse stopped (SIGKILL) for 30 s while records keep coming, then
// started again on the same data: the sink reports not ready, holds its
// batch and stops consuming, and once the server is back it becomes ready
// and every record lands exactly once, without a restart of the sink. The
// server is a private one, so other tests keep the shared one.
func TestSinkRidesOutClickHouseStoppedFor30s(t *testing.T) {
	ctx := testenv.Context(t, 3*time.Minute)
	testenv.ClickHouse(t) // the shared server's presence says clickhouse-server is installed
	srv, err := chlocal.Start(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	stream := testenv.UniqueName("outage")
	presence := testenv.Shipped(t, "presence")
	presence.Name = stream
	cfg := testenv.OnlyStream(t, presence)
	cfg.Kafka.Brokers = testenv.Kafka(t)
	cfg.ClickHouse.Addr = srv.Addr
	cfg.ClickHouse.BatchPeriod = 200 * time.Millisecond
	cfg.ClickHouse.ConsumerGroup = stream + "-sink"
	conn, err := sinkch.Open(ctx, cfg.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := sinkch.Migrate(ctx, conn, cfg.ClickHouse, nil); err != nil {
		t.Fatal(err)
	}
	cl := testenv.Topics(t, ctx, cfg, cfg.Kafka.Brokers)
	t.Cleanup(cl.Close)

	ops := telemetry.NewOps()
	sinkCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- service.RunAll(sinkCtx, sinkch.New(sinkch.Options{Config: cfg, Conn: conn, Logger: testenv.Logger(t), Ops: ops}))
	}()
	defer func() { stop(); <-done }()

	// Load: 500 records every 250 ms, before, during and after the outage.
	const total = 100 * 500
	outcomes := naming.Prefixes{}.For(stream).Outcomes
	var produced atomic.Int64
	producing := make(chan error, 1)
	go func() {
		for i := range total {
			key := fmt.Sprintf("u%02d", i%60)
			value, _ := json.Marshal(record.Outcome{Stream: stream, Key: key, EventID: fmt.Sprintf("e%d", i),
				Outcome: record.Applied, Version: int64(i), ProcessedAtMs: time.Now().UnixMilli()})
			cl.Produce(ctx, &kgo.Record{Topic: outcomes, Key: []byte(key), Value: value}, nil)
			if i%500 == 499 {
				if err := cl.Flush(ctx); err != nil {
					producing <- err
					return
				}
				produced.Store(int64(i + 1))
				time.Sleep(250 * time.Millisecond)
			}
		}
		producing <- nil
	}()

	rows := func() uint64 {
		var n uint64
		_ = conn.QueryRow(ctx, "SELECT count() FROM "+cfg.ClickHouse.Database+".events").Scan(&n)
		return n
	}
	testenv.WaitFor(t, ctx, "the first rows", func() bool { return rows() >= 2000 })

	srv.Kill()
	stoppedAt := time.Now()
	before := produced.Load()
	testenv.WaitFor(t, ctx, "the sink to report not ready", func() bool {
		err := ops.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "clickhouse")
	})
	time.Sleep(time.Until(stoppedAt.Add(outage)))
	if during := produced.Load() - before; during < 10_000 {
		t.Fatalf("only %d records were produced during the outage; the load must go on", during)
	}
	if err := srv.Restart(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("ClickHouse was down for %s", time.Since(stoppedAt).Round(time.Second))
	testenv.WaitFor(t, ctx, "the sink to report ready again", func() bool { return ops.Ready(ctx) == nil })
	if err := <-producing; err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "every record in events", func() bool { return rows() >= total })
	time.Sleep(2 * cfg.ClickHouse.BatchPeriod) // a doubled row would show by now
	var n, positions uint64
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExact(`topic`, `partition`, `offset`) FROM "+cfg.ClickHouse.Database+".events").
		Scan(&n, &positions); err != nil {
		t.Fatal(err)
	}
	if n != total || positions != total {
		t.Fatalf("%d rows for %d positions, want %d each", n, positions, total)
	}

	// The metrics tell the same story. A block that landed while the sink
	// saw an error is not counted as written, so rows may fall short.
	sums := sinkMetricSums(t, ops)
	t.Logf("sink metrics: %v", sums)
	if rows := sums["driftguard_sink_rows_total"]; rows <= 0 || rows > total {
		t.Errorf("driftguard_sink_rows_total %v, want between 1 and %d", rows, total)
	}
	if sums["driftguard_sink_batches_total"] < 2 || sums["driftguard_sink_insert_seconds"] != sums["driftguard_sink_batches_total"] {
		t.Errorf("%v batches and %v timed inserts, want the same number, at least 2", sums["driftguard_sink_batches_total"], sums["driftguard_sink_insert_seconds"])
	}
	if sums["driftguard_sink_retries_total"] < 1 {
		t.Error("no retries counted through a 30 s outage")
	}
	if lag, ok := sums["driftguard_sink_consumer_lag"]; !ok || lag != 0 {
		t.Errorf("consumer lag %v (reported: %v) once every record is in, want 0", lag, ok)
	}
}
