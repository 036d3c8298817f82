package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// processHarness is one stream, defined in an operator's config file,
// decided by real `driftguard process` binaries that a test can kill, with
// the ClickHouse sink running in the test, on the real broker and server.
type processHarness struct {
	*processRunner
	ctx    context.Context
	cfg    *config.Config
	stream string
	conn   driver.Conn
	cl     *kgo.Client
}

// processRunner runs real `driftguard process` binaries for the streams of
// a config file, so a test can kill them.
type processRunner struct {
	t          *testing.T
	configFile string
	streams    []string
	brokers    []string
	bin        string
	dir        string
}

// newProcessRunner builds the binary into dir.
func newProcessRunner(t *testing.T, dir, configFile string, brokers []string, streams ...string) *processRunner {
	t.Helper()
	return &processRunner{t: t, configFile: configFile, streams: streams, brokers: brokers, bin: buildDriftguard(t), dir: dir}
}

// newProcessHarness writes yaml as the operator's config file, defining
// stream, and runs the sink for it into a database named after prefix.
func newProcessHarness(t *testing.T, ctx context.Context, prefix, stream, yaml string) *processHarness {
	t.Helper()
	dir := t.TempDir()
	configFile := testenv.WriteConfig(t, dir, yaml)
	h := &processHarness{ctx: ctx, stream: stream}
	h.cfg, h.conn, h.cl = loadOnServices(t, ctx, configFile, prefix, stream)
	cfg, brokers := h.cfg, h.cfg.Kafka.Brokers
	cfg.ClickHouse.BatchPeriod = 100 * time.Millisecond

	runServices(t, ctx, "sink", sinkch.New(sinkch.Options{Config: cfg, Brokers: brokers, Conn: h.conn, Logger: testenv.Logger(t)}))
	h.processRunner = newProcessRunner(t, dir, configFile, brokers, stream)
	return h
}

// loadOnServices loads the config file, kept to only the named streams
// when there are any, pointed at the real broker and server, with a
// migrated database of its own named after prefix and the streams' topics,
// and returns a client of the broker closed at the end.
func loadOnServices(tb testing.TB, ctx context.Context, configFile, prefix string, only ...string) (*config.Config, driver.Conn, *kgo.Client) {
	tb.Helper()
	return loadOn(tb, ctx, configFile, prefix, testenv.Kafka(tb), only...)
}

// loadOn is loadOnServices on the Kafka cluster of brokers.
func loadOn(tb testing.TB, ctx context.Context, configFile, prefix string, brokers []string, only ...string) (*config.Config, driver.Conn, *kgo.Client) {
	tb.Helper()
	cfg, err := config.Load(configFile, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if len(only) > 0 {
		kept := map[string]*config.Stream{}
		for _, name := range only {
			kept[name] = cfg.Streams[name]
		}
		cfg.Streams = kept
	}
	cfg.Kafka.Brokers = brokers
	cfg.ClickHouse.Addr = testenv.ClickHouse(tb)
	cfg.ClickHouse.Database = testenv.UniqueName("dg_" + prefix)
	conn, cl := prepare(tb, ctx, cfg, cfg.Kafka.Brokers)
	tb.Cleanup(cl.Close)
	return cfg, conn, cl
}

// start runs `driftguard process` for the streams as the named instance,
// as a StatefulSet's pod: its table storage in the named folder and its
// transactional ids after the name (the same name after a kill reuses the
// storage and fences the killed instance's open transactions).
func (h *processRunner) start(name string) *exec.Cmd {
	h.t.Helper()
	return h.startTo(name, testenv.LogWriter(h.t))
}

// startTo is start with the instance's logs going to stderr and env
// added (e.g. another DRIFTGUARD_LOG_LEVEL).
func (h *processRunner) startTo(name string, stderr io.Writer, env ...string) *exec.Cmd {
	h.t.Helper()
	return startDriftguardWith(h.t, testenv.LogWriter(h.t), stderr, h.bin, []string{"process", "--config", h.configFile, "--streams", strings.Join(h.streams, ",")},
		append([]string{"DRIFTGUARD_KAFKA_BROKERS=" + strings.Join(h.brokers, ","),
			"DRIFTGUARD_DATA_DIR=" + filepath.Join(h.dir, name),
			"DRIFTGUARD_INSTANCE_ID=" + name}, env...)...)
}

// startSink runs `driftguard sink` on configFile, pointed at cfg's
// brokers and ClickHouse database.
func startSink(tb testing.TB, bin, configFile string, cfg *config.Config) *exec.Cmd {
	tb.Helper()
	return startSinkTo(tb, testenv.LogWriter(tb), bin, configFile, cfg)
}

// startSinkTo is startSink with the logs going to stderr and env added
// (e.g. an operations port and an admin token).
func startSinkTo(tb testing.TB, stderr io.Writer, bin, configFile string, cfg *config.Config, env ...string) *exec.Cmd {
	tb.Helper()
	return startDriftguardWith(tb, testenv.LogWriter(tb), stderr, bin, []string{"sink", "--config", configFile},
		append([]string{"DRIFTGUARD_KAFKA_BROKERS=" + strings.Join(cfg.Kafka.Brokers, ","),
			"DRIFTGUARD_CLICKHOUSE_ADDR=" + cfg.ClickHouse.Addr,
			"DRIFTGUARD_CLICKHOUSE_DATABASE=" + cfg.ClickHouse.Database}, env...)...)
}

// startDriftguard runs the binary with args and env added to the test's
// environment, its output in the test log, killed at the test's end.
func startDriftguard(tb testing.TB, bin string, args []string, env ...string) *exec.Cmd {
	tb.Helper()
	return startDriftguardTo(tb, testenv.LogWriter(tb), bin, args, env...)
}

// startDriftguardTo is startDriftguard with the standard output going to
// stdout; the logs, on standard error, still go to the test log. Its
// telemetry listens on a free port and it logs warnings and errors only,
// unless env says otherwise.
func startDriftguardTo(tb testing.TB, stdout io.Writer, bin string, args []string, env ...string) *exec.Cmd {
	tb.Helper()
	return startDriftguardWith(tb, stdout, testenv.LogWriter(tb), bin, args, env...)
}

// startDriftguardWith is startDriftguardTo with the logs going to stderr.
func startDriftguardWith(tb testing.TB, stdout, stderr io.Writer, bin string, args []string, env ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(),
		"DRIFTGUARD_TELEMETRY_ADDR=127.0.0.1:0",
		"DRIFTGUARD_LOG_LEVEL=warn"), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

// sigkill ends a process with SIGKILL, as a crash would.
func sigkill(tb testing.TB, cmd *exec.Cmd) {
	tb.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	_, _ = cmd.Process.Wait()
}

// produce writes a body to the stream's input as ingest would, received now.
func (h *processHarness) produce(key string, body []byte) {
	h.t.Helper()
	if err := h.cl.ProduceSync(h.ctx, inputRecord(h.stream, key, body)).FirstErr(); err != nil {
		h.t.Fatal(err)
	}
}

// inputRecord is a body for the stream's input as ingest writes it,
// received now.
func inputRecord(stream, key string, body []byte) *kgo.Record {
	return inputRecordAt(stream, key, body, time.Now().UnixMilli())
}

// inputRecordAt is inputRecord received at receivedMs (unix ms).
func inputRecordAt(stream, key string, body []byte, receivedMs int64) *kgo.Record {
	return &kgo.Record{Topic: naming.Prefixes{}.For(stream).In, Key: []byte(key), Value: body, Headers: []kgo.RecordHeader{
		{Key: record.HeaderReceivedAt, Value: []byte(strconv.FormatInt(receivedMs, 10))},
	}}
}

// count runs a count query whose two %s are the database and the stream.
func (h *processHarness) count(query string) uint64 {
	var n uint64
	_ = h.conn.QueryRow(h.ctx, fmt.Sprintf(query, h.cfg.ClickHouse.Database, h.stream)).Scan(&n)
	return n
}

// presenceStreamYAML is the entry of a config file's streams section that
// defines stream as a presence stream over six partitions.
func presenceStreamYAML(stream string) string {
	return fmt.Sprintf("  %s:\n    policy: latest\n    key: /user_id\n    event_id: /event_id\n    type: {fixed: presence.changed}\n"+
		"    version: /sequence_number\n    occurred_at: /timestamp\n    schemas: {presence.changed: streams/presence.schema.json}\n    limits: {partitions: 6}\n", stream)
}

// buildDriftguard returns the binary, built once for all the tests of the
// run, so a test can kill a real process.
func buildDriftguard(t testing.TB) string {
	return buildBinary(t, "github.com/driftguard/driftguard/cmd/driftguard")
}

// buildBinary returns the binary of the main package pkg, built once for
// all the tests of the run, without the race detector whatever the tests
// run with.
func buildBinary(t testing.TB, pkg string) string {
	t.Helper()
	build, _ := builds.LoadOrStore(pkg, sync.OnceValues(func() (string, error) {
		dir, err := makeBinDir()
		if err != nil {
			return "", err
		}
		bin := filepath.Join(dir, path.Base(pkg))
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
		return bin, nil
	}))
	bin, err := build.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// binDir holds the binaries for the run; TestMain removes it.
var binDir string

var (
	makeBinDir = sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "driftguard-e2e-")
		binDir = dir
		return dir, err
	})
	// builds maps a package to the build of its binary.
	builds sync.Map
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
