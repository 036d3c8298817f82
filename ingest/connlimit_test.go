package ingest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/testenv"
)

// listenLimited listens on loopback with a cap of max connections.
func listenLimited(t *testing.T, max int) (*connectionLimit, *limitedListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limit := newConnectionLimit(max)
	l := limit.listen(ln)
	t.Cleanup(func() { _ = l.Close() })
	return limit, l
}

// dialAndAsk opens a connection to addr and sends a GET on it.
func dialAndAsk(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
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

// At the cap, a new connection is not served until an open one closes,
// and the gauge counts the open ones, once each however often they are
// closed.
func TestConnectionLimitHoldsNewConnectionsUntilOneCloses(t *testing.T) {
	limit, l := listenLimited(t, 2)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	ctx := testenv.Context(t, 30*time.Second)
	addr := l.Addr().String()

	answered := func(c net.Conn, within time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(within))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	first, second := dialAndAsk(t, addr), dialAndAsk(t, addr)
	for _, c := range []net.Conn{first, second} {
		if !answered(c, 10*time.Second) {
			t.Fatal("a connection under the cap was not served")
		}
	}
	if got := limit.openConnections(); got != 2 {
		t.Fatalf("open connections = %d, want 2", got)
	}
	// The third waits in the accept queue: were it accepted, it would be
	// answered within milliseconds.
	third := dialAndAsk(t, addr)
	if answered(third, 300*time.Millisecond) {
		t.Fatal("a connection over the cap was served while the cap was full")
	}
	_ = first.Close()
	if !answered(third, 10*time.Second) {
		t.Fatal("the waiting connection was not served once one closed")
	}
	testenv.WaitFor(t, ctx, "two open connections after one closed and one came in", func() bool {
		return limit.openConnections() == 2
	})
	if limit.max() != 2 {
		t.Errorf("max = %d, want 2", limit.max())
	}
}

// A connection closed twice gives back one slot; closing the listener
// ends an Accept that waits for one.
func TestConnectionLimitCloseReleasesOnceAndEndsAWaitingAccept(t *testing.T) {
	limit, l := listenLimited(t, 1)
	_, c := connectThrough(t, l)
	_ = c.Close()
	_ = c.Close()
	if got := limit.openConnections(); got != 0 {
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
