// Package testenv finds the real services the integration tests run
// against. The test task starts Apache Kafka and ClickHouse on loopback and
// names them in DRIFTGUARD_TEST_KAFKA and DRIFTGUARD_TEST_CLICKHOUSE, and
// installs Chromium for the browser tests; a quick `go test ./...` without
// them skips those tests with a message, and
// DRIFTGUARD_TEST_REQUIRE=1 (set by the test task and CI) turns every such
// skip into a failure, so a green CI run means the real services ran.
//
// It also holds what the tests of every package share, each once: presence
// webhooks, shipped streams and their topics, config files, JSON
// comparison and waits, and a Kafka proxy that injects network faults
// (held acks, a paused network) between the broker and clients in other
// processes.
package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
)

// Environment variables the test task sets.
const (
	EnvKafka      = "DRIFTGUARD_TEST_KAFKA"
	EnvClickHouse = "DRIFTGUARD_TEST_CLICKHOUSE"
	EnvRequire    = "DRIFTGUARD_TEST_REQUIRE"
)

// missing skips, or fails when the run requires real services.
func missing(t testing.TB, what, env string) {
	t.Helper()
	Unavailable(t, fmt.Sprintf("%s not available: set %s (the test task `go tool task test` starts it)", what, env))
}

// Unavailable skips with msg, or fails when the run requires everything
// (EnvRequire=1).
func Unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(EnvRequire) == "1" {
		t.Fatal(msg + "; " + EnvRequire + "=1 forbids skipping")
	}
	t.Skip(msg)
}

// ChromiumPath is where Debian's chromium package puts the browser.
const ChromiumPath = "/usr/bin/chromium"

// Chromium returns the path of the Chromium the browser tests drive: the
// test task installs Debian's package (scripts/chromium.sh), a quick run
// without it skips them.
func Chromium(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if _, statErr := os.Stat(ChromiumPath); statErr != nil {
			Unavailable(t, "Chromium not installed: apt-get install chromium (the test task `go tool task test` installs it)")
		}
		path = ChromiumPath
	}
	return path
}

// Kafka returns the real broker's addresses.
func Kafka(t testing.TB) []string {
	t.Helper()
	v := os.Getenv(EnvKafka)
	if v == "" {
		missing(t, "Apache Kafka", EnvKafka)
	}
	return strings.Split(v, ",")
}

// Fake starts an embedded kfake broker for the test and returns its address.
func Fake(t testing.TB) []string {
	t.Helper()
	return FakeCluster(t).ListenAddrs()
}

// FakeCluster starts an embedded kfake broker for the test and returns it,
// for a test that injects faults or closes it; it closes at the test's end.
func FakeCluster(t testing.TB) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(func(network, _ string) (net.Listener, error) {
		return net.Listen(network, "127.0.0.1:0")
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// OnBothBrokers runs test as two subtests, "kfake" on an embedded broker
// of its own and "kafka" on the real broker (skipped or failed as Kafka
// does): the same code talks to either by address.
func OnBothBrokers(t *testing.T, test func(t *testing.T, brokers []string)) {
	t.Helper()
	t.Run("kfake", func(t *testing.T) { test(t, Fake(t)) })
	t.Run("kafka", func(t *testing.T) { test(t, Kafka(t)) })
}

// ClickHouse returns the real server's native address.
func ClickHouse(t testing.TB) string {
	t.Helper()
	v := os.Getenv(EnvClickHouse)
	if v == "" {
		missing(t, "ClickHouse", EnvClickHouse)
	}
	return v
}

// UniqueName returns a lower-case name unique to this test run, for
// databases and streams that tests share a server with.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s_%x", prefix, time.Now().UnixNano())
}

// Context returns a context that ends with the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Logger returns a logger that writes to the test log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// LogWriter writes to the test log, each write as a line: for a logger, or
// a child process's output. What is written once the test has ended is
// dropped: a goroutine the test left behind (a process it let die
// without stopping, as a crash does) may still log, and the testing
// package panics on a log after the end.
func LogWriter(t testing.TB) io.Writer {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.ended = true
		w.mu.Unlock()
	})
	return w
}

type testWriter struct {
	t     testing.TB
	mu    sync.Mutex
	ended bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// EnvKafkaPID names the real broker's process id, for fault tests that
// pause (SIGSTOP) and resume (SIGCONT) it.
const EnvKafkaPID = "DRIFTGUARD_TEST_KAFKA_PID"

// KafkaPID returns the real broker's process id.
func KafkaPID(t testing.TB) int {
	t.Helper()
	v := os.Getenv(EnvKafkaPID)
	if v == "" {
		missing(t, "the Apache Kafka process id", EnvKafkaPID)
	}
	pid, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", EnvKafkaPID, v, err)
	}
	return pid
}

// ProcessCPU is the user and system time this process has used. Benchmarks
// report it per operation next to wall-clock rates, which swing with the
// load of a shared machine while CPU time per operation stays steady.
func ProcessCPU(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Topics creates the topics of cfg's streams on the brokers (with cfg's
// kafka.tls and kafka.sasl) and returns a client of the brokers, with
// opts, for the caller to close.
func Topics(t testing.TB, ctx context.Context, cfg *config.Config, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	_, cl, err := kafka.ConnectClient(cfg, brokers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kafka.EnsureTopics(ctx, cl, cfg, true); err != nil {
		cl.Close()
		t.Fatal(err)
	}
	return cl
}

// ReadTopic returns every record of topic from its start up to the end
// offsets it has when called. Reading to the end offsets, rather than until
// a quiet period, makes "nothing else was written" a fact, not a guess.
func ReadTopic(t testing.TB, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	pending := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			pending[o.Partition] = o.Offset
		}
	})
	var records []*kgo.Record
	for len(pending) > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: partitions not read to their end offsets: %v", topic, pending)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetching %s/%d: %v", topic, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			records = append(records, r)
			if end, ok := pending[r.Partition]; ok && r.Offset+1 >= end {
				delete(pending, r.Partition)
			}
		})
	}
	return records
}

// ReadOutcomes reads n outcome records of topic from its start, as the
// sink does (read_committed), and fails the test when ctx ends first.
func ReadOutcomes(t testing.TB, ctx context.Context, brokers []string, topic string, n int) []record.Outcome {
	t.Helper()
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []record.Outcome
	for len(got) < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d outcomes of %s read, want %d: %+v", len(got), topic, n, got)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			var o record.Outcome
			if err := json.Unmarshal(r.Value, &o); err != nil {
				t.Fatalf("outcome %s/%d/%d: %v", topic, r.Partition, r.Offset, err)
			}
			got = append(got, o)
		})
	}
	return got
}

// Transact writes records in one transaction of cl, a client with a
// transactional id, and commits it, or aborts it unless commit: what the
// processors' transactional writes leave in a topic.
func Transact(t testing.TB, ctx context.Context, cl *kgo.Client, commit bool, records ...*kgo.Record) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		cl.Produce(ctx, r, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}
