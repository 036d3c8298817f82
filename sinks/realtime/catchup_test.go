package realtime_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/sinks/realtime"
)

// Clients resuming at once from cursors older than the log, served by the
// stream's shared catch-up readers while changes keep coming: each client
// receives exactly the changes after its cursor (those at or above its
// offset of their partition), each once, each key's in order, and nothing
// before its cursor; slow clients, let go by a sweep that will not wait
// for them, go on from where they were in a later one. The log holds 20
// changes a partition (60 in all, more than come while the clients
// resume, so that no live client is left behind by it), and at least 60
// changes follow the last cursor, so nearly every resume reads the
// topic. No more
// readers run at once than bridge.catchup_readers allows (sampled), and a
// sweep serves several clients.
func TestCatchUpsShareReadersAndStayExact(t *testing.T) {
	testenv.FewerChecks(t, 15)
	realtime.SetSweepBounds(t, 2, 30*time.Millisecond)
	readers := 2
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) {
		c.Bridge.Window, c.Bridge.CatchupReaders, c.Bridge.AcceptRate, c.Bridge.AcceptBurst = 20, readers, 10000, 10000
	}, "presence")
	tok := e.token("alice", "presence")
	type published struct {
		partition int32
		offset    int64
		change    string
	}
	var mu sync.Mutex
	var log []published
	versions := map[string]int64{}
	history := 0
	rapid.Check(t, func(rt *rapid.T) {
		history++
		publish := func(n int, label string, pause time.Duration) {
			for range n {
				key := fmt.Sprintf("h%d-k%d", history, rapid.IntRange(0, 9).Draw(rt, label))
				versions[key]++
				change := fmt.Sprintf("%s@%d", key, versions[key])
				e.cl.Produce(e.ctx, stateRecord("presence", key, versions[key], fmt.Sprintf(`{"v":%d}`, versions[key])), func(r *kgo.Record, err error) {
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					log = append(log, published{r.Partition, r.Offset, change})
					mu.Unlock()
				})
				time.Sleep(pause)
			}
			if err := e.cl.Flush(e.ctx); err != nil {
				rt.Fatal(err)
			}
		}
		// Cursors at points of the history, as clients kept them.
		cursors := []string{}
		for range rapid.IntRange(1, 5).Draw(rt, "cursors") {
			publish(rapid.IntRange(0, 60).Draw(rt, "changes before the cursor"), "key before", 0)
			testenv.WaitFor(t, e.ctx, "the bridge has read the changes", func() bool {
				_, ents := e.snapshot("presence", tok, 1000)
				return holdsVersions(ents, versions)
			})
			c, _ := e.snapshot("presence", tok, 1000)
			cursors = append(cursors, c)
		}
		publish(rapid.IntRange(60, 150).Draw(rt, "changes after the last cursor"), "key later", 0)
		testenv.WaitFor(t, e.ctx, "the bridge has read the changes", func() bool {
			_, ents := e.snapshot("presence", tok, 1000)
			return holdsVersions(ents, versions)
		})

		// Clients resume from them, all at once, while more changes come.
		n := rapid.IntRange(1, 25).Draw(rt, "clients")
		type resumer struct {
			cursor string
			slow   bool
			got    []string
			err    error
		}
		rs := make([]*resumer, n)
		for i := range rs {
			rs[i] = &resumer{cursor: rapid.SampledFrom(cursors).Draw(rt, "cursor"), slow: rapid.IntRange(0, 3).Draw(rt, "slow") == 0}
		}
		after := rapid.IntRange(0, 30).Draw(rt, "changes while they resume")
		ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
		defer cancel()
		over := make(chan float64, 1)
		sampling, stopSampling := context.WithCancel(ctx)
		go func() {
			for sampling.Err() == nil {
				if v, _ := e.metric("driftguard_bridge_catchup_readers"); v > float64(readers) {
					select {
					case over <- v:
					default:
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
		mu.Lock()
		total := len(log) + after
		mu.Unlock()
		var wg sync.WaitGroup
		for _, r := range rs {
			want := 0
			c, err := realtime.ParseCursor(r.cursor)
			if err != nil {
				rt.Fatal(err)
			}
			mu.Lock()
			for _, p := range log {
				if p.offset < c.Offsets[p.partition] {
					want-- // covered by the cursor
				}
			}
			mu.Unlock()
			want += total
			// A slow client is slow through what it catches up on; live,
			// it keeps up (one that does not is reset, rightly).
			wg.Go(func() { r.got, r.err = follow(ctx, e.url, tok, r.cursor, want, r.slow) })
		}
		publish(after, "key while resuming", time.Millisecond)
		wg.Wait()
		stopSampling()
		select {
		case v := <-over:
			rt.Fatalf("%v catch-up readers ran at once, over bridge.catchup_readers (%d)", v, readers)
		default:
		}
		for i, r := range rs {
			c, _ := realtime.ParseCursor(r.cursor)
			var want []string
			mu.Lock()
			for _, p := range log {
				if p.offset >= c.Offsets[p.partition] {
					want = append(want, p.change)
				}
			}
			mu.Unlock()
			if r.err != nil || !sameChanges(r.got, want) {
				rt.Fatalf("client %d (slow %v): %v; got\n%v\nwant the changes after its cursor, each once, keys in order\n%v", i, r.slow, r.err, r.got, want)
			}
		}
	})
	sweeps, served := e.metric("driftguard_bridge_catchup_sweep_clients")
	resumed, _ := e.metric("driftguard_bridge_reconnects_total", "outcome", "resumed")
	t.Logf("%d histories: %v catch-up sweeps served %v catch-ups; %v reconnects resumed", history, sweeps, served, resumed)
	if sweeps == 0 || served < sweeps {
		t.Fatalf("%v sweeps served %v catch-ups", sweeps, served)
	}
}

// holdsVersions reports whether the entities hold every key of want at
// its version.
func holdsVersions(ents []entityJSON, want map[string]int64) bool {
	held := map[string]int64{}
	for _, e := range ents {
		held[e.Key] = e.Version
	}
	for k, v := range want {
		if held[k] != v {
			return false
		}
	}
	return true
}

// sameChanges reports whether got holds exactly want's changes, once
// each, and each key's in want's order (keys on different partitions may
// come in another order).
func sameChanges(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	byKey := func(cs []string) map[string][]string {
		m := map[string][]string{}
		for _, c := range cs {
			k, _, _ := strings.Cut(c, "@")
			m[k] = append(m[k], c)
		}
		return m
	}
	g, w := byKey(got), byKey(want)
	if len(g) != len(w) {
		return false
	}
	for k, cs := range w {
		if strings.Join(g[k], " ") != strings.Join(cs, " ") {
			return false
		}
	}
	return true
}

// keyVersion is a state event's key@version.
func keyVersion(t interface{ Fatalf(string, ...any) }, ev sseEvent) string {
	var ent entityJSON
	if err := json.Unmarshal([]byte(ev.data), &ent); err != nil || ev.event != "state" {
		t.Fatalf("event %+v: %v", ev, err)
	}
	return fmt.Sprintf("%s@%d", ent.Key, ent.Version)
}

// follow reads a stream's events from cursor until it has n changes, as
// key@version; a slow client sleeps after each of the first half.
func follow(ctx context.Context, base, tok, cursor string, n int, slow bool) ([]string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/streams/presence/events?cursor="+cursor, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("events: %d", resp.StatusCode)
	}
	var got []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	var ev sseEvent
	for len(got) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && ev.event != "":
			if ev.event != "state" {
				return got, fmt.Errorf("event %s: %s", ev.event, ev.data)
			}
			var ent entityJSON
			if err := json.Unmarshal([]byte(ev.data), &ent); err != nil {
				return got, err
			}
			got = append(got, fmt.Sprintf("%s@%d", ent.Key, ent.Version))
			ev = sseEvent{}
			if slow && len(got) < n/2 {
				time.Sleep(2 * time.Millisecond)
			}
		case strings.HasPrefix(line, "event: "):
			ev.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
	if len(got) < n {
		return got, fmt.Errorf("%d changes of %d, then %v", len(got), n, sc.Err())
	}
	return got, nil
}

// metric is the value of a gauge or counter of the bridge (or a
// histogram's count, and its sum), added over the series whose labels
// include the name-value pairs given.
func (e *bridgeEnv) metric(name string, labels ...string) (value, sum float64) {
	e.t.Helper()
	families, err := e.ops.Registry.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == labels[i] && l.GetValue() == labels[i+1] }) {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				value += m.GetGauge().GetValue()
			case m.Counter != nil:
				value += m.GetCounter().GetValue()
			case m.Histogram != nil:
				value += float64(m.GetHistogram().GetSampleCount())
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return value, sum
}
