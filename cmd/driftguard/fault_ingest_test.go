package main

// What the edge's fault tests share: real `driftguard ingest` binaries a
// test can kill, and what Linux says of their memory.

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

// faultSecret signs the fault tests' webhooks.
const faultSecret = testSecret

// ingestRunner runs real `driftguard ingest` binaries for the streams of a
// config file on one address, so that a test can kill one and start the
// next where publishers already send.
type ingestRunner struct {
	t          *testing.T
	bin        string
	configFile string
	// addr serves the webhooks, telemetry the metrics.
	addr, telemetry string
	env             []string
}

// newIngestRunner builds the binary and picks a free loopback address;
// every stream of the config file, the shipped ones too, is given
// faultSecret.
func newIngestRunner(t *testing.T, configFile string, brokers []string) *ingestRunner {
	t.Helper()
	cfg, err := config.Load(configFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, telemetry := freeLoopbackAddr(t), freeLoopbackAddr(t)
	env := []string{"DRIFTGUARD_KAFKA_BROKERS=" + strings.Join(brokers, ","), "DRIFTGUARD_HTTP_ADDR=" + addr, "DRIFTGUARD_TELEMETRY_ADDR=" + telemetry}
	for _, name := range cfg.StreamNames() {
		env = append(env, "DRIFTGUARD_SECRETS_"+strings.ToUpper(name)+"="+faultSecret)
	}
	return &ingestRunner{t: t, bin: buildDriftguard(t), configFile: configFile, addr: addr, telemetry: telemetry, env: env}
}

// gauges are the values of unlabelled gauges the running ingest serves on
// /metrics, from one scrape; the test fails on a gauge it does not serve.
func (r *ingestRunner) gauges(names ...string) []float64 {
	r.t.Helper()
	families := scrape(r.t, testenv.Context(r.t, 10*time.Second), "http://"+r.telemetry+"/metrics")
	values := make([]float64, len(names))
	for i, name := range names {
		v, ok := gaugeValue(families, name)
		if !ok {
			r.t.Fatalf("ingest serves no gauge %s", name)
		}
		values[i] = v
	}
	return values
}

// ingestOnStream writes a config file of yaml plus a presence stream
// named after prefix, creates the stream's topics on the real broker and
// returns the stream's name, the config loaded and a runner of ingest for
// it.
func ingestOnStream(t *testing.T, ctx context.Context, prefix, yaml string) (string, *config.Config, *ingestRunner) {
	t.Helper()
	stream := testenv.UniqueName(prefix)
	configFile := testenv.WriteConfig(t, t.TempDir(), yaml+"streams:\n"+presenceStreamYAML(stream))
	cfg, err := config.Load(configFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kafka.Brokers = testenv.Kafka(t)
	testenv.Topics(t, ctx, testenv.OnlyStream(t, cfg.Streams[stream]), cfg.Kafka.Brokers).Close()
	return stream, cfg, newIngestRunner(t, configFile, cfg.Kafka.Brokers)
}

// start runs `driftguard ingest` and returns once it answers on its
// address.
func (r *ingestRunner) start() *exec.Cmd {
	r.t.Helper()
	cmd := startDriftguard(r.t, r.bin, []string{"ingest", "--config", r.configFile}, r.env...)
	client := &http.Client{Timeout: time.Second}
	testenv.WaitFor(r.t, testenv.Context(r.t, 30*time.Second), "ingest listening on "+r.addr, func() bool {
		if !procstat.Running(cmd.Process.Pid) {
			r.t.Fatalf("driftguard ingest exited at start (its log is above)")
		}
		resp, err := client.Get("http://" + r.addr + "/v1/webhooks/-")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	return cmd
}

// url is the webhook URL of stream.
func (r *ingestRunner) url(stream string) string {
	return "http://" + r.addr + "/v1/webhooks/" + stream
}

// mib formats bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// presenceInputs reads topic (a presence stream's <stream>.in) to its end
// offsets, every record as a delivery of the presence stream, in log
// order per partition.
func presenceInputs(t *testing.T, brokers []string, topic string) []*crashInput {
	t.Helper()
	var ins []*crashInput
	for _, rec := range testenv.ReadTopic(t, brokers, topic) {
		ins = append(ins, &crashInput{stream: "presence", key: string(rec.Key), partition: rec.Partition, offset: rec.Offset, eventID: eventIDOf(rec)})
	}
	return ins
}

// eventIDOf is the event id header ingest gives a record.
func eventIDOf(rec *kgo.Record) string {
	id := ""
	for _, h := range rec.Headers {
		if h.Key == record.HeaderEventID {
			id = string(h.Value)
		}
	}
	return id
}
