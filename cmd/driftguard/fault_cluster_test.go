package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
	"github.com/driftguard/driftguard/internal/webhook"
)

// envFaultSeed replays a fault test (the cluster's, the ingest kills): set
// it to the seed a failure logged.
const envFaultSeed = "DRIFTGUARD_FAULT_SEED"

// clusterFaultSizes are the sizes of one run of the cluster fault test.
type clusterFaultSizes struct {
	webhooks int     // sent at least, more while the faults last
	rate     float64 // webhooks a second
	kills    int     // leaders killed, alternately of <stream>.in and of the table topic
}

// The full size (`go tool task faults`), and the one the test task runs: a
// kill of each kind of leader and the stall, in about two minutes.
var (
	clusterFaultsFull  = clusterFaultSizes{webhooks: 10_000, rate: 100, kills: 5}
	clusterFaultsShort = clusterFaultSizes{webhooks: 2_500, rate: 50, kills: 2}
)

// K2/K5 of issue 16, on the three-broker cluster (replication factor 3,
// min.insync.replicas 2): webhooks go through real `driftguard ingest`,
// `process` and `sink` binaries while the leader of a partition of
// <stream>.in and of the table topic is killed with SIGKILL and restarted
// (five times in the full run), and then a broker is stopped with SIGSTOP
// for twice the replica lag time and resumed. Every webhook ingest
// answered 202 is in <stream>.in where the 202 said and has exactly one
// decision (read_committed, as the sink reads); every input record has one
// outcome record, in ClickHouse once; 503s are allowed, lost
// acknowledgements are not; and ingest, the processor and the sink never
// restart. The time from each fault to the recovery it needs is logged
// (never asserted: the machine is shared).
func TestFaultClusterLeadersKilledAndABrokerStalled(t *testing.T) {
	sizes := clusterFaultsShort
	if testenv.FullFaults() {
		sizes = clusterFaultsFull
	}
	cluster := testenv.KafkaCluster(t)
	ctx := testenv.Context(t, 15*time.Minute)
	seed := seedOf(t, envFaultSeed)
	t.Logf("%d webhooks or more at %.0f/s, %d leader kills", sizes.webhooks, sizes.rate, sizes.kills)
	rng := rand.New(rand.NewPCG(seed, 16))

	p := startClusterPipeline(t, ctx, cluster)
	f := &faultAdmin{t: t, cluster: cluster, cl: p.cl}
	lagMs := f.brokerConfig(ctx, "replica.lag.time.max.ms")
	t.Logf("replica.lag.time.max.ms=%d", lagMs)
	f.waitInSync(ctx)

	pub := newFaultPublisher(p.webhooks, rand.New(rand.NewPCG(seed, 17)))
	var faultsDone atomic.Bool
	published := make(chan struct{})
	go func() {
		defer close(published)
		pub.run(ctx, sizes, faultsDone.Load)
	}()
	// Traffic first, so that every fault hits a pipeline at work.
	testenv.WaitFor(t, ctx, "the first accepted webhooks", func() bool { return pub.acceptedCount() >= 200 })

	var kills []leaderKill
	for i := range sizes.kills {
		topic := p.names.In
		if i%2 == 1 {
			topic = p.names.Table
		}
		partition := int32(rng.IntN(p.partitions))
		now := f.leaders(ctx)
		leader := now.of(t, topic, partition)
		k := leaderKill{topic: topic, partition: partition, node: leader, led: now.ledBy(p.names.In, leader)}
		k.at = time.Now()
		cluster.Kill(t, leader)
		down := time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
		time.Sleep(down)
		cluster.Restart(t, leader)
		restarted := time.Now()
		f.waitInSync(ctx)
		k.inSync = time.Since(restarted)
		t.Logf("kill %d: node %d, leader of %s/%d (and of %s partitions %v), down %s; back in every ISR %s after its restart",
			i+1, leader, topic, partition, p.names.In, k.led, down.Round(time.Millisecond), k.inSync.Round(time.Millisecond))
		kills = append(kills, k)
		time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second))))
	}

	// The stall: a leader of <stream>.in stops answering for twice the
	// replica lag time, so its followers' ISRs drop it and its partitions
	// move, then it wakes into a cluster that went on without it. The
	// processor's transaction coordinator when it leads one, for it is
	// the hardest on the processor: its transaction in flight then ends
	// on a coordinator that moved, which may refuse it.
	now := f.leaders(ctx)
	stalled, coordinator := now.of(t, p.names.In, int32(rng.IntN(p.partitions))), f.txnCoordinator(ctx, p.txnID)
	if len(now.ledBy(p.names.In, coordinator)) > 0 {
		stalled = coordinator
	}
	stall := 2*time.Duration(lagMs)*time.Millisecond + time.Second
	stallLed := now.ledBy(p.names.In, stalled)
	stoppedAt := time.Now()
	cluster.Stop(t, stalled)
	shrunk := f.waitOutOfSync(ctx, stalled, stall)
	time.Sleep(time.Until(stoppedAt.Add(stall)))
	cluster.Resume(t, stalled)
	resumed := time.Now()
	f.waitInSync(ctx)
	inSyncAfterCont := time.Since(resumed)
	t.Logf("stall: node %d (leader of %s partitions %v, the processor's transaction coordinator: %v) stopped for %s; out of an ISR %s after SIGSTOP (%v); every ISR whole %s after SIGCONT",
		stalled, p.names.In, stallLed, stalled == coordinator, stall.Round(time.Millisecond), shrunk.Round(time.Millisecond), shrunk > 0, inSyncAfterCont.Round(time.Millisecond))
	if shrunk == 0 {
		t.Errorf("node %d stayed in every ISR through a stop of %s, longer than replica.lag.time.max.ms=%d: the stall tested nothing", stalled, stall, lagMs)
	}

	faultsDone.Store(true)
	<-published
	accepted, gaveUp := pub.result()
	t.Logf("published: %d accepted (202), %d never accepted; %s", len(accepted), gaveUp, pub.statusCounts())
	for _, r := range pub.refused {
		t.Errorf("webhook refused: %s", r)
	}
	if len(accepted) < sizes.webhooks*9/10 {
		t.Errorf("only %d of at least %d webhooks accepted", len(accepted), sizes.webhooks)
	}

	ins := presenceInputs(t, p.cfg.Kafka.Brokers, p.names.In)
	p.checkAccepted(accepted, ins)
	// Waited for with a deadline of its own, so that an input never
	// decided is named below rather than timing the test out.
	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	testenv.Poll(waitCtx, func() bool { p.out.poll(waitCtx); return p.out.decidedAll(ins) })
	cancel()
	p.out.readToEnd(ctx)
	p.out.checkDecisions(ins)
	p.checkOneDecisionPerEvent(accepted)
	p.checkClickHouse(ctx)

	for _, k := range kills {
		k.report(t, pub, p.out, p.names)
	}
	stallReport(t, pub, stalled, stallLed, stoppedAt)

	for name, cmd := range map[string]*exec.Cmd{"ingest": p.ingest, "process": p.process, "sink": p.sink} {
		if !procstat.Running(cmd.Process.Pid) {
			t.Errorf("driftguard %s (pid %d) exited during the faults: it must ride them out", name, cmd.Process.Pid)
		}
	}
}

// clusterPipeline is one presence stream of its own on the cluster, fed
// through `driftguard ingest`, decided by `driftguard process` and written
// to ClickHouse by `driftguard sink`, each a real process.
type clusterPipeline struct {
	t   *testing.T
	cfg *config.Config
	// txnID is the transactional id of the processor.
	txnID      string
	names      naming.Topics
	partitions int
	conn       driver.Conn
	cl         *kgo.Client
	out        *outputReader
	webhooks   *webhook.Publisher

	ingest, process, sink *exec.Cmd
}

func startClusterPipeline(t *testing.T, ctx context.Context, cluster *testenv.Cluster) *clusterPipeline {
	t.Helper()
	dir := t.TempDir()
	stream := testenv.UniqueName("fault")
	configFile := testenv.WriteConfig(t, dir, "kafka:\n  replication_factor: 3\n"+
		fmt.Sprintf("clickhouse:\n  consumer_group: %s-sink\n  session_timeout: 6s\n  batch_period: 200ms\nstreams:\n", stream)+
		presenceStreamYAML(stream))
	// Only this stream: the shipped ones are the other tests'.
	brokers := cluster.Brokers
	cfg, conn, cl := loadOn(t, ctx, configFile, "fault", brokers, stream)
	const instance = "fault"
	p := &clusterPipeline{t: t, cfg: cfg, txnID: naming.Prefixes{}.TransactionalID(instance, stream), names: naming.Prefixes{}.For(stream), partitions: cfg.Streams[stream].Limits.Partitions, conn: conn, cl: cl}
	// Leave the cluster with only what it had.
	deleteAtEnd(t, kadm.NewClient(cl), topics.Specs(naming.Prefixes{}, cfg.Streams[stream]))
	p.out = newOutputReader(t, brokers, map[string]string{"presence": stream})

	edge := newIngestRunner(t, configFile, brokers)
	p.ingest = edge.start()
	p.process = newProcessRunner(t, dir, configFile, brokers, stream).start(instance)
	p.sink = startSink(t, edge.bin, configFile, cfg)
	p.webhooks = &webhook.Publisher{URL: edge.url(stream), Secret: faultSecret,
		Client: &http.Client{Timeout: 15 * time.Second}}
	testenv.WaitFor(t, ctx, "ingest accepting webhooks", func() bool {
		resp, err := p.webhooks.Post(ctx, "warm-up", testenv.Presence{EventID: "warm-up", User: "warm-up", Version: 1}.Body())
		return err == nil && resp.Status == http.StatusAccepted
	})
	return p
}

// checkAccepted: every 202 named the partition and offset where its event
// is in <stream>.in.
func (p *clusterPipeline) checkAccepted(accepted map[string]acceptance, ins []*crashInput) {
	p.t.Helper()
	at := map[inputPos]string{}
	for _, in := range ins {
		at[in.pos()] = in.eventID
	}
	lost := 0
	for id, a := range accepted {
		if got, ok := at[inputPos{"presence", a.Partition, a.Offset}]; !ok || got != id {
			if lost++; lost <= 10 {
				p.t.Errorf("%s was acknowledged at %s/%d/%d, which holds %q", id, p.names.In, a.Partition, a.Offset, got)
			}
		}
	}
	if lost > 0 {
		p.t.Errorf("%d of %d acknowledged webhooks are not in %s where their 202 said: acknowledgements lost", lost, len(accepted), p.names.In)
	}
	p.t.Logf("%s holds %d records for %d acknowledged webhooks (a retry after a 503 whose record was written after all adds one)", p.names.In, len(ins), len(accepted))
}

// checkOneDecisionPerEvent: each acknowledged event is decided once; its
// other records in the input (a publisher's retry of a write that timed
// out) are duplicates.
func (p *clusterPipeline) checkOneDecisionPerEvent(accepted map[string]acceptance) {
	p.t.Helper()
	decided := map[string]int{}
	for _, outcomes := range p.out.final {
		for _, o := range outcomes[:1] {
			if o.Outcome != record.Duplicate {
				decided[o.EventID]++
			}
		}
	}
	bad := 0
	for id := range accepted {
		if decided[id] != 1 {
			if bad++; bad <= 10 {
				p.t.Errorf("%s has %d decisions other than duplicate, want 1", id, decided[id])
			}
		}
	}
	if bad > 0 {
		p.t.Errorf("%d of %d acknowledged webhooks are not decided exactly once", bad, len(accepted))
	}
}

// checkClickHouse waits for the sink to write every committed outcome
// record, then wants each once.
func (p *clusterPipeline) checkClickHouse(ctx context.Context) {
	p.t.Helper()
	want := uint64(p.out.outcomes())
	query := func(q string) uint64 {
		var n uint64
		_ = p.conn.QueryRow(ctx, fmt.Sprintf(q, p.cfg.ClickHouse.Database)).Scan(&n)
		return n
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	testenv.Poll(waitCtx, func() bool { return query("SELECT count() FROM %s.events") >= want })
	cancel()
	// A few more flush periods: a doubled row would show up now.
	time.Sleep(time.Second)
	rows, ids := query("SELECT count() FROM %s.events"), query("SELECT uniqExact(decision_id) FROM %s.events")
	if rows != want || ids != want {
		p.t.Errorf("events has %d rows for %d decision ids; %d committed outcome records", rows, ids, want)
	}
}

// faultAdmin asks the cluster's live brokers about leaders and ISRs. Each
// request goes to one named broker with a short deadline: a stopped broker
// holds a request for as long as the client lets it.
type faultAdmin struct {
	t       *testing.T
	cluster *testenv.Cluster
	cl      *kgo.Client
}

// metadata of every topic, from the first live broker that answers.
func (f *faultAdmin) metadata(ctx context.Context, avoid int32) (*kmsg.MetadataResponse, error) {
	var errs []error
	for _, node := range f.cluster.Nodes() {
		if node == avoid {
			continue
		}
		reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := f.cl.Broker(int(node)).Request(reqCtx, kmsg.NewPtrMetadataRequest())
		cancel()
		if err == nil {
			return resp.(*kmsg.MetadataResponse), nil
		}
		errs = append(errs, fmt.Errorf("node %d: %w", node, err))
	}
	return nil, errors.Join(errs...)
}

func (f *faultAdmin) mustMetadata(ctx context.Context) *kmsg.MetadataResponse {
	f.t.Helper()
	var resp *kmsg.MetadataResponse
	var err error
	if !testenv.Poll(ctx, func() bool { resp, err = f.metadata(ctx, 0); return err == nil }) {
		f.t.Fatalf("no broker answers metadata: %v", err)
	}
	return resp
}

// leaders are the partitions' leaders, by topic and partition, of one
// metadata answer.
type leaders map[string]map[int32]int32

// leaders reads who leads every partition now.
func (f *faultAdmin) leaders(ctx context.Context) leaders {
	f.t.Helper()
	l := leaders{}
	for _, tp := range f.mustMetadata(ctx).Topics {
		if tp.Topic == nil {
			continue
		}
		l[*tp.Topic] = map[int32]int32{}
		for _, pt := range tp.Partitions {
			l[*tp.Topic][pt.Partition] = pt.Leader
		}
	}
	return l
}

// of is the node leading topic's partition.
func (l leaders) of(t *testing.T, topic string, partition int32) int32 {
	t.Helper()
	node, ok := l[topic][partition]
	if !ok {
		t.Fatalf("%s/%d is not in the metadata", topic, partition)
	}
	return node
}

// txnCoordinator is the node coordinating the transactions of txnID now.
func (f *faultAdmin) txnCoordinator(ctx context.Context, txnID string) int32 {
	f.t.Helper()
	var found kadm.FindCoordinatorResponse
	if !testenv.Poll(ctx, func() bool {
		found = kadm.NewClient(f.cl).FindTxnCoordinators(ctx, txnID)[txnID]
		return found.Err == nil
	}) {
		f.t.Fatalf("no coordinator of transactional id %s: %v", txnID, found.Err)
	}
	return found.NodeID
}

// ledBy lists the partitions of topic that node leads.
func (l leaders) ledBy(topic string, node int32) []int32 {
	var led []int32
	for p, leader := range l[topic] {
		if leader == node {
			led = append(led, p)
		}
	}
	slices.Sort(led)
	return led
}

// waitInSync waits until every partition of every topic (the internal
// transaction and offset topics too) has all its replicas in sync, so
// that the next fault never takes a partition below min.insync.replicas.
func (f *faultAdmin) waitInSync(ctx context.Context) {
	f.t.Helper()
	var lagging []string
	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if !testenv.Poll(waitCtx, func() bool {
		resp, err := f.metadata(waitCtx, 0)
		if err != nil {
			return false
		}
		lagging = lagging[:0]
		for _, tp := range resp.Topics {
			for _, pt := range tp.Partitions {
				if len(pt.ISR) < len(pt.Replicas) {
					lagging = append(lagging, fmt.Sprintf("%s/%d isr %v of %v", *tp.Topic, pt.Partition, pt.ISR, pt.Replicas))
				}
			}
		}
		return len(lagging) == 0
	}) {
		f.t.Fatalf("ISRs not whole after 3 minutes: %v", lagging)
	}
}

// waitOutOfSync waits up to d for node to leave some partition's ISR, and
// returns how long that took, or 0 if it never did.
func (f *faultAdmin) waitOutOfSync(ctx context.Context, node int32, d time.Duration) time.Duration {
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if !testenv.Poll(waitCtx, func() bool {
		resp, err := f.metadata(waitCtx, node)
		if err != nil {
			return false
		}
		for _, tp := range resp.Topics {
			for _, pt := range tp.Partitions {
				if slices.Contains(pt.Replicas, node) && !slices.Contains(pt.ISR, node) {
					return true
				}
			}
		}
		return false
	}) {
		return 0
	}
	return time.Since(start)
}

// brokerConfig is a numeric config of node 1.
func (f *faultAdmin) brokerConfig(ctx context.Context, key string) int64 {
	f.t.Helper()
	configs, err := kadm.NewClient(f.cl).DescribeBrokerConfigs(ctx, 1)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, rc := range configs {
		for _, c := range rc.Configs {
			if c.Key == key && c.Value != nil {
				v, err := strconv.ParseInt(*c.Value, 10, 64)
				if err != nil {
					f.t.Fatalf("%s=%q: %v", key, *c.Value, err)
				}
				return v
			}
		}
	}
	f.t.Fatalf("the broker has no %s", key)
	return 0
}

// leaderKill is one SIGKILL of a partition leader.
type leaderKill struct {
	topic     string
	partition int32
	node      int32
	led       []int32 // partitions of <stream>.in the node led when killed
	at        time.Time
	inSync    time.Duration // from its restart until every ISR was whole
}

// report logs how long the pipeline took to recover from the kill: for
// the edge, from the kill to the first 202 on each input partition the
// node led; for the processor, from the kill to its first decision after
// it on each input partition whose table partition the node led.
func (k leaderKill) report(t *testing.T, pub *faultPublisher, out *outputReader, names naming.Topics) {
	t.Helper()
	edge := pub.recovery(k.at, k.led)
	n503, nErr := pub.failuresAfter(k.at, 30*time.Second)
	line := fmt.Sprintf("recovery: kill of node %d (leader of %s/%d): first 202 on its %s partitions %v after %s; %d answers 503 and %d failed requests in the 30 s after",
		k.node, k.topic, k.partition, names.In, k.led, edge, n503, nErr)
	if k.topic == names.Table {
		line += fmt.Sprintf("; first decision on input partition %d after %s", k.partition, out.firstDecisionAfter(k.partition, k.at))
	}
	t.Log(line)
}

func stallReport(t *testing.T, pub *faultPublisher, node int32, led []int32, at time.Time) {
	t.Helper()
	n503, nErr := pub.failuresAfter(at, 30*time.Second)
	t.Logf("recovery: stall of node %d: first 202 on its %s partitions %v after %s; %d answers 503 and %d failed requests in the 30 s after",
		node, "input", led, pub.recovery(at, led), n503, nErr)
}

// firstDecisionAfter is how long after at the first outcome record of
// input partition was processed, "none" if none was.
func (r *outputReader) firstDecisionAfter(partition int32, at time.Time) string {
	var first int64
	for pos, outcomes := range r.final {
		for _, o := range outcomes {
			if pos.partition == partition && o.ProcessedAtMs >= at.UnixMilli() && (first == 0 || o.ProcessedAtMs < first) {
				first = o.ProcessedAtMs
			}
		}
	}
	if first == 0 {
		return "none"
	}
	return (time.Duration(first-at.UnixMilli()) * time.Millisecond).String()
}

// acceptance is what a 202 said.
type acceptance struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// attempt is one POST of a webhook.
type attempt struct {
	start, end time.Time
	status     int   // 0: the request failed
	partition  int32 // of a 202
}

// faultPublisher sends presence webhooks at a steady rate and retries each
// until it is accepted, as Standard Webhooks senders do: after a 5xx and
// after a failed request, 200 ms later (a real sender backs off longer;
// here the retries probe the recovery), for up to two minutes.
type faultPublisher struct {
	pub *webhook.Publisher
	rng *rand.Rand

	mu       sync.Mutex
	accepted map[string]acceptance
	attempts []attempt
	gaveUp   int
	refused  []string
}

func newFaultPublisher(pub *webhook.Publisher, rng *rand.Rand) *faultPublisher {
	return &faultPublisher{pub: pub, rng: rng, accepted: map[string]acceptance{}}
}

// run sends sizes.webhooks webhooks, and more for as long as done is
// false (at most three times as many), over 300 users, 16 at a time.
func (p *faultPublisher) run(ctx context.Context, sizes clusterFaultSizes, done func() bool) {
	const users, senders = 300, 16
	versions := make([]int64, users)
	work := make(chan testenv.Presence)
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range work {
				p.deliver(ctx, ev)
			}
		}()
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / sizes.rate))
	defer tick.Stop()
	for i := 0; (i < sizes.webhooks || !done()) && i < 3*sizes.webhooks && ctx.Err() == nil; i++ {
		<-tick.C
		u := p.rng.IntN(users)
		versions[u]++
		work <- testenv.Presence{EventID: fmt.Sprintf("ev-%06d", i), User: fmt.Sprintf("user-%03d", u), Version: versions[u],
			Status: []string{"ONLINE", "BUSY", "AWAY", "OFFLINE"}[i%4], Timestamp: time.Now().Unix()}
	}
	close(work)
	wg.Wait()
}

func (p *faultPublisher) deliver(ctx context.Context, ev testenv.Presence) {
	body := ev.Body()
	giveUp := time.Now().Add(2 * time.Minute)
	for time.Now().Before(giveUp) && ctx.Err() == nil {
		a := attempt{start: time.Now()}
		resp, err := p.pub.Post(ctx, ev.EventID, body)
		a.end = time.Now()
		wait := 200 * time.Millisecond
		if err == nil {
			a.status = resp.Status
			if resp.Status == http.StatusAccepted {
				var acc acceptance
				if err := json.Unmarshal(resp.Body, &acc); err == nil {
					a.partition = acc.Partition
					p.record(a, ev.EventID, &acc)
					return
				}
			}
			if resp.Status < 500 {
				// Refused for good (4xx): the test's own mistake, which
				// the test reports.
				p.record(a, "", nil)
				p.mu.Lock()
				p.refused = append(p.refused, fmt.Sprintf("%s: %d %s", ev.EventID, resp.Status, resp.Body))
				p.mu.Unlock()
				return
			}
		}
		p.record(a, "", nil)
		time.Sleep(wait)
	}
	p.mu.Lock()
	p.gaveUp++
	p.mu.Unlock()
}

func (p *faultPublisher) record(a attempt, id string, acc *acceptance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts = append(p.attempts, a)
	if acc != nil {
		p.accepted[id] = *acc
	}
}

func (p *faultPublisher) acceptedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.accepted)
}

func (p *faultPublisher) result() (map[string]acceptance, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.gaveUp
}

// statusCounts summarizes every attempt by answer.
func (p *faultPublisher) statusCounts() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts := map[int]int{}
	for _, a := range p.attempts {
		counts[a.status]++
	}
	var parts []string
	for _, status := range slices.Sorted(maps.Keys(counts)) {
		name := strconv.Itoa(status)
		if status == 0 {
			name = "failed"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, counts[status]))
	}
	return "attempts by answer: " + strings.Join(parts, ", ")
}

// recovery is the longest, over the partitions, from at to the first 202
// on that partition of a request sent after at; "never" if some
// partition had none.
func (p *faultPublisher) recovery(at time.Time, partitions []int32) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var worst time.Duration
	for _, part := range partitions {
		var first time.Time
		for _, a := range p.attempts {
			if a.status == http.StatusAccepted && a.partition == part && !a.start.Before(at) && (first.IsZero() || a.end.Before(first)) {
				first = a.end
			}
		}
		if first.IsZero() {
			return "never"
		}
		worst = max(worst, first.Sub(at))
	}
	return worst.Round(time.Millisecond).String()
}

// failuresAfter counts the 503s and failed requests that ended within d
// after at.
func (p *faultPublisher) failuresAfter(at time.Time, d time.Duration) (n503, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.attempts {
		if a.end.Before(at) || a.end.After(at.Add(d)) {
			continue
		}
		switch a.status {
		case http.StatusServiceUnavailable:
			n503++
		case 0:
			failed++
		}
	}
	return n503, failed
}
