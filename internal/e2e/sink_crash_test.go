package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
)

// Design §6, issue 6: 100,000 outcome records while `driftguard sink` is
// killed with SIGKILL at random points at least five times and restarted;
// then events holds every record exactly once.
func TestSinkKilledRepeatedlyWritesEveryOutcomeOnce(t *testing.T) {
	const records, kills = 100_000, 6
	ctx := testenv.Context(t, 6*time.Minute)
	dir := t.TempDir()
	stream := testenv.UniqueName("crash")
	configFile := filepath.Join(dir, "driftguard.yaml")
	// A group of its own with the shortest session the broker allows: a
	// killed sink's partitions move to its successor after 6 s.
	yaml := fmt.Sprintf("clickhouse:\n  batch_period: 300ms\n  consumer_group: %s\n  session_timeout: 6s\n"+
		"streams:\n  %s:\n    policy: latest\n    key: /user_id\n    event_id: /event_id\n    type: {fixed: presence.changed}\n"+
		"    version: /sequence_number\n    schemas: {presence.changed: streams/presence.schema.json}\n    limits: {partitions: 6}\n",
		stream+"-sink", stream)
	if err := os.WriteFile(configFile, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	brokers := testenv.Kafka(t)
	cfg, err := config.Load(configFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kafka.Brokers = brokers
	cfg.ClickHouse.Addr = testenv.ClickHouse(t)
	cfg.ClickHouse.Database = testenv.UniqueName("dg_crash")
	conn, cl := prepare(t, ctx, cfg, brokers)
	t.Cleanup(cl.Close)
	bin := buildDriftguard(t, dir)

	// The records go in while the sink dies and comes back, in rounds
	// spread over the kills.
	outcomes := topics.For(stream).Outcomes
	produced := make(chan error, 1)
	go func() {
		const rounds = 40
		const round = records / rounds
		for r := range rounds {
			for i := r * round; i < (r+1)*round; i++ {
				key := fmt.Sprintf("u%03d", i%500)
				value, _ := json.Marshal(envelope.Outcome{Stream: stream, Key: key, EventID: fmt.Sprintf("e%06d", i),
					EventType: "presence.changed", Version: int64(i), Outcome: envelope.OutcomeApplied,
					ProcessedAtMs: time.Now().UnixMilli(), Payload: json.RawMessage(`{"presence":"ONLINE"}`)})
				cl.Produce(ctx, &kgo.Record{Topic: outcomes, Key: []byte(key), Value: value}, nil)
			}
			if err := cl.Flush(ctx); err != nil {
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

	rows := func() uint64 {
		var n uint64
		_ = conn.QueryRow(ctx, "SELECT count() FROM "+cfg.ClickHouse.Database+".events").Scan(&n)
		return n
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "sink", "--config", configFile)
		cmd.Env = append(os.Environ(),
			"DRIFTGUARD_KAFKA_BROKERS="+strings.Join(brokers, ","),
			"DRIFTGUARD_CLICKHOUSE_ADDR="+cfg.ClickHouse.Addr,
			"DRIFTGUARD_CLICKHOUSE_DATABASE="+cfg.ClickHouse.Database,
			"DRIFTGUARD_TELEMETRY_ADDR=127.0.0.1:0",
			"DRIFTGUARD_LOG_LEVEL=warn")
		cmd.Stdout, cmd.Stderr = testWriter{t}, testWriter{t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		return cmd
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))
	for k := range kills {
		before := rows()
		sink := start()
		// Each incarnation makes progress, then dies at a random instant
		// after: mid-gather, mid-insert, or between insert and commit.
		waitFor(t, ctx, fmt.Sprintf("incarnation %d to insert", k+1), func() bool { n := rows(); return n > before || n >= records })
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		peak := peakRSS(sink.Process.Pid)
		if err := sink.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = sink.Process.Wait()
		t.Logf("kill %d: %d rows before it, %d after; sink peak RSS %s", k+1, before, rows(), peak)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	last := start()
	waitFor(t, ctx, "every record in events", func() bool { return rows() >= records })
	// A few more flush periods: a doubled row would show up now.
	time.Sleep(time.Second)
	t.Logf("last incarnation peak RSS %s", peakRSS(last.Process.Pid))

	var total, positions uint64
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExact(`topic`, `partition`, `offset`) FROM "+cfg.ClickHouse.Database+".events").
		Scan(&total, &positions); err != nil {
		t.Fatal(err)
	}
	if total != records || positions != records {
		t.Fatalf("events has %d rows for %d source positions, want %d of each", total, positions, records)
	}
	var ids uint64
	if err := conn.QueryRow(ctx, "SELECT uniqExact(event_id) FROM "+cfg.ClickHouse.Database+".events").Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if ids != records {
		t.Fatalf("events has %d distinct event ids, want %d", ids, records)
	}
}

// peakRSS is a process's peak resident memory as Linux reports it.
func peakRSS(pid int) string {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
