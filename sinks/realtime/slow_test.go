package realtime_test

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// slowClient opens a stream's events over a connection whose receive
// buffer is small, so the bridge's writes block as soon as it stops
// reading, and returns a reader of its lines.
func slowClient(t *testing.T, e *bridgeEnv, stream, tok, cursor string) (*bufio.Reader, net.Conn) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	conn, err := d.DialContext(e.ctx, "tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /v1/streams/%s/events?cursor=%s HTTP/1.1\r\nHost: bridge\r\nConnection: close\r\nAuthorization: Bearer %s\r\n\r\n", stream, cursor, tok)
	r := bufio.NewReaderSize(conn, 512)
	status, err := r.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("events: %q %v", status, err)
	}
	return r, conn
}

// nextEvent reads lines up to the end of the next event and returns its
// event name.
func nextEvent(r *bufio.Reader) (string, error) {
	name := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return name, err
		}
		line = strings.TrimRight(line, "\r\n")
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
		}
		if line == "" && name != "" {
			return name, nil
		}
	}
}

// Clients slower than the stream are let go, so that what the bridge
// holds stays bounded: the log of bridge.window changes per partition,
// shared by every client, and per client its cursor, the write in
// progress, the HTTP server's 4 KiB buffer and a 64 KiB kernel send
// buffer. A client reading 100 messages a second behind a burst gets
// `event: reset` and its connection ends; one reading a message a second,
// or nothing, fills its buffers and is cut off when a write has waited
// 10 s (the reset frame could not reach it); a client that keeps up is
// served on. Every one of them is counted in resets_total.
func TestSlowClientsAreLetGo(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) {
		// The log holds the whole burst; a client more than 50 changes
		// behind for 5 s is reset.
		c.Bridge.Window, c.Bridge.ClientLag = 2000, 50
	}, "presence")
	e.publish("presence", "k0", 1, `{"presence":"ONLINE"}`)
	tok := e.token("watcher", "presence")
	testenv.WaitFor(t, e.ctx, "the first state", func() bool { _, ents := e.snapshot("presence", tok, 10); return len(ents) == 1 })
	cursor, _ := e.snapshot("presence", tok, 10)
	var slow []*bufio.Reader
	for range 20 {
		r, _ := slowClient(t, e, "presence", tok, cursor)
		slow = append(slow, r)
	}
	fast, _ := e.open(e.ctx, "presence", tok, cursor, "")
	defer fast.close()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// The first slow client reads 100 messages a second, the second one a
	// second, the others none.
	type ending struct {
		last string
		n    int
	}
	endings := make([]chan ending, 2)
	// hurry ends the pacing: once the bridge has let the clients go, what
	// their buffers still hold is read at full speed.
	hurry := make(chan struct{})
	for i, pace := range []time.Duration{10 * time.Millisecond, time.Second} {
		endings[i] = make(chan ending, 1)
		go func() {
			var end ending
			for {
				select {
				case <-hurry:
				case <-time.After(pace):
				}
				name, err := nextEvent(slow[i])
				if err != nil {
					endings[i] <- end
					return
				}
				end.last, end.n = name, end.n+1
			}
		}()
	}
	const changes = 3000
	payload := `{"presence":"ONLINE","note":"` + strings.Repeat("x", 200) + `"}`
	for v := range int64(changes) {
		e.publishAsync("presence", fmt.Sprintf("k%d", v%7), 2+v, payload)
	}
	if err := e.cl.Flush(e.ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, e.ctx, "the fast client at the last change", func() bool {
		for {
			select {
			case ev := <-fast.events:
				if strings.Contains(ev.data, fmt.Sprintf(`"version":%d`, 1+changes)) {
					return true
				}
			default:
				return false
			}
		}
	})
	testenv.WaitFor(t, e.ctx, "every slow client let go", func() bool {
		return gathered(t, e, "driftguard_bridge_resets_total") >= 20
	})
	close(hurry)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Errorf("the heap grew by %d MiB through %d changes to 20 slow clients", grew>>20, changes)
	}
	if end := <-endings[0]; end.last != "reset" || end.n >= changes {
		t.Errorf("the client reading 100 a second ended after %d messages with %q, want reset", end.n, end.last)
	}
	if end := <-endings[1]; end.n >= changes {
		t.Errorf("the client reading one a second read all %d messages", end.n)
	}
	if n := gathered(t, e, "driftguard_bridge_clients"); n != 1 {
		t.Errorf("%v clients connected after the resets, want the fast one", n)
	}
}

// gathered sums a metric's series on the bridge's registry: counters' and
// gauges' values, histograms' counts of observations.
func gathered(t testing.TB, e *bridgeEnv, name string) float64 {
	t.Helper()
	families, err := e.ops.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}
