package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/testenv"
)

// listenLimited listens on loopback with a cap of max connections, the
// test's own (from 127.0.0.1, a trusted proxy) not capped per source.
func listenLimited(t *testing.T, max int) (*Limit, *Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limit := New(max, 1, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	l := limit.Listen(ln)
	t.Cleanup(func() { _ = l.Close() })
	return limit, l
}

// serveLimited serves handler on l as the edge does: with the limit's
// ConnState.
func serveLimited(t *testing.T, limit *Limit, l net.Listener, handler http.HandlerFunc) {
	srv := &http.Server{Handler: handler, ConnState: limit.ConnState}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// answered reads an answer 200 on c within the time.
func answered(c net.Conn, r *bufio.Reader, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// closedByServer reports whether the server closed c within the time.
func closedByServer(c net.Conn, r *bufio.Reader, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := r.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// dialAndAsk opens a connection to addr and sends a GET of path on it.
func dialAndAsk(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// connectThrough dials l and accepts the connection: the client's end and
// the server's, both closed at the test's end.
func connectThrough(t *testing.T, l net.Listener) (client, server net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	return client, server
}

// At the cap, a new connection is served at once, and the connection idle
// the longest is closed for it: the one that finished its request first,
// not the one that finished later, and never one busy with a request.
func TestConnectionLimitClosesTheConnectionIdleTheLongest(t *testing.T) {
	limit, l := listenLimited(t, 3)
	release := make(chan struct{})
	serveLimited(t, limit, l, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	addr := l.Addr().String()
	ask := func(path string) (net.Conn, *bufio.Reader) {
		c := dialAndAsk(t, addr, path)
		return c, bufio.NewReader(c)
	}
	busy, busyR := ask("/busy")
	oldest, oldestR := ask("/")
	if !answered(oldest, oldestR, 10*time.Second) {
		t.Fatal("a connection under the cap was not served")
	}
	// The server marks a connection idle after the client has its
	// answer: the newer one is asked only once the oldest is idle, so
	// that a loaded machine cannot mark them in the other order.
	ctx := testenv.Context(t, 30*time.Second)
	testenv.WaitFor(t, ctx, "the oldest connection idle", func() bool { return limit.Idle() == 1 })
	newer, newerR := ask("/")
	if !answered(newer, newerR, 10*time.Second) {
		t.Fatal("a connection under the cap was not served")
	}
	testenv.WaitFor(t, ctx, "two idle connections of three", func() bool {
		return limit.Open() == 3 && limit.Idle() == 2
	})
	fourth, fourthR := ask("/")
	if !answered(fourth, fourthR, 10*time.Second) {
		t.Fatal("a new connection at the cap was not served at once")
	}
	if !closedByServer(oldest, oldestR, 10*time.Second) {
		t.Error("the connection idle the longest was not closed for the new one")
	}
	if closedByServer(newer, newerR, 200*time.Millisecond) {
		t.Error("a connection idle for less time was closed")
	}
	close(release)
	if !answered(busy, busyR, 10*time.Second) {
		t.Error("the busy connection was not answered")
	}
	if got := limit.ClosedIdle.Load(); got != 1 {
		t.Errorf("%d connections closed for new ones, want 1", got)
	}
}

// At the cap, a connection never served a request is closed for a new
// one before a connection served one, however longer that one was idle:
// only a client whose request was accepted keeps its connection.
func TestConnectionLimitClosesAnUnservedConnectionFirst(t *testing.T) {
	limit, l := listenLimited(t, 2)
	serveLimited(t, limit, l, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	addr := l.Addr().String()
	served := dialAndAsk(t, addr, "/")
	servedR := bufio.NewReader(served)
	if !answered(served, servedR, 10*time.Second) {
		t.Fatal("a connection under the cap was not served")
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	testenv.WaitFor(t, testenv.Context(t, 10*time.Second), "two idle connections", func() bool { return limit.Idle() == 2 })
	third := dialAndAsk(t, addr, "/")
	if !answered(third, bufio.NewReader(third), 10*time.Second) {
		t.Fatal("a new connection at the cap was not served at once")
	}
	if !closedByServer(silent, bufio.NewReader(silent), 10*time.Second) {
		t.Error("the connection never served was not closed for the new one")
	}
	if closedByServer(served, servedR, 200*time.Millisecond) {
		t.Error("the connection served a request was closed, though one never served was idle")
	}
}

// At the cap with every connection busy with a request, a new connection
// waits in the accept queue until one closes (each busy one is bounded by
// its deadlines).
func TestConnectionLimitWaitsWhileEveryConnectionIsBusy(t *testing.T) {
	limit, l := listenLimited(t, 2)
	release := make(chan struct{}, 2)
	serveLimited(t, limit, l, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	addr := l.Addr().String()
	first, second := dialAndAsk(t, addr, "/busy"), dialAndAsk(t, addr, "/busy")
	ctx := testenv.Context(t, 30*time.Second)
	testenv.WaitFor(t, ctx, "two busy connections", func() bool {
		return limit.Open() == 2 && limit.Idle() == 0
	})
	third := dialAndAsk(t, addr, "/")
	thirdR := bufio.NewReader(third)
	// Were it accepted, it would be answered within milliseconds.
	if answered(third, thirdR, 300*time.Millisecond) {
		t.Fatal("a connection over the cap was served while every connection was busy")
	}
	release <- struct{}{}
	release <- struct{}{}
	for _, c := range []net.Conn{first, second} {
		if !answered(c, bufio.NewReader(c), 10*time.Second) {
			t.Fatal("a busy connection was not answered")
		}
	}
	_ = first.Close()
	if !answered(third, thirdR, 10*time.Second) {
		t.Fatal("the waiting connection was not served once one was free")
	}
	if limit.max != 2 {
		t.Errorf("max = %d, want 2", limit.max)
	}
}

// A peer holds at most its cap of connections: one more is closed as soon
// as it is accepted, while another peer's is served; a trusted proxy is
// not capped.
func TestConnectionLimitPerSource(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limit := New(10, 1, []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")})
	l := limit.Listen(ln)
	t.Cleanup(func() { _ = l.Close() })
	serveLimited(t, limit, l, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	from := func(src string) (net.Conn, *bufio.Reader) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	first, firstR := from("127.0.0.2")
	if !answered(first, firstR, 10*time.Second) {
		t.Fatal("a peer's first connection was not served")
	}
	second, secondR := from("127.0.0.2")
	if !closedByServer(second, secondR, 10*time.Second) {
		t.Error("a peer's connection over its cap was not closed")
	}
	other, otherR := from("127.0.0.4")
	if !answered(other, otherR, 10*time.Second) {
		t.Error("another peer's connection was not served")
	}
	for range 3 {
		c, r := from("127.0.0.3")
		if !answered(c, r, 10*time.Second) {
			t.Error("a trusted proxy's connection was capped")
		}
	}
	if got := limit.RefusedBySource.Load(); got != 1 {
		t.Errorf("%d connections refused by the per-source cap, want 1", got)
	}
}

// A connection closed twice gives back one slot; closing the listener
// ends an Accept that waits for one.
func TestConnectionLimitCloseReleasesOnceAndEndsAWaitingAccept(t *testing.T) {
	limit, l := listenLimited(t, 1)
	_, c := connectThrough(t, l)
	_ = c.Close()
	_ = c.Close()
	if got := limit.Open(); got != 0 {
		t.Fatalf("open connections after a double close = %d, want 0", got)
	}
	// The slot is free: one more connection is accepted, and the cap is
	// then full again.
	connectThrough(t, l)
	waiting := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		waiting <- err
	}()
	_ = l.Close()
	select {
	case err := <-waiting:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept waiting for a slot returned %v after Close, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept waiting for a slot did not return after Close")
	}
}

// CloseWrite reaches the TCP connection: the client reads the end of the
// stream while its own side stays open, as net/http needs to answer
// before it closes a connection whose body it did not read.
func TestConnectionLimitPassesCloseWriteThrough(t *testing.T) {
	_, l := listenLimited(t, 1)
	client, c := connectThrough(t, l)
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("an accepted connection has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client read %d bytes, %v after the server's CloseWrite, want EOF", n, err)
	}
	if _, err := io.WriteString(client, "still open"); err != nil {
		t.Fatalf("the client's side was closed too: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len("still open"))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "still open" {
		t.Fatalf("server read %q, %v", got, err)
	}
}

// fakeConn is a connection that only knows whether it was closed.
type fakeConn struct {
	net.Conn
	closed bool
}

func (c *fakeConn) Close() error { c.closed = true; return nil }

// The connection tracker against a model: over any history of connections
// from a few sources arriving, starting and ending requests and closing,
// it never holds more than its cap open nor more than the per-source cap
// of one source; a connection over its source's cap is refused; one at the
// cap is admitted by closing exactly one connection, the one idle the
// longest of those never served a request or, when there are none, of
// those served (in the model, the first of the fresh queue, else of the
// served one), never a busy one; and once every connection is closed,
// nothing is counted.
func TestConnectionTrackerAgainstAModel(t *testing.T) {
	sources := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::")}
	rapid.Check(t, func(t *rapid.T) {
		maxOpen := rapid.IntRange(1, 8).Draw(t, "max")
		perSource := rapid.IntRange(1, maxOpen).Draw(t, "per source")
		l := New(maxOpen, perSource, nil)
		type modelConn struct {
			tc   *conn
			raw  *fakeConn
			src  netip.Addr
			busy bool
		}
		var open []*modelConn
		// fresh and served are the model's queues of idle connections.
		var fresh, served []*modelConn
		bySource := map[netip.Addr]int{}
		remove := func(q []*modelConn, c *modelConn) []*modelConn {
			for i, x := range q {
				if x == c {
					return append(q[:i], q[i+1:]...)
				}
			}
			return q
		}
		drop := func(c *modelConn) {
			fresh, served, open = remove(fresh, c), remove(served, c), remove(open, c)
			bySource[c.src]--
		}
		for range rapid.IntRange(1, 100).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 3).Draw(t, "op"); {
			case op == 0 || len(open) == 0:
				src := rapid.SampledFrom(sources).Draw(t, "source")
				if bySource[src] < perSource && len(open) == maxOpen && len(fresh)+len(served) == 0 {
					// Admit would wait for a connection to be idle or to
					// close: shown by TestConnectionLimitWaitsWhileEveryConnectionIsBusy.
					continue
				}
				raw := &fakeConn{}
				tc := l.admit(raw, src, true)
				if bySource[src] >= perSource {
					if tc != nil {
						t.Fatalf("admitted a connection of %s, which holds %d of %d", src, bySource[src], perSource)
					}
					continue
				}
				if tc == nil {
					t.Fatalf("refused a connection of %s, which holds %d of %d", src, bySource[src], perSource)
				}
				if len(open) == maxOpen {
					victim := append(fresh, served...)[0]
					if !victim.raw.closed {
						t.Fatalf("at the cap, the connection to close (never served: %v) was not", slices.Contains(fresh, victim))
					}
					drop(victim)
				}
				c := &modelConn{tc: tc, raw: raw, src: src}
				open = append(open, c)
				fresh = append(fresh, c)
				bySource[src]++
			case op == 1:
				c := open[rapid.IntRange(0, len(open)-1).Draw(t, "started")]
				l.ConnState(c.tc, http.StateActive)
				fresh, served = remove(fresh, c), remove(served, c)
				c.busy = true
			case op == 2:
				c := open[rapid.IntRange(0, len(open)-1).Draw(t, "ended")]
				l.ConnState(c.tc, http.StateIdle)
				if c.busy {
					served = append(served, c)
				}
				c.busy = false
			default:
				c := open[rapid.IntRange(0, len(open)-1).Draw(t, "closed")]
				_ = c.tc.Close()
				_ = c.tc.Close()
				drop(c)
			}
			for _, c := range open {
				if c.raw.closed {
					t.Fatalf("an open connection (busy %v) was closed", c.busy)
				}
			}
			if got := l.Open(); got != int64(len(open)) || got > int64(maxOpen) {
				t.Fatalf("%d open (model %d) of %d", got, len(open), maxOpen)
			}
			if l.fresh.Len() != len(fresh) || l.served.Len() != len(served) {
				t.Fatalf("%d idle never served and %d served, model %d and %d", l.fresh.Len(), l.served.Len(), len(fresh), len(served))
			}
			for _, src := range sources {
				if l.bySource[src] != bySource[src] || bySource[src] > perSource {
					t.Fatalf("%s holds %d (model %d) of %d", src, l.bySource[src], bySource[src], perSource)
				}
			}
		}
		for _, c := range open {
			_ = c.tc.Close()
		}
		if l.Open() != 0 || l.Idle() != 0 || len(l.bySource) != 0 {
			t.Fatalf("after every close: %d open, %d idle, %d sources", l.Open(), l.Idle(), len(l.bySource))
		}
	})
}
