package clickhouse_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"

	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// The sink's insert path as Run drives it (decode each record, build the
// column blocks, one INSERT per batch of the default 50,000 rows, the next
// batch decoded and streamed while one is written) next to
// clickhouse-client inserting the same rows in Native format into the same
// table, in one run:
//
//	go test -run '^$' -bench SinkInsert -benchtime 3x ./sinks/clickhouse/
//
// Each side starts once the server's merges have settled. It reports
// sink_rows/s, client_rows/s, their ratio, the heap the sink took above
// the records, and CPU per row of the sink and of the server for each side.
func BenchmarkSinkInsertVsClickHouseClient(b *testing.B) {
	const rows = 500_000
	ctx := testenv.Context(b, 30*time.Minute)
	conn, cfg := migratedDatabase(b, ctx)
	client, err := exec.LookPath("clickhouse-client")
	if err != nil {
		b.Skip("clickhouse-client is not installed")
	}
	host, port, err := net.SplitHostPort(cfg.ClickHouse.Addr)
	if err != nil {
		b.Fatal(err)
	}
	// The Native rows live in a file, out of the heap the benchmark
	// measures.
	native := filepath.Join(b.TempDir(), "events.native")
	clickhouseClient := func(query string, stdin, stdout *os.File) {
		cmd := exec.CommandContext(ctx, client, "--host", host, "--port", port, "--query", query)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if stdin != nil {
			cmd.Stdin = stdin
		}
		if stdout != nil {
			cmd.Stdout = stdout
		}
		if err := cmd.Run(); err != nil {
			b.Fatalf("clickhouse-client %s: %v\n%s", query, err, stderr.String())
		}
	}
	ops := telemetry.NewOps()
	sink := sinkch.New(sinkch.Options{Config: cfg, Conn: conn, Ops: ops})
	// One pipeline for all rounds, as Run keeps one: its buffers are grown
	// in the first round and reused after.
	pipeline := sink.NewPipeline()
	batch := cfg.ClickHouse.BatchRows
	topic := naming.Prefixes{}.For("presence").Outcomes
	columns := "stream, entity_key, event_id, event_type, version, outcome, reason, gap, buffer_depth, occurred_at_ms, " +
		"received_at_ms, processed_at_ms, processed_at, `topic`, `partition`, `offset`, input_partition, input_offset, payload"

	var sinkTime, clientTime, sinkCPU, sinkServerCPU, clientServerCPU time.Duration
	// sinkHeap is the most heap the sink took above the records it was
	// handed, garbage not yet collected included (Run holds the records
	// too: one batch gathering, one in flight).
	var sinkHeap uint64
	b.ResetTimer()
	for iter := range b.N {
		// The sink: fresh offsets each round, or it would skip them as held;
		// batches of batch_rows, as Run makes them under load.
		var chunks [][]*kgo.Record
		for from := 0; from < rows; from += batch {
			chunks = append(chunks, outcomeRecords(topic, int64(iter*rows+from), min(batch, rows-from)))
		}
		mergesSettled(b, ctx, conn, cfg.ClickHouse.Database)
		runtime.GC()
		base := heapObjects()
		sampled := make(chan uint64)
		stopSampling := make(chan struct{})
		go func() {
			var peak uint64
			for {
				peak = max(peak, heapObjects())
				select {
				case <-stopSampling:
					sampled <- peak
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		start, cpu, server := time.Now(), testenv.ProcessCPU(b), serverCPU(b, ctx, conn)
		if err := pipeline.Insert(ctx, chunks); err != nil {
			b.Fatal(err)
		}
		sinkTime += time.Since(start)
		sinkCPU += testenv.ProcessCPU(b) - cpu
		sinkServerCPU += serverCPU(b, ctx, conn) - server
		close(stopSampling)
		if peak := <-sampled; peak > base {
			sinkHeap = max(sinkHeap, peak-base)
		}
		chunks = nil
		if iter == 0 {
			// The same rows as Native, from what the sink wrote.
			out, err := os.Create(native)
			if err != nil {
				b.Fatal(err)
			}
			clickhouseClient(fmt.Sprintf("SELECT %s FROM %s.events FORMAT Native", columns, cfg.ClickHouse.Database), nil, out)
			out.Close()
		}
		in, err := os.Open(native)
		if err != nil {
			b.Fatal(err)
		}
		mergesSettled(b, ctx, conn, cfg.ClickHouse.Database)
		start, server = time.Now(), serverCPU(b, ctx, conn)
		clickhouseClient(fmt.Sprintf("INSERT INTO %s.events (%s) FORMAT Native", cfg.ClickHouse.Database, columns), in, nil)
		clientTime += time.Since(start)
		clientServerCPU += serverCPU(b, ctx, conn) - server
		in.Close()
	}
	b.StopTimer()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+cfg.ClickHouse.Database+".events").Scan(&n); err != nil {
		b.Fatal(err)
	}
	if want := uint64(2 * rows * b.N); n != want {
		b.Fatalf("events has %d rows, want %d", n, want)
	}
	sinkRate := float64(rows*b.N) / sinkTime.Seconds()
	clientRate := float64(rows*b.N) / clientTime.Seconds()
	b.ReportMetric(sinkRate, "sink_rows/s")
	b.ReportMetric(clientRate, "client_rows/s")
	b.ReportMetric(sinkRate/clientRate, "ratio")
	b.ReportMetric(float64(sinkHeap)/(1<<20), "sink_heap_MiB")
	// CPU per row, steadier than rates on a shared machine: the sink's own
	// process, and the server's query threads for each side's INSERTs.
	perRow := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(rows*b.N) }
	b.ReportMetric(perRow(sinkCPU), "sink_cpu_µs/row")
	b.ReportMetric(perRow(sinkServerCPU), "sink_server_cpu_µs/row")
	b.ReportMetric(perRow(clientServerCPU), "client_server_cpu_µs/row")
}

// mergesSettled waits until the server merges no parts of database: the
// merges the sink's parts set off would otherwise run during the
// client's INSERT, and the client's during the sink's next round.
func mergesSettled(b *testing.B, ctx context.Context, conn driver.Conn, database string) {
	testenv.WaitFor(b, ctx, "the merges to settle", func() bool {
		var merges uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.merges WHERE database = ?", database).Scan(&merges); err != nil {
			b.Fatal(err)
		}
		return merges == 0
	})
}

// serverCPU is the user and system time ClickHouse's query threads have
// used since it started.
func serverCPU(b *testing.B, ctx context.Context, conn driver.Conn) time.Duration {
	var us uint64
	err := conn.QueryRow(ctx, "SELECT sum(value) FROM system.events WHERE event IN ('UserTimeMicroseconds', 'SystemTimeMicroseconds')").Scan(&us)
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(us) * time.Microsecond
}

// heapObjects is the heap the process holds in objects, live or garbage
// not yet collected: right after runtime.GC, only the live ones.
func heapObjects() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// outcomeRecords returns n outcome records as the processors write them,
// at consecutive offsets of partition 0 from first.
func outcomeRecords(topic string, first int64, n int) []*kgo.Record {
	out := make([]*kgo.Record, n)
	now := time.Now().UnixMilli()
	for i := range out {
		offset := first + int64(i)
		user := fmt.Sprintf("user-%06d", offset%50_000)
		id := fmt.Sprintf("%s-%012d", user, offset)
		value, _ := json.Marshal(record.Outcome{
			Stream: "presence", Key: user, EventID: id, EventType: "presence.changed",
			Version: offset, Outcome: record.Applied, Gap: 1,
			OccurredAtMs: now - 250, ReceivedAtMs: now - 200, ProcessedAtMs: now,
			InputPartition: 3, InputOffset: offset,
			Payload: testenv.Presence{EventID: id, User: user, Version: offset}.Body(),
		})
		out[i] = &kgo.Record{Topic: topic, Partition: 0, Offset: offset, Value: value}
	}
	return out
}
