package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/benchmarks/checker"
	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/benchmarks/stats"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// driftguardE2E is the whole pipeline for one stream, each component a
// process of its own as a deployment runs them: `driftguard ingest`,
// `driftguard process --streams <stream>`, `driftguard sink` and
// `driftguard bridge` with one client following the whole stream, on a
// Kafka broker and a ClickHouse server of their own.
type driftguardE2E struct {
	stream string
	// config is YAML added to the configuration file (knobs under test).
	config string
	// controls has the checker judge two tampered copies of the run as
	// well, one with an acknowledged webhook that never reached ingest
	// and one expecting another state for an entity, and fails the round
	// unless it finds both: proof, in the smoke run, that the checker can
	// fail.
	controls bool
	// profiles serves the components' Go profiles on their operations
	// ports (telemetry.pprof), for --profile.
	profiles bool
}

func (d *driftguardE2E) Name() string   { return "driftguard " + d.stream }
func (d *driftguardE2E) Stream() string { return d.stream }

// allStreams is the contender fed every stream of the catalogue at once,
// in equal shares, one processor process deciding them all: how a
// deployment's broker sees a mix of streams (the low-rate target is set
// across all streams).
const allStreams = "all"

// streamsOf is the streams a contender of stream is fed.
func streamsOf(stream string) []string {
	if stream == allStreams {
		return model.Streams
	}
	return []string{stream}
}

type driftguardInstance struct {
	ws     *Workspace
	stream string
	// streams are those it is fed: stream, or every one for "all".
	streams               []string
	kafka, ch             *server
	ingest, process, sink *proc
	// bridge serves the stream; follower is one client following every
	// change of it (a dashboard), which counts the changes it got.
	bridge              *proc
	stopFollower        context.CancelFunc
	followed            sync.WaitGroup
	changesFollowed     atomic.Int64
	url, secret, chAddr string
	// dir holds the components' logs.
	dir       string
	bridgeURL string
	database  string
	// metrics are the components' /metrics, by process.
	metrics  map[string]string
	controls bool
	conn     driver.Conn
	// positions is the sink's progress, sampled while the run goes on:
	// when each outcome record's row was in ClickHouse.
	poll      context.CancelFunc
	polled    sync.WaitGroup
	positions []positionSample
}

type positionSample struct {
	at   time.Time
	held map[streamPartition]int64 // events' highest offset per outcomes partition
}

// streamPartition is a partition of a stream's outcomes topic.
type streamPartition struct {
	stream    string
	partition int32
}

func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func (d *driftguardE2E) Start(ctx context.Context, ws *Workspace) (Instance, error) {
	dir, err := ws.next(d.Name())
	if err != nil {
		return nil, err
	}
	in := &driftguardInstance{ws: ws, dir: dir, stream: d.stream, streams: streamsOf(d.stream), secret: newSecret(), database: "bench", controls: d.controls}
	ok := false
	defer func() {
		if !ok {
			_ = in.Stop(context.WithoutCancel(ctx))
		}
	}()
	if in.kafka, in.ch, err = ws.startKafkaAndClickHouse(ctx); err != nil {
		return nil, err
	}
	brokers := in.kafka.Vars["DRIFTGUARD_TEST_KAFKA"]
	in.chAddr = in.ch.Vars["DRIFTGUARD_TEST_CLICKHOUSE"]
	// ingest's address, the telemetry of ingest, processors, sink and
	// bridge, and the bridge's address.
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "driftguard.yaml")
	if err := os.WriteFile(cfgPath, []byte(d.config), 0o644); err != nil {
		return nil, err
	}
	env := []string{
		"DRIFTGUARD_CONFIG=" + cfgPath,
		"DRIFTGUARD_KAFKA_BROKERS=" + brokers,
		"DRIFTGUARD_CLICKHOUSE_ADDR=" + in.chAddr,
		"DRIFTGUARD_CLICKHOUSE_DATABASE=" + in.database,
		"DRIFTGUARD_DATA_DIR=" + filepath.Join(dir, "data"),
		"DRIFTGUARD_INSTANCE_ID=bench",
		"DRIFTGUARD_LOG_LEVEL=warn",
		"DRIFTGUARD_TELEMETRY_PPROF=" + strconv.FormatBool(d.profiles),
	}
	for _, s := range model.Streams {
		env = append(env, "DRIFTGUARD_SECRETS_"+strings.ToUpper(s)+"="+in.secret)
	}
	bridgeSecret := newSecret()
	env = append(env, "DRIFTGUARD_BRIDGE_SECRET="+bridgeSecret)
	bin := ws.Bin["driftguard"]
	topicsProc, err := spawn("topics", bin, []string{"topics"}, env, filepath.Join(dir, "topics.log"))
	if err != nil {
		return nil, err
	}
	<-topicsProc.done
	if topicsProc.err != nil {
		return nil, fmt.Errorf("driftguard topics: %v (see %s)", topicsProc.err, filepath.Join(dir, "topics.log"))
	}
	in.url = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	in.metrics = map[string]string{}
	for i, process := range []string{"ingest", "processors", "sink", "bridge"} {
		in.metrics[process] = fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[i+1])
	}
	telemetry := func(i int) string { return fmt.Sprintf("DRIFTGUARD_TELEMETRY_ADDR=127.0.0.1:%d", ports[i]) }
	if in.ingest, err = spawn("ingest", bin, []string{"ingest"},
		append(slices.Clone(env), fmt.Sprintf("DRIFTGUARD_HTTP_ADDR=127.0.0.1:%d", ports[0]), telemetry(1)), filepath.Join(dir, "ingest.log")); err != nil {
		return nil, err
	}
	if in.process, err = spawn("processors", bin, []string{"process", "--streams", strings.Join(in.streams, ",")},
		append(slices.Clone(env), telemetry(2)), filepath.Join(dir, "process.log")); err != nil {
		return nil, err
	}
	if in.sink, err = spawn("sink", bin, []string{"sink"}, append(slices.Clone(env), telemetry(3)), filepath.Join(dir, "sink.log")); err != nil {
		return nil, err
	}
	in.bridgeURL = fmt.Sprintf("http://127.0.0.1:%d", ports[5])
	if in.bridge, err = spawn("bridge", bin, []string{"bridge"},
		append(slices.Clone(env), "DRIFTGUARD_BRIDGE_ADDR="+strings.TrimPrefix(in.bridgeURL, "http://"), telemetry(4)), filepath.Join(dir, "bridge.log")); err != nil {
		return nil, err
	}
	for i, p := range []*proc{in.ingest, in.process, in.sink, in.bridge} {
		if err := waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[i+1]), p, 2*time.Minute); err != nil {
			return nil, fmt.Errorf("%v (logs in %s)", err, dir)
		}
	}
	// Ready means a component can work, not that its consumer group has
	// handed it partitions yet: wait for that too, so that the warm-up
	// warms a running pipeline.
	if err := waitGroupsAssigned(ctx, brokers, append(slices.Clone(in.streams), "driftguard-sink-clickhouse"), 2*time.Minute); err != nil {
		return nil, fmt.Errorf("%v (logs in %s)", err, dir)
	}
	if in.conn, err = sinkch.Open(ctx, config.ClickHouse{Addr: in.chAddr, Database: in.database, Username: "default"}); err != nil {
		return nil, err
	}
	pollCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	in.poll = cancel
	in.polled.Add(1)
	go in.pollPositions(pollCtx)
	token, err := realtime.Sign([]byte(bridgeSecret), "bench-dashboard", in.streams, time.Now().Add(24*time.Hour))
	if err != nil {
		return nil, err
	}
	followCtx, stopFollower := context.WithCancel(context.WithoutCancel(ctx))
	in.stopFollower = stopFollower
	in.followed.Add(1)
	// A dashboard follows the first stream: chat's conversations are read
	// by their members, not followed whole.
	go in.follow(followCtx, in.streams[0], token)
	ok = true
	return in, nil
}

// pollPositions samples sink_positions every 100 ms: a few rows, so the
// query costs ClickHouse little next to the inserts it measures.
func (in *driftguardInstance) pollPositions(ctx context.Context) {
	defer in.polled.Done()
	outcomes := map[string]string{}
	for _, stream := range in.streams {
		outcomes[naming.Prefixes{}.For(stream).Outcomes] = stream
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		held, err := checker.SinkPositions(ctx, in.conn, in.database)
		if err == nil {
			s := positionSample{at: time.Now(), held: map[streamPartition]int64{}}
			for p, off := range held {
				if stream, ok := outcomes[p.Topic]; ok && p.Table == "events" {
					s.held[streamPartition{stream, p.Partition}] = off
				}
			}
			in.positions = append(in.positions, s)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (in *driftguardInstance) Target() Target {
	return Target{URL: in.url, Secret: in.secret, Scheme: config.SchemeStandardWebhooks}
}

// MetricsURLs implements MetricsReporter.
func (in *driftguardInstance) MetricsURLs() map[string]string { return in.metrics }

func (in *driftguardInstance) Processes() map[string]int {
	out := map[string]int{}
	for _, p := range []*proc{in.ingest, in.process, in.sink, in.bridge} {
		if p != nil && !p.exited() {
			out[p.name] = p.pid()
		}
	}
	if in.kafka != nil {
		out["broker"] = in.kafka.PID
	}
	if in.ch != nil {
		out["clickhouse"] = in.ch.PID
	}
	return out
}

func (in *driftguardInstance) Judge(ctx context.Context, run *Run) (Judgement, error) {
	// A component that stopped leaves the checker waiting for decisions
	// that never come: the round fails with what stopped, and its log.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	for _, p := range []*proc{in.ingest, in.process, in.sink, in.bridge} {
		go func() {
			select {
			case <-p.done:
				stop(fmt.Errorf("driftguard %s stopped during the round: %v (see its log in %s)", p.name, p.err, in.dir))
			case <-ctx.Done():
			}
		}()
	}
	ch := config.ClickHouse{Addr: in.chAddr, Database: in.database, Username: "default"}
	dg := checker.Driftguard{Brokers: []string{in.kafka.Vars["DRIFTGUARD_TEST_KAFKA"]}, ClickHouse: ch}
	r, err := dg.Check(ctx, run.Sent, run.Expected, in.streams)
	in.poll()
	in.polled.Wait()
	if cause := context.Cause(ctx); cause != nil {
		return Judgement{}, cause
	}
	if err != nil {
		return Judgement{}, err
	}
	if in.controls {
		if err := in.negativeControls(ctx, dg, run); err != nil {
			return Judgement{}, err
		}
	}
	writeReport(run.Dir, r)
	j := Judgement{Verdict: r.Verdict, Latency: map[string]model.Percentiles{}, Figures: map[string]float64{}}
	var decision, committed, row []float64
	decided, uncommitted := 0, 0
	startMs, endMs := run.WindowStart.UnixMilli(), run.WindowEnd.UnixMilli()
	for _, t := range r.Timings {
		if !t.First || run.Phases[t.EventID] != model.PhaseMeasure {
			continue
		}
		decision = append(decision, float64(t.DecidedAtMs-t.ReceivedAtMs))
		if t.CommittedAtMs > 0 {
			committed = append(committed, float64(t.CommittedAtMs-t.ReceivedAtMs))
		} else {
			uncommitted++
		}
		if t.DecidedAtMs >= startMs && t.DecidedAtMs <= endMs {
			decided++
		}
		if t.HasRow {
			if at, ok := in.rowTime(streamPartition{t.Stream, t.OutcomePart}, t.OutcomeOffset); ok {
				row = append(row, float64(at.UnixMilli()-t.ReceivedAtMs))
			}
		}
	}
	j.Latency["decision"] = percentiles(decision)
	j.Latency["committed"] = percentiles(committed)
	if uncommitted > 0 {
		// A decision read back without its commit marker cannot be timed
		// to its commit; the checker reads each topic to its end after
		// the drain, so there should be none.
		j.Figures["decisions_without_commit_time"] = float64(uncommitted)
	}
	j.Latency["row"] = percentiles(row)
	if secs := run.WindowEnd.Sub(run.WindowStart).Seconds(); secs > 0 {
		j.Figures["decided_per_second"] = float64(decided) / secs
	}
	// The bridge is part of the pipeline measured: a client that saw none
	// of the changes means it did not serve them.
	followed := in.changesFollowed.Load()
	if followed == 0 {
		return Judgement{}, errors.New("the client following the stream through the bridge got no change")
	}
	j.Figures["bridge_changes_followed"] = float64(followed)
	for _, sr := range r.Streams {
		for outcome, n := range sr.Outcomes {
			j.Figures["outcome_"+outcome] = float64(n)
		}
	}
	return j, nil
}

// rowTime is the first sample at which ClickHouse held the outcome
// record at part/offset.
func (in *driftguardInstance) rowTime(part streamPartition, offset int64) (time.Time, bool) {
	i := sort.Search(len(in.positions), func(i int) bool {
		held, ok := in.positions[i].held[part]
		return ok && held >= offset
	})
	if i == len(in.positions) {
		return time.Time{}, false
	}
	return in.positions[i].at, true
}

func percentiles(v []float64) model.Percentiles {
	return model.Percentiles{P50: stats.Percentile(v, 50), P99: stats.Percentile(v, 99), Max: stats.Percentile(v, 100)}
}

func (in *driftguardInstance) Stop(ctx context.Context) error {
	if in.poll != nil {
		in.poll()
		in.polled.Wait()
	}
	if in.conn != nil {
		in.conn.Close()
	}
	if in.stopFollower != nil {
		in.stopFollower()
		in.followed.Wait()
	}
	for _, p := range []*proc{in.bridge, in.ingest, in.process, in.sink} {
		p.stop(30 * time.Second)
	}
	in.kafka.stop(ctx)
	in.ch.stop(ctx)
	return nil
}

// negativeControls has the checker judge the run with an acknowledged
// webhook that never reached ingest, and with another state expected for
// one entity; it must find the first lost and the second mismatched.
func (in *driftguardInstance) negativeControls(ctx context.Context, dg checker.Driftguard, run *Run) error {
	dg.Drain = time.Second
	ghost := model.Delivery{Stream: in.stream, EventID: "never-sent", Key: "nobody", Status: 202, Attempts: 1, Phase: model.PhaseMeasure}
	r, err := dg.Check(ctx, append(slices.Clone(run.Sent), ghost), run.Expected, []string{in.stream})
	if err != nil {
		return err
	}
	if r.Verdict.Passed || r.Verdict.Lost != 1 {
		return fmt.Errorf("negative control: a webhook acknowledged but never sent was not found lost (verdict %+v)", r.Verdict)
	}
	want := run.Expected
	switch in.stream {
	case "presence":
		want.Presence = maps.Clone(want.Presence)
		for k, p := range want.Presence {
			p.SequenceNumber++
			want.Presence[k] = p
			break
		}
	case "orders":
		want.Orders = maps.Clone(want.Orders)
		want.Orders["an-order-never-made"] = model.Order{Created: true}
	default:
		return nil
	}
	if r, err = dg.Check(ctx, run.Sent, want, []string{in.stream}); err != nil {
		return err
	}
	if r.Verdict.Passed || r.Verdict.Mismatched != 1 {
		return fmt.Errorf("negative control: an entity expected in another state was not found (verdict %+v)", r.Verdict)
	}
	in.ws.Log.Info("negative controls: the checker found the webhook lost and the state mismatched", "stream", in.stream)
	return nil
}

// waitGroupsAssigned waits until each consumer group is stable with its
// partitions assigned.
func waitGroupsAssigned(ctx context.Context, brokers string, groups []string, d time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(d)
	for {
		described, err := adm.DescribeGroups(ctx, groups...)
		waiting := ""
		for _, g := range groups {
			dg, found := described[g]
			assigned := false
			if found && dg.Err == nil && dg.State == "Stable" {
				for _, m := range dg.Members {
					if c, ok := m.Assigned.AsConsumer(); ok && len(c.Topics) > 0 {
						assigned = true
					}
				}
			}
			if !assigned {
				waiting = g
			}
		}
		if err == nil && waiting == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consumer group %s had no partitions assigned after %s (%v)", waiting, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// follow is a client of the bridge following every change of the stream,
// as a dashboard does, until ctx ends: a snapshot's cursor (one entity's
// page: the cursor is the position the snapshot read from), then the
// changes after it, resumed from the last one it got after a dropped
// stream. It counts the changes it got.
func (in *driftguardInstance) follow(ctx context.Context, stream, token string) {
	defer in.followed.Done()
	cursor := ""
	get := func(target string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultClient.Do(req)
	}
	for ctx.Err() == nil {
		if cursor == "" {
			if resp, err := get(in.bridgeURL + "/v1/streams/" + stream + "/snapshot?limit=1"); err == nil {
				var snap struct {
					Cursor string `json:"cursor"`
				}
				if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&snap) == nil {
					cursor = snap.Cursor
				}
				resp.Body.Close()
			}
		}
		if cursor != "" {
			if resp, err := get(in.bridgeURL + "/v1/streams/" + stream + "/events?cursor=" + url.QueryEscape(cursor)); err == nil {
				if resp.StatusCode == http.StatusGone {
					cursor = ""
				}
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(make([]byte, 64<<10), 4<<20)
				for sc.Scan() {
					switch line := sc.Text(); {
					case line == "event: state":
						in.changesFollowed.Add(1)
					case strings.HasPrefix(line, "id: "):
						cursor = strings.TrimPrefix(line, "id: ")
					}
				}
				resp.Body.Close()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
