package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// The storm's size: clients, the users they belong to (clientsPerUser
// each, as devices and tabs), the keys changing and the steady rate of
// changes; burstWhileDown changes more are made while the bridge is
// down, so that every resume is older than the log of the restarted
// bridge (window changes a partition) and is read from the topic by the
// shared catch-up readers. `go tool task faults` (DRIFTGUARD_FAULTS=full)
// runs it with stormFullClients.
const (
	stormClients     = 2000
	stormFullClients = 8000
	clientsPerUser   = 10
	stormKeys        = 50
	stormEvery       = 200 * time.Millisecond
	burstWhileDown   = 200
	stormWindow      = 20
	// stormRestartSeconds sets the restarted bridge's accept_rate: the
	// clients need at least this long to get back in at it (50 a second
	// for 2,000).
	stormRestartSeconds = 40
)

// The bound on the restarted bridge's peak resident memory through the
// storm: what it held with every client connected before the crash (the
// first bridge, measured the same way), plus stormMarginBytes. The
// restarted bridge holds the same clients and entities, so the bound is
// what the storm may add: the catch-up readers' fetches and batches
// (bridge.catchup_readers × 1 MiB of fetch and 16 batches of at most
// 64 KiB), each resuming client's own catch-up writes, the refused
// requests, and the garbage of the crowd's requests before the collector
// runs. Measured (docs/bridge.md): about 100 MiB with 2,000 clients
// before the crash and a peak about 30 MiB above it after; the margin is
// three times that.
const stormMarginBytes = 96 << 20

// A reconnect storm: stormClients SSE clients of a real `driftguard bridge`
// on the real broker, with a processor deciding a presence stream fed at a
// steady rate. The bridge is SIGKILLed and restarted while changes keep
// coming (and a burst more while it is down): every client reconnects from
// its last cursor, backing off with jitter while the bridge is down and
// honouring Retry-After when refused, and gets in; each ends holding what
// the state topic holds (the state a client that never disconnected
// reaches), having never needed a new snapshot nor seen a key's version go
// backwards on one connection; the restarted bridge's peak memory stays
// under the bound above; no 410 is answered. The time until every client
// is live again is measured and logged, not asserted.
func TestBridgeReconnectStorm(t *testing.T) {
	brokers := testenv.Kafka(t)
	clients := stormClients
	if testenv.FullFaults() {
		clients = stormFullClients
	}
	raiseFileLimit(t, uint64(2*clients+1000))
	ctx := testenv.Context(t, 5*time.Minute)
	stream := testenv.UniqueName("storm")
	dir := t.TempDir()
	stormConfig := func(name string, acceptRate, acceptBurst int) string {
		return testenv.WriteFile(t, dir, name, fmt.Sprintf(
			"bridge: {window: %d, accept_rate: %d, accept_burst: %d, max_connections: %d, max_connections_per_user: 16, max_streams_per_token: 16, catchup_readers: 2,"+
				" max_tcp_connections: %d, max_tcp_connections_per_source: %d, source_rate: {rate: 1000000}}\nstreams:\n%s",
			stormWindow, acceptRate, acceptBurst, clients+500, 2*clients+500, 2*clients+500, presenceStreamYAML(stream)))
	}
	// Every client is on 127.0.0.1, where thousands of users would be
	// as many addresses: the bridge's limits per source are set for them.
	configFile := stormConfig("driftguard.yaml", 400, 100)
	// The restarted bridge lets in fewer new streams a second than any
	// machine running this test takes them: whether the clients (under
	// the race detector, on a loaded machine) come back faster than 400 a
	// second is the machine's speed, and the refusals after the restart,
	// and the refused getting in, must be shown whatever it is.
	restartRate := clients / stormRestartSeconds
	restartConfig := stormConfig("restart.yaml", restartRate, restartRate/2)
	cfg, err := config.Load(configFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := testenv.Topics(t, ctx, cfg, brokers)
	defer cl.Close()
	newProcessRunner(t, dir, configFile, brokers, stream).start("storm-0")

	const secret = "bridge-storm-test-secret-0123456789abcdef"
	bin := buildDriftguard(t)
	addr := freeLoopbackAddr(t)
	base := "http://" + addr
	bridge := startBridgeProcess(t, ctx, bin, configFile, brokers, addr, secret)

	// The steady flow of changes, until the end of the test's checks.
	p := &stormProducer{cl: cl, topic: naming.Prefixes{}.For(stream).In, last: map[string]int64{}}
	flowing, stopFlow := context.WithCancel(ctx)
	flowed := make(chan struct{})
	go func() { defer close(flowed); p.flow(flowing, t) }()

	idle, _, err := procstat.Memory(bridge.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4 * clients, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}}
	cs := make([]*stormClient, clients)
	runCtx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range cs {
		tok, err := realtime.Sign([]byte(secret), fmt.Sprintf("user-%d", i/clientsPerUser), []string{stream}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = &stormClient{hc: hc, base: base, tok: tok, stream: stream, held: map[string]stormHeld{}}
		wg.Go(func() { cs[i].run(runCtx) })
	}
	defer func() { stopClients(); wg.Wait() }()
	testenv.WaitFor(t, ctx, "every client connected to the first bridge", func() bool {
		return bridgeMetric(t, base, series("driftguard_bridge_clients", stream)) == float64(clients)
	})
	t.Logf("every client connected")
	time.Sleep(time.Second)
	before, _, err := procstat.Memory(bridge.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	// The crash, a burst of changes while the bridge is down, the restart.
	refusedBefore, _, _, _ := attempts(cs)
	killedAt := time.Now()
	sigkill(t, bridge)
	p.burst(ctx, t, burstWhileDown)
	// Decided before the bridge is back: a client's cursor is then older
	// than the restarted bridge's log, not overtaken by a burst the
	// bridge reads while the client is live.
	p.settled(t, ctx, brokers, naming.Prefixes{}.For(stream).State)
	cmd, restartedAt := restartBridge(t, ctx, bin, restartConfig, brokers, addr, secret)
	var peakSeen atomic.Int64
	sampling, stopSampling := context.WithCancel(ctx)
	go func() {
		for sampling.Err() == nil {
			if rss, _, err := procstat.Memory(cmd.Process.Pid); err == nil && rss > peakSeen.Load() {
				peakSeen.Store(rss)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	waitLive, stopWaiting := context.WithTimeout(ctx, 2*time.Minute)
	defer stopWaiting()
	if !testenv.Poll(waitLive, func() bool {
		return bridgeMetric(t, base, series("driftguard_bridge_reconnect_live_seconds_count", stream)) >= float64(clients) &&
			bridgeMetric(t, base, series("driftguard_bridge_clients", stream)) == float64(clients)
	}) {
		m := scrapeBridge(t, base)
		refused, starting, down, snapshots := attempts(cs)
		phases := map[string]int{}
		for _, c := range cs {
			c.mu.Lock()
			phases[c.phase]++
			if c.phase != "reading" {
				t.Logf("a client %s after %v", c.phase, c.lastErr)
			}
			c.mu.Unlock()
		}
		t.Logf("clients by phase: %v", phases)
		t.Fatalf("not every client live on the restarted bridge after 2 min: %v connected, %v live, reconnects %v, catch-up readers %v, waiting %v; clients: %d refused, %d starting, %d down, %d snapshots",
			bridgeMetric(t, base, series("driftguard_bridge_clients", stream)), bridgeMetric(t, base, series("driftguard_bridge_reconnect_live_seconds_count", stream)),
			m["driftguard_bridge_reconnects_total"].GetMetric(), bridgeMetric(t, base, series("driftguard_bridge_catchup_readers", stream)),
			bridgeMetric(t, base, series("driftguard_bridge_catchup_waiting", stream)), refused, starting, down, snapshots)
	}
	allLive := time.Now()
	t.Logf("all live after %s", allLive.Sub(killedAt))

	// Every client converges to the state topic's last record of each key.
	stopFlow()
	<-flowed
	truth := p.settled(t, ctx, brokers, naming.Prefixes{}.For(stream).State)
	t.Logf("the processor decided every change")
	converging, stopConverging := context.WithTimeout(ctx, time.Minute)
	defer stopConverging()
	var behind []int
	if !testenv.Poll(converging, func() bool {
		behind = behind[:0]
		for i, c := range cs {
			if !c.holds(truth) {
				behind = append(behind, i)
			}
		}
		return len(behind) == 0
	}) {
		c := cs[behind[0]]
		c.mu.Lock()
		for k, v := range truth {
			if got := c.held[k]; got.version != v.version {
				t.Logf("client %d holds %s at %d, the state topic at %d", behind[0], k, got.version, v.version)
			}
		}
		c.mu.Unlock()
		t.Fatalf("%d clients do not hold what the state topic holds", len(behind))
	}
	stopSampling()
	_, peak, err := procstat.Memory(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	for i, c := range cs {
		if err := c.holdsStates(truth); err != nil {
			t.Errorf("client %d: %v", i, err)
		}
		c.mu.Lock()
		if c.lowered != nil {
			t.Errorf("client %d: %v", i, c.lowered)
		}
		c.mu.Unlock()
	}
	refused, starting, down, snapshots := attempts(cs)
	m := scrapeBridge(t, base)
	sweeps, served := histogram(m["driftguard_bridge_catchup_sweep_clients"])
	live, liveSum := histogram(m["driftguard_bridge_reconnect_live_seconds"])
	t.Logf("%d clients (%d users), %d changes a second, %d more while the bridge was down (window %d a partition)",
		clients, clients/clientsPerUser, time.Second/stormEvery, burstWhileDown, stormWindow)
	t.Logf("all live %.1f s after the kill, %.1f s after the restart; %d resumes live, %.2f s from arrival to live on average",
		allLive.Sub(killedAt).Seconds(), allLive.Sub(restartedAt).Seconds(), int(live), liveSum/max(1, live))
	t.Logf("attempts: %d refused by admission (503/429; %d after the restart), %d while starting (503), %d with the bridge down; %d snapshots in all",
		refused, refused-refusedBefore, starting, down, snapshots)
	var in []float64
	var maxWait time.Duration
	for _, c := range cs {
		in = append(in, c.in.Sub(restartedAt).Seconds())
		maxWait = max(maxWait, c.maxWait)
	}
	t.Logf("clients back in (an events request answered 200), after the restart: p50 %.1f s, p90 %.1f s, p99 %.1f s, last %.1f s; longest Retry-After told %s",
		quantile(in, 0.5), quantile(in, 0.9), quantile(in, 0.99), quantile(in, 1), maxWait)
	t.Logf("catch-up: %d reads of the state topic served %d resumes", int(sweeps), int(served))
	t.Logf("memory: %s without clients, %s with every client before the kill (%.1f KiB a client); restarted: %s peak (VmHWM; %s in samples), bound %s",
		mib(idle), mib(before), float64(before-idle)/float64(clients)/1024, mib(peak), mib(peakSeen.Load()), mib(before+stormMarginBytes))

	for _, c := range cs {
		if c.snapshots > 1 {
			t.Logf("a client took %d snapshots; the last connection ended with %v", c.snapshots, c.lastErr)
			break
		}
	}
	if snapshots != clients {
		t.Errorf("%d snapshots for %d clients: some had to start over rather than resume from their cursor", snapshots, clients)
	}
	if refused == refusedBefore {
		t.Errorf("no client was refused after the restart: the storm did not reach bridge.accept_rate, and refused clients getting in was not shown")
	}
	if gone := counter(m["driftguard_bridge_reconnects_total"], "outcome", "gone"); gone != 0 {
		t.Errorf("%v cursors were gone after the restart", gone)
	}
	if served == 0 {
		t.Errorf("no resume was read from the topic: the shared catch-up was not exercised")
	}
	if peak > before+stormMarginBytes {
		t.Errorf("the restarted bridge's peak memory %s is over the bound %s", mib(peak), mib(before+stormMarginBytes))
	}
}

// attempts adds up the clients' refused, starting and down attempts and
// their snapshots.
func attempts(cs []*stormClient) (refused, starting, down, snapshots int) {
	for _, c := range cs {
		c.mu.Lock()
		refused, starting, down, snapshots = refused+c.refused, starting+c.starting, down+c.down, snapshots+c.snapshots
		c.mu.Unlock()
	}
	return refused, starting, down, snapshots
}

// raiseFileLimit raises the test process's open file limit to at least n
// (up to the hard limit), for its clients' connections.
func raiseFileLimit(t *testing.T, n uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	lim.Cur = min(max(n, lim.Cur), lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < n {
		t.Fatalf("open files limited to %d, %d needed: %v", lim.Cur, n, err)
	}
}

// restartBridge starts the bridge again and returns it with when it
// started, without waiting for it to be ready: its clients are at it.
func restartBridge(t *testing.T, ctx context.Context, bin, configFile string, brokers []string, addr, secret string) (*exec.Cmd, time.Time) {
	at := time.Now()
	return startBridgeProcess(t, ctx, bin, configFile, brokers, addr, secret), at
}

// stormProducer feeds the stream's input with presence webhooks as ingest
// writes them, each key's sequence numbers counting up.
type stormProducer struct {
	cl    *kgo.Client
	topic string
	mu    sync.Mutex
	last  map[string]int64
	n     int
}

func (p *stormProducer) produce(ctx context.Context, t *testing.T) {
	p.mu.Lock()
	p.n++
	key := fmt.Sprintf("user-%d", p.n%stormKeys)
	p.last[key]++
	body := testenv.Presence{EventID: fmt.Sprintf("storm-%d", p.n), User: key, Version: p.last[key], Timestamp: 1_700_000_000 + p.last[key],
		Status: []string{"ONLINE", "AWAY", "BUSY"}[p.n%3]}.Body()
	rec := &kgo.Record{Topic: p.topic, Key: []byte(key), Value: body, Headers: []kgo.RecordHeader{
		{Key: record.HeaderReceivedAt, Value: []byte(strconv.FormatInt(time.Now().UnixMilli(), 10))}}}
	// Under the lock: a key's changes reach the topic in the order of
	// their sequence numbers.
	p.cl.Produce(context.WithoutCancel(ctx), rec, func(_ *kgo.Record, err error) {
		if err != nil {
			t.Error(err)
		}
	})
	p.mu.Unlock()
}

// flow produces a change every stormEvery until ctx ends.
func (p *stormProducer) flow(ctx context.Context, t *testing.T) {
	tick := time.NewTicker(stormEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			p.produce(ctx, t)
		}
	}
}

// burst produces n changes at once.
func (p *stormProducer) burst(ctx context.Context, t *testing.T, n int) {
	for range n {
		p.produce(ctx, t)
	}
}

// settled waits until the state topic's last record of every key is at
// least at the key's last version produced so far, and returns them.
func (p *stormProducer) settled(t *testing.T, ctx context.Context, brokers []string, stateTopic string) map[string]stormHeld {
	if err := p.cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	produced := maps.Clone(p.last)
	p.mu.Unlock()
	var truth map[string]stormHeld
	deciding, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if !testenv.Poll(deciding, func() bool {
		truth = map[string]stormHeld{}
		for _, r := range testenv.ReadTopic(t, brokers, stateTopic) {
			var st record.State
			if r.Attrs.IsControl() || record.IsViewMark(r.Key, r.Value) {
				continue
			}
			if state, err := record.DecodeState(r.Value, &st); err == nil && st.Version > truth[st.Key].version {
				truth[st.Key] = stormHeld{st.Version, state}
			}
		}
		for k, v := range produced {
			if truth[k].version < v {
				return false
			}
		}
		return true
	}) {
		for k, v := range produced {
			if truth[k].version < v {
				t.Errorf("%s: %d produced, the state topic at %d", k, v, truth[k].version)
			}
		}
		t.FailNow()
	}
	return truth
}

// stormHeld is what a client holds of one key: its version and the
// state (for the truth) or the whole Entity (for a client).
type stormHeld struct {
	version int64
	state   string
}

// stormClient is a client as the page is: a snapshot, then the events
// from its cursor, resuming from its last id after any disconnect; while
// the bridge is down it backs off (0.1 s doubling to 2 s, with jitter),
// and a refusal's Retry-After is waited out, plus up to a second of
// jitter.
type stormClient struct {
	hc                *http.Client
	base, tok, stream string

	mu     sync.Mutex
	held   map[string]stormHeld
	cursor string
	// lowered is a change sent on one connection with a version below one
	// sent before on that connection for the key.
	lowered error
	// Attempts refused by admission (503 or 429), answered 503 starting,
	// or failed with the bridge down; snapshots taken.
	refused, starting, down, snapshots int
	// phase is what the client is doing, and lastErr how its last
	// connection ended, for a failure's report.
	phase   string
	lastErr error
	// in is when an events request of the client was last answered 200;
	// maxWait the longest Retry-After it was told.
	in      time.Time
	maxWait time.Duration
}

func (c *stormClient) at(phase string, err error) {
	c.mu.Lock()
	c.phase = phase
	if err != nil {
		c.lastErr = err
	}
	c.mu.Unlock()
}

func (c *stormClient) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		c.at("connecting", nil)
		wait, err := c.connect(ctx)
		c.at("waiting", err)
		if err == nil {
			backoff = 100 * time.Millisecond
		} else if wait == 0 {
			wait = backoff/2 + rand.N(backoff)
			backoff = min(2*backoff, 2*time.Second)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// connect takes a snapshot if the client has no cursor, then follows one
// connection's events; wait is the refusal's Retry-After with jitter.
func (c *stormClient) connect(ctx context.Context) (wait time.Duration, err error) {
	c.mu.Lock()
	cursor := c.cursor
	c.mu.Unlock()
	if cursor == "" {
		if cursor, err = c.snapshot(ctx); err != nil {
			return 0, err
		}
	}
	resp, err := c.get(ctx, "/v1/streams/"+c.stream+"/events?cursor="+cursor)
	if err != nil {
		c.count(&c.down)
		return 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		var p struct{ Type string }
		_ = json.NewDecoder(resp.Body).Decode(&p)
		if p.Type == "https://driftguard.dev/problems/starting" {
			c.count(&c.starting)
		} else {
			c.count(&c.refused)
		}
		seconds, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		c.mu.Lock()
		c.maxWait = max(c.maxWait, time.Duration(seconds)*time.Second)
		c.mu.Unlock()
		return time.Duration(seconds)*time.Second + rand.N(time.Second), fmt.Errorf("events: %d", resp.StatusCode)
	case http.StatusGone:
		c.setCursor("")
		return 0, errors.New("410")
	default:
		return 0, fmt.Errorf("events: %d", resp.StatusCode)
	}
	c.at("reading", nil)
	c.mu.Lock()
	c.in = time.Now()
	c.mu.Unlock()
	seen := map[string]int64{}
	err = readSSE(resp.Body, func(id, event, data string) error {
		if event == "reset" {
			c.setCursor("")
			return errors.New("reset: " + data)
		}
		key, version, err := keyAndVersion(data)
		if err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if version < seen[key] && c.lowered == nil {
			c.lowered = fmt.Errorf("%s: version %d after %d on one connection", key, version, seen[key])
		}
		seen[key] = max(seen[key], version)
		if version > c.held[key].version {
			c.held[key] = stormHeld{version, data}
		}
		c.cursor = id
		return nil
	})
	return 0, err
}

func (c *stormClient) get(ctx context.Context, path string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+c.tok)
	return c.hc.Do(req)
}

// snapshot takes the stream's snapshot (one page: the stream has
// stormKeys entities) and applies it; it returns the cursor.
func (c *stormClient) snapshot(ctx context.Context) (string, error) {
	resp, err := c.get(ctx, "/v1/streams/"+c.stream+"/snapshot")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var page struct {
		Cursor   string         `json:"cursor"`
		Entities []bridgeEntity `json:"entities"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil || resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return "", fmt.Errorf("snapshot: %d %v", resp.StatusCode, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snapshots++
	for _, e := range page.Entities {
		if e.Version > c.held[e.Key].version {
			entity, _ := json.Marshal(e)
			c.held[e.Key] = stormHeld{e.Version, string(entity)}
		}
	}
	c.cursor = page.Cursor
	return page.Cursor, nil
}

// keyAndVersion reads an Entity's key and version without decoding the
// rest: thousands of clients parse every change, and the state is
// compared once, at the end (holdsStates).
func keyAndVersion(data string) (string, int64, error) {
	var e struct {
		Key     string `json:"key"`
		Version int64  `json:"version"`
	}
	// The bridge writes key, then version, first: decoding the prefix up
	// to the state is enough.
	if i := strings.Index(data, `,"state":`); i > 0 {
		if err := json.Unmarshal([]byte(data[:i]+"}"), &e); err == nil {
			return e.Key, e.Version, nil
		}
	}
	return "", 0, fmt.Errorf("not an entity: %.100s", data)
}

func (c *stormClient) setCursor(s string) {
	c.mu.Lock()
	c.cursor = s
	c.mu.Unlock()
}

func (c *stormClient) count(n *int) {
	c.mu.Lock()
	*n++
	c.mu.Unlock()
}

// holds reports whether the client holds every key of want at its
// version.
func (c *stormClient) holds(want map[string]stormHeld) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range want {
		if c.held[k].version != v.version {
			return false
		}
	}
	return true
}

// holdsStates reports the first key whose state the client holds is not
// want's, if any.
func (c *stormClient) holdsStates(want map[string]stormHeld) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range want {
		var e bridgeEntity
		if err := json.Unmarshal([]byte(c.held[k].state), &e); err != nil || !testenv.SameJSON(e.State, []byte(v.state)) {
			return fmt.Errorf("%s at %d: %s, the state topic's %s (%v)", k, v.version, e.State, v.state, err)
		}
	}
	return nil
}

// scrapeBridge reads the bridge's metrics.
func scrapeBridge(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	body, err := readMetrics(opsOf(base) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseMetrics(body)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// series names the series of metric name for stream, as /metrics shows it.
func series(name, stream string) string { return fmt.Sprintf("%s{stream=%q}", name, stream) }

// histogram is the count and sum of a histogram family's series together.
func histogram(f *dto.MetricFamily) (count, sum float64) {
	for _, s := range f.GetMetric() {
		count += float64(s.GetHistogram().GetSampleCount())
		sum += s.GetHistogram().GetSampleSum()
	}
	return count, sum
}

// counter is the sum of a counter family's series with label name=value.
func counter(f *dto.MetricFamily, name, value string) float64 {
	n := 0.0
	for _, s := range f.GetMetric() {
		if labelOf(s, name) == value {
			n += s.GetCounter().GetValue()
		}
	}
	return n
}

func labelOf(s *dto.Metric, name string) string {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
