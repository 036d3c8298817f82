package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// The attack on the bridge: token-less connections from eight addresses,
// half of them held open without a request, half asking without a token
// as fast as they are answered; and one token (leaked, or a client gone
// wrong) opening streams from another address as fast as it is refused.
// `go tool task faults` (DRIFTGUARD_FAULTS=full) runs the sizes of the
// issue: 5,000 connections and 500 streams for 30 s.
const (
	bridgeAttackConnections     = 1000
	bridgeAttackFullConnections = 5000
	tokenStreams                = 100
	tokenFullStreams            = 500
	bridgeAttackFor             = 15 * time.Second
	bridgeAttackFullFor         = 30 * time.Second
	bridgeAttackSources         = 8 // 127.0.0.2 to 127.0.0.9
	tokenSource                 = "127.0.0.10"
	// bridgeChangeEvery is the valid traffic: a change a client watches,
	// 20 a second.
	bridgeChangeEvery = 50 * time.Millisecond
)

// The bound on the bridge's memory under the attack, a property of its
// caps: what it held before, plus twice (Go's heap grows to twice what is
// live) what the attack's connections may hold, each at most
// bridgeConnectionBytes (buffers, structures, a goroutine's stack), and
// the token's streams, each at most its send buffer (64 KiB) on top; plus
// a margin for what the runtime has not handed back to the system.
const (
	bridgeConnectionBytes = 32 << 10
	bridgeStreamBytes     = 64 << 10
	bridgeMargin          = 32 << 20
)

// A real `driftguard bridge` on the real broker, with its default limits,
// serves a client that follows a presence stream changing 20 times a
// second, and that client's snapshots, while token-less connections and
// one token's streams attack it. Every change reaches the client, with
// p99 latency (produced to seen) under servedCeiling; every snapshot is
// 200; the token holds at most bridge.max_streams_per_token streams, and
// the rest of its tries are refused 429; the token-less requests are 401;
// the bridge's peak resident memory stays under the bound above.
func TestFaultBridgeUnderTokenlessConnectionsAndOneTokensStreams(t *testing.T) {
	brokers := testenv.Kafka(t)
	connections, streams, attackFor := bridgeAttackConnections, tokenStreams, bridgeAttackFor
	if testenv.FullFaults() {
		connections, streams, attackFor = bridgeAttackFullConnections, tokenFullStreams, bridgeAttackFullFor
	}
	raiseFileLimit(t, uint64(2*(connections+streams)+1000))
	ctx := testenv.Context(t, 4*time.Minute)
	stream := testenv.UniqueName("bridgeflood")
	dir := t.TempDir()
	configFile := testenv.WriteFile(t, dir, "driftguard.yaml", "streams:\n"+presenceStreamYAML(stream))
	cfg, err := config.Load(configFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := testenv.Topics(t, ctx, cfg, brokers)
	defer cl.Close()
	newProcessRunner(t, dir, configFile, brokers, stream).start("bridgeflood-0")
	const secret = "bridge-flood-test-secret-0123456789abcdef"
	addr := freeLoopbackAddr(t)
	base := "http://" + addr
	bridge := startBridgeProcess(t, ctx, buildDriftguard(t), configFile, brokers, addr, secret)
	sign := func(user string) string {
		tok, err := realtime.Sign([]byte(secret), user, []string{stream}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	// The valid client, from 127.0.0.1, follows the stream.
	watcher := &watcher{base: base, tok: sign("watcher"), stream: stream, seen: map[string]time.Time{}}
	cursor := watcher.snapshot(ctx)
	if cursor == "" {
		t.Fatal("no snapshot for the valid client")
	}
	watching, stopWatching := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- watcher.follow(watching, cursor) }()
	changes := &changeFlow{cl: cl, topic: naming.Prefixes{}.For(stream).In, produced: map[string]time.Time{}}
	changes.produce(ctx, t) // one change, seen before the attack
	testenv.WaitFor(t, ctx, "the valid client following", func() bool { return watcher.count() == 1 })
	before, _, err := procstat.Memory(bridge.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	attack, stopAttack := context.WithTimeout(ctx, attackFor)
	defer stopAttack()
	var a bridgeAttack
	var wg sync.WaitGroup
	for i := range connections {
		src := fmt.Sprintf("127.0.0.%d", 2+i%bridgeAttackSources)
		wg.Go(func() { a.tokenless(attack, addr, src, stream, i%2 == 0) })
	}
	leaked := sign("leaked")
	for range streams {
		wg.Go(func() { a.oneToken(attack, addr, stream, leaked, cursor) })
	}
	peak := sampleEdge(ctx, bridge.Process.Pid, strings.TrimPrefix(opsOf(base), "http://"), "driftguard_bridge_connections")
	// The valid traffic, throughout: changes 20 a second, and a snapshot
	// every half second, each on its own clock.
	snapshots, refusedSnapshots := 0, []string{}
	wg.Go(func() {
		for attack.Err() == nil {
			snapshots++
			if status := watcher.snapshotStatus(ctx); status != http.StatusOK {
				refusedSnapshots = append(refusedSnapshots, strconv.Itoa(status))
			}
			pause(attack, 500*time.Millisecond)
		}
	})
	tick := time.NewTicker(bridgeChangeEvery)
	for attack.Err() == nil {
		select {
		case <-tick.C:
			changes.produce(ctx, t)
		case <-attack.Done():
		}
	}
	tick.Stop()
	wg.Wait()
	peakSeen, peaks := peak.wait()
	_, hwm, err := procstat.Memory(bridge.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "every change at the valid client", func() bool { return watcher.count() == changes.count() })
	stopWatching()
	if err := <-watched; err != nil {
		t.Errorf("the valid client's stream ended: %v", err)
	}

	latencies := watcher.latencies(changes)
	p99 := time.Duration(quantile(latencies, 0.99) * float64(time.Second)).Round(time.Millisecond)
	held := min(int64(connections), int64(cfg.Bridge.MaxTCPConnections))
	bound := before + 2*(held*bridgeConnectionBytes+int64(cfg.Bridge.MaxStreamsPerToken)*bridgeStreamBytes) + bridgeMargin
	t.Logf("attack: %d token-less connections from %d addresses, %d answered 401, %d closed by the bridge; one token's %d streams: %d opened, %d refused 429 too_many_streams, %d rate_limited",
		connections, bridgeAttackSources, a.unauthorized.Load(), a.closed.Load(), streams, a.opened.Load(), a.tooMany.Load(), a.rateLimited.Load())
	t.Logf("valid: %d changes seen, p50 %s, p99 %s; %d snapshots, %d refused", len(latencies),
		time.Duration(quantile(latencies, 0.5)*float64(time.Second)).Round(time.Millisecond), p99, snapshots, len(refusedSnapshots))
	t.Logf("connections: at most %.0f open in the samples; memory %s before, %s peak (VmHWM; %s in samples), bound %s = before + 2 × (%d connections × %d KiB + %d streams × %d KiB) + %s",
		peaks["driftguard_bridge_connections"], mib(before), mib(hwm), mib(peakSeen), mib(bound), held, bridgeConnectionBytes>>10,
		cfg.Bridge.MaxStreamsPerToken, bridgeStreamBytes>>10, mib(bridgeMargin))

	if hwm > bound {
		t.Errorf("peak resident memory %s is over the bound %s", mib(hwm), mib(bound))
	}
	if p99 >= servedCeiling {
		t.Errorf("the valid client saw changes with p99 latency %s during the attack, want under %s", p99, servedCeiling)
	}
	if want := int(attackFor/bridgeChangeEvery) / 2; len(latencies) < want {
		t.Errorf("only %d changes were produced and seen during %s, want at least %d", len(latencies), attackFor, want)
	}
	if len(refusedSnapshots) > 0 {
		t.Errorf("%d of the valid client's %d snapshots were refused: %v", len(refusedSnapshots), snapshots, refusedSnapshots)
	}
	if most := int64(cfg.Bridge.MaxStreamsPerToken); a.maxOpen.Load() > most {
		t.Errorf("the token held %d streams at once, over bridge.max_streams_per_token (%d)", a.maxOpen.Load(), most)
	}
	if a.tooMany.Load() == 0 || a.unauthorized.Load() == 0 {
		t.Errorf("the attack did not reach the bridge: %d too_many_streams, %d unauthorized", a.tooMany.Load(), a.unauthorized.Load())
	}
	if a.other.Load() > 0 {
		t.Errorf("%d attack requests were answered otherwise than 401 or 429, first: %v", a.other.Load(), a.firstOther.Load())
	}
}

// watcher is the valid client: it follows a stream's events and records
// when it saw each change.
type watcher struct {
	base, tok, stream string

	mu   sync.Mutex
	seen map[string]time.Time // "key/version"
}

func (w *watcher) request(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.base+"/v1/streams/"+w.stream+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+w.tok)
	return http.DefaultClient.Do(req)
}

// snapshot returns a snapshot's cursor, empty on failure.
func (w *watcher) snapshot(ctx context.Context) string {
	resp, err := w.request(ctx, "/snapshot")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var page struct{ Cursor string }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&page) != nil {
		return ""
	}
	return page.Cursor
}

// snapshotStatus is the status of a snapshot request, 0 when it failed.
func (w *watcher) snapshotStatus(ctx context.Context) int {
	resp, err := w.request(ctx, "/snapshot")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// follow reads the events from cursor until ctx ends; an error is the
// stream ending before.
func (w *watcher) follow(ctx context.Context, cursor string) error {
	resp, err := w.request(ctx, "/events?cursor="+cursor)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("events: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[7:]
		case strings.HasPrefix(line, "data: ") && event == "state":
			var e bridgeEntity
			if err := json.Unmarshal([]byte(line[6:]), &e); err != nil {
				return err
			}
			w.mu.Lock()
			if _, ok := w.seen[changeID(e.Key, e.Version)]; !ok {
				w.seen[changeID(e.Key, e.Version)] = time.Now()
			}
			w.mu.Unlock()
		case strings.HasPrefix(line, "data: "):
			return fmt.Errorf("event %s: %s", event, line)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("the events ended: %v", sc.Err())
}

func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

// latencies are the seconds from each change's production to its sight.
func (w *watcher) latencies(c *changeFlow) []float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []float64
	for id, at := range c.produced {
		if seen, ok := w.seen[id]; ok {
			out = append(out, seen.Sub(at).Seconds())
		}
	}
	return out
}

func changeID(key string, version int64) string { return key + "/" + strconv.FormatInt(version, 10) }

// changeFlow produces presence changes, each of a key of its own, and
// records when.
type changeFlow struct {
	cl    *kgo.Client
	topic string

	mu       sync.Mutex
	n        int64
	produced map[string]time.Time
}

func (c *changeFlow) produce(ctx context.Context, t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	key := fmt.Sprintf("user-%d", c.n)
	body := testenv.Presence{EventID: fmt.Sprintf("change-%d", c.n), User: key, Version: 1, Timestamp: 1_700_000_000 + c.n}.Body()
	c.produced[changeID(key, 1)] = time.Now()
	c.cl.Produce(context.WithoutCancel(ctx), &kgo.Record{Topic: c.topic, Key: []byte(key), Value: body}, func(_ *kgo.Record, err error) {
		if err != nil {
			t.Error(err)
		}
	})
}

func (c *changeFlow) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.produced)
}

// bridgeAttack counts what the attack's requests were answered.
type bridgeAttack struct {
	unauthorized, closed, opened, tooMany, rateLimited, other atomic.Int64
	open, maxOpen                                             atomic.Int64
	firstOther                                                atomic.Value
}

// dial connects to addr from the loopback address src.
func dial(ctx context.Context, addr, src string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	return d.DialContext(ctx, "tcp", addr)
}

// tokenless holds a connection from src without a request (hold), or asks
// without a token on it, again on a new connection as soon as the bridge
// closes it, until ctx ends.
func (a *bridgeAttack) tokenless(ctx context.Context, addr, src, stream string, hold bool) {
	for ctx.Err() == nil {
		c, err := dial(ctx, addr, src)
		if err != nil {
			pause(ctx, 50*time.Millisecond)
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		r := bufio.NewReader(c)
		if !hold {
			_, err = fmt.Fprintf(c, "GET /v1/streams/%s/snapshot HTTP/1.1\r\nHost: bridge\r\n\r\n", stream)
			if err == nil {
				var resp *http.Response
				if resp, err = http.ReadResponse(r, nil); err == nil {
					a.answered(resp)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
		// Held until the bridge closes it (its read timeout, or for a
		// new one at the cap), or after a 401.
		if _, err := r.ReadByte(); err != nil && ctx.Err() == nil {
			a.closed.Add(1)
		}
		stop()
		c.Close()
	}
}

// oneToken opens streams on tok from tokenSource, as many as it is let,
// each held until ctx ends; a refused one tries again after 100 ms,
// whatever Retry-After says.
func (a *bridgeAttack) oneToken(ctx context.Context, addr, stream, tok, cursor string) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dial(ctx, addr, tokenSource)
	}}}
	defer hc.CloseIdleConnections()
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/streams/"+stream+"/events?cursor="+cursor, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		if resp.StatusCode == http.StatusOK {
			a.opened.Add(1)
			n := a.open.Add(1)
			for m := a.maxOpen.Load(); n > m && !a.maxOpen.CompareAndSwap(m, n); m = a.maxOpen.Load() {
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			a.open.Add(-1)
		} else {
			a.answered(resp)
		}
		resp.Body.Close()
		pause(ctx, 100*time.Millisecond)
	}
}

// answered counts a refusal by its problem type.
func (a *bridgeAttack) answered(resp *http.Response) {
	var p struct{ Type string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		a.unauthorized.Add(1)
	case resp.StatusCode == http.StatusTooManyRequests && strings.HasSuffix(p.Type, "too_many_streams"):
		a.tooMany.Add(1)
	case resp.StatusCode == http.StatusTooManyRequests && strings.HasSuffix(p.Type, "rate_limited"):
		a.rateLimited.Add(1)
	default:
		a.other.Add(1)
		a.firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, p.Type))
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
