package realtime_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// The fan-out's size, given after the package; a small run, e.g. for CI:
//
//	go test -run '^$' -bench FanOut -benchtime 1x ./sinks/realtime/ -fanout.clients=50 -fanout.records=100
var (
	fanoutClients = flag.Int("fanout.clients", 2000, "SSE clients connected to each side of BenchmarkFanOut")
	fanoutRecords = flag.Int("fanout.records", 1000, "state records each round of BenchmarkFanOut sends to every client")
)

// fanoutKeys is how many entities the fan-out's records change.
const fanoutKeys = 100

// benchState is each record's public state: a presence with a device
// list, about the size of what a sidebar receives.
const benchState = `{"presence":"ONLINE","devices":[{"device_id":"phone-1","presence":"ONLINE"},{"device_id":"laptop-1","presence":"AWAY"}]}`

// benchBrokers is the real broker when DRIFTGUARD_TEST_KAFKA names one,
// else an embedded kfake broker. On the real broker the stream is named
// uniquely, so the runs share nothing.
func benchBrokers(b *testing.B) (brokers []string, stream string) {
	if os.Getenv(testenv.EnvKafka) != "" {
		return testenv.Kafka(b), testenv.UniqueName("presence")
	}
	return testenv.Fake(b), "presence"
}

// benchBridge starts a bridge on the presence stream, named stream, with
// bridge.window changes per partition in its log.
func benchBridge(b *testing.B, brokers []string, stream string, window int) *bridgeEnv {
	return newBridgeEnv(b, brokers, func(cfg *config.Config) {
		s := cfg.Streams["presence"]
		s.Name = stream
		cfg.Streams = map[string]*config.Stream{stream: s}
		cfg.Bridge.Window = window
	}, "presence")
}

// BenchmarkFanOut measures SSE deliveries per second from the bridge to
// many connected clients, next to a minimal broadcaster that fans the
// same number of frames of the same size out to as many clients, in one
// run. Each round feeds the bridge -fanout.records state records through
// Kafka (timed from the first publish to the last client holding the last
// change), then broadcasts as many pre-encoded frames (timed from the
// first broadcast to the same). Both sides, their clients and an embedded
// kfake broker (the default; DRIFTGUARD_TEST_KAFKA selects a real one)
// run in this process, so CPU time per delivery counts the clients' work
// as well as the server's:
//
//	go test -run='^$' -bench=FanOut -benchtime=5x ./sinks/realtime/
func BenchmarkFanOut(b *testing.B) {
	clients, records := *fanoutClients, *fanoutRecords
	// A connection takes a descriptor at each end, both in this process.
	raiseOpenFiles(b, 2*2*clients+256)
	brokers, stream := benchBrokers(b)
	e := benchBridge(b, brokers, stream, 10_000)
	tok := e.token("bench", stream)
	cursor, _ := e.snapshot(stream, tok, 10)
	bridgeClients := connectSSE(b, e.ctx, e.url+"/v1/streams/"+stream+"/events?cursor="+cursor, tok, clients, 0)
	// A client sends its frames shared with the others only once it has
	// caught up with the log: all of them have before the first round.
	testenv.WaitFor(b, e.ctx, "every bridge client live", func() bool {
		return gathered(b, e, "driftguard_bridge_catchup_changes") >= float64(clients)
	})

	bc := newBroadcaster()
	srv := httptest.NewServer(bc)
	b.Cleanup(srv.Close)
	baselineClients := connectSSE(b, e.ctx, srv.URL, "", clients, 0)
	testenv.WaitFor(b, e.ctx, "every baseline client listening", func() bool { return bc.listening.Load() >= int64(clients) })
	frames := baselineFrames(b, records)

	var bridge, baseline fanoutSide
	b.ReportAllocs()
	b.ResetTimer()
	for round := range b.N {
		// Versions only grow, so every record is a change for the bridge.
		first := int64(round*records) + 1
		bridge.round(b, bridgeClients, records, func() {
			for i := range int64(records) {
				e.publishAsync(stream, fmt.Sprintf("user-%d", i%fanoutKeys), first+i, benchState)
			}
		})
		baseline.round(b, baselineClients, records, func() {
			for _, f := range frames {
				bc.broadcast(f)
			}
		})
		// MB/s is of what both sides delivered in the round's time.
		b.SetBytes((bridge.bytes + baseline.bytes) / int64(round+1))
	}
	b.StopTimer()
	if err := e.cl.Flush(e.ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(bridge.rate(), "bridge-deliveries/s")
	b.ReportMetric(baseline.rate(), "baseline-deliveries/s")
	b.ReportMetric(bridge.rate()/baseline.rate(), "bridge/baseline")
	b.ReportMetric(bridge.cpuPerDelivery(), "bridge-cpu-µs/delivery")
	b.ReportMetric(baseline.cpuPerDelivery(), "baseline-cpu-µs/delivery")
	b.ReportMetric(baseline.cpuPerDelivery()/bridge.cpuPerDelivery(), "cpu-baseline/bridge")
	b.ReportMetric(float64(bridge.bytes)/float64(bridge.deliveries), "bridge-B/frame")
	b.ReportMetric(float64(baseline.bytes)/float64(baseline.deliveries), "baseline-B/frame")
}

// fanoutSide is what one side of the fan-out delivered, and the wall and
// CPU time it took.
type fanoutSide struct {
	deliveries int64
	bytes      int64
	elapsed    time.Duration
	cpu        time.Duration
}

// round runs feed, which sends records changes to every client of cs, and
// waits until each client has received all of them.
func (fs *fanoutSide) round(b *testing.B, cs *sseClients, records int, feed func()) {
	done := cs.expect(records)
	bytesBefore := cs.bytes.Load()
	cpu, start := testenv.ProcessCPU(b), time.Now()
	feed()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("the clients did not receive %d changes within 2 minutes", records)
	}
	fs.elapsed += time.Since(start)
	fs.cpu += testenv.ProcessCPU(b) - cpu
	fs.deliveries += int64(records) * int64(cs.n)
	fs.bytes += cs.bytes.Load() - bytesBefore
}

func (fs *fanoutSide) rate() float64 { return float64(fs.deliveries) / fs.elapsed.Seconds() }

func (fs *fanoutSide) cpuPerDelivery() float64 {
	return float64(fs.cpu.Nanoseconds()) / 1e3 / float64(fs.deliveries)
}

// baselineFrames are records SSE messages as the bridge writes them: an
// id as long as the bridge's cursors, `event: state` and an Entity.
func baselineFrames(b *testing.B, records int) [][]byte {
	frames := make([][]byte, records)
	for i := range frames {
		id := realtime.Cursor{Offsets: []int64{int64(i), int64(i), int64(i)}}.String()
		data, err := json.Marshal(entityJSON{Key: fmt.Sprintf("user-%d", i%fanoutKeys), Version: int64(i + 1),
			State: json.RawMessage(benchState), UpdatedAtMs: int64(i + 1)})
		if err != nil {
			b.Fatal(err)
		}
		frames[i] = fmt.Appendf(nil, "id: %s\nevent: state\ndata: %s\n\n", id, data)
	}
	return frames
}

// broadcaster is the baseline: the simplest fast SSE fan-out. Frames are
// appended to one shared list; a client's handler writes every frame it
// has not written yet, flushes once for them, and waits for the next.
type broadcaster struct {
	mu        sync.Mutex
	frames    [][]byte
	wake      chan struct{}
	listening atomic.Int64
}

func newBroadcaster() *broadcaster { return &broadcaster{wake: make(chan struct{})} }

func (bc *broadcaster) broadcast(frame []byte) {
	bc.mu.Lock()
	bc.frames = append(bc.frames, frame)
	close(bc.wake)
	bc.wake = make(chan struct{})
	bc.mu.Unlock()
}

func (bc *broadcaster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	bc.mu.Lock()
	sent := len(bc.frames)
	bc.mu.Unlock()
	bc.listening.Add(1)
	for {
		bc.mu.Lock()
		pending, wake := bc.frames[sent:], bc.wake
		bc.mu.Unlock()
		for _, f := range pending {
			if _, err := w.Write(f); err != nil {
				return
			}
		}
		if len(pending) > 0 {
			sent += len(pending)
			if rc.Flush() != nil {
				return
			}
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
	}
}

// sseClients are connections reading server-sent events, each counting
// the messages (events with data) it has read.
type sseClients struct {
	n     int
	bytes atomic.Int64
	// want is the count of messages each client waits for; a client that
	// reaches it counts down left, and the last one closes done.
	mu   sync.Mutex
	want int64
	left int
	done chan struct{}
}

// connectSSE opens n connections to url (with a bearer token unless tok
// is empty) and reads each one until ctx ends or the benchmark does;
// first is the messages the first round expects, as expect would.
func connectSSE(b *testing.B, ctx context.Context, url, tok string, n, first int) *sseClients {
	return connectEachSSE(b, ctx, func(int) (string, string) { return url, tok }, n, first)
}

// connectEachSSE is connectSSE with connection i's url and token from at.
func connectEachSSE(b *testing.B, ctx context.Context, at func(i int) (url, tok string), n, first int) *sseClients {
	cs := &sseClients{n: n}
	cs.expect(first)
	ctx, cancel := context.WithCancel(ctx)
	// Every connection is its own: none is ever idle, so none is reused.
	tr := &http.Transport{DisableCompression: true, DialContext: (&net.Dialer{}).DialContext}
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		wg.Wait()
		tr.CloseIdleConnections()
	})
	// A few connect at a time, so the listen backlog never overflows.
	connecting := make(chan struct{}, 64)
	var opened sync.WaitGroup
	for i := range n {
		connecting <- struct{}{}
		opened.Add(1)
		url, tok := at(i)
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := tr.RoundTrip(req)
			<-connecting
			opened.Done()
			if err != nil {
				b.Error(err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("events: %d", resp.StatusCode)
				return
			}
			cs.read(bufio.NewReaderSize(resp.Body, 16<<10))
		})
	}
	opened.Wait()
	return cs
}

// read parses one client's SSE lines, counting messages and bytes.
func (cs *sseClients) read(r *bufio.Reader) {
	var count, size int64
	data := false
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		size += int64(len(line))
		switch {
		case len(line) == 1:
			if !data {
				continue
			}
			data = false
			count++
			cs.received(count, &size)
		case bytes.HasPrefix(line, []byte("data: ")):
			data = true
		}
	}
}

// received is a client at count messages; it hands in the bytes it read
// once it has every message the round sends.
func (cs *sseClients) received(count int64, size *int64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if count != cs.want {
		return
	}
	cs.bytes.Add(*size)
	*size = 0
	if cs.left--; cs.left == 0 {
		close(cs.done)
	}
}

// expect starts a round of records more messages to every client; the
// channel, done, is closed once each has read them.
func (cs *sseClients) expect(records int) <-chan struct{} {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.want += int64(records)
	cs.left = cs.n
	cs.done = make(chan struct{})
	return cs.done
}

// raiseOpenFiles lifts the process's open-files limit to at least need,
// within the hard limit.
func raiseOpenFiles(b *testing.B, need int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= uint64(need) {
		return
	}
	lim.Cur = min(uint64(need), lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < uint64(need) {
		b.Fatalf("%d open files are needed, the limit is %d (hard %d): %v", need, lim.Cur, lim.Max, err)
	}
}

// replayChanges is how far back BenchmarkReplay's client resumes.
const replayChanges = 10_000

// BenchmarkReplay measures a client resuming from a cursor replayChanges
// changes back until it has received them all: from the bridge's log
// (bridge.window at its default, 10,000 per partition), and from Kafka
// when the cursor is older than the log (window 100: all but the last few
// hundred are read from the state topic).
//
//	go test -run='^$' -bench=Replay -benchtime=10x ./sinks/realtime/
func BenchmarkReplay(b *testing.B) {
	b.Run("log", func(b *testing.B) { benchReplay(b, 10_000) })
	b.Run("kafka", func(b *testing.B) { benchReplay(b, 100) })
}

func benchReplay(b *testing.B, window int) {
	brokers, stream := benchBrokers(b)
	e := benchBridge(b, brokers, stream, window)
	tok := e.token("bench", stream)
	cursor, _ := e.snapshot(stream, tok, 10)
	for i := range int64(replayChanges) {
		e.publishAsync(stream, fmt.Sprintf("user-%d", i%fanoutKeys), i+1, benchState)
	}
	if err := e.cl.Flush(e.ctx); err != nil {
		b.Fatal(err)
	}
	testenv.WaitFor(b, e.ctx, "the bridge at the last change", func() bool {
		var ent entityJSON
		return e.get(fmt.Sprintf("/v1/streams/%s/entities/user-%d", stream, (replayChanges-1)%fanoutKeys), tok, &ent) == http.StatusOK &&
			ent.Version == replayChanges
	})
	url := e.url + "/v1/streams/" + stream + "/events?cursor=" + cursor
	var elapsed, cpu time.Duration
	var size int64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(e.ctx)
		cpuBefore, start := testenv.ProcessCPU(b), time.Now()
		c := connectSSE(b, ctx, url, tok, 1, replayChanges)
		select {
		case <-c.done:
		case <-time.After(time.Minute):
			b.Fatalf("the replay of %d changes took over a minute", replayChanges)
		}
		elapsed += time.Since(start)
		cpu += testenv.ProcessCPU(b) - cpuBefore
		cancel()
		size = c.bytes.Load()
	}
	b.StopTimer()
	b.SetBytes(size)
	perReplay := elapsed / time.Duration(b.N)
	b.ReportMetric(float64(perReplay.Microseconds())/1e3, "ms/replay")
	b.ReportMetric(replayChanges/perReplay.Seconds(), "changes/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N*replayChanges), "cpu-µs/change")
}
