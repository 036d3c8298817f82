package ingest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Slow-loris parameters. The trickled header is far longer than can be sent
// before trickleBound at one byte per trickleInterval, so only the server
// can end a slow connection before the bound: a connection still open at the
// bound means the server would have held it as long as the client liked.
const (
	slowConnections = 200
	trickleInterval = 50 * time.Millisecond
	trickleBound    = 20 * time.Second
)

// slowHeader is a request head that is never completed in time.
var slowHeader = "POST /v1/webhooks/presence HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nX-Padding: " +
	strings.Repeat("p", 2*int(trickleBound/trickleInterval)) + "\r\n\r\n"

// slowLoris holds many connections that each send a request head one byte
// at a time.
type slowLoris struct {
	open          atomic.Int64 // connections the server has not dropped yet
	droppedByPeer atomic.Int64 // connections the server closed
	outlivedBound atomic.Int64 // connections still open at the bound
	// refused counts connections that could not be opened or send their
	// first byte; firstRefusal says why.
	refused       atomic.Int64
	firstRefusal  atomic.Pointer[error]
	done          sync.WaitGroup
	firstByteSent sync.WaitGroup
}

func (s *slowLoris) refuse(err error) {
	s.refused.Add(1)
	s.firstRefusal.CompareAndSwap(nil, &err)
	s.firstByteSent.Done()
}

// start dials n connections to addr and trickles slowHeader on each until
// the server drops it or ctx ends. It returns once every connection has
// sent its first byte, so the server is holding all of them.
func (s *slowLoris) start(ctx context.Context, addr string, n int) {
	s.firstByteSent.Add(n)
	s.done.Add(n)
	for range n {
		go s.trickle(ctx, addr)
	}
	s.firstByteSent.Wait()
}

func (s *slowLoris) trickle(ctx context.Context, addr string) {
	defer s.done.Done()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		s.refuse(err)
		return
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{slowHeader[0]}); err != nil {
		s.refuse(err)
		return
	}
	s.open.Add(1)
	s.firstByteSent.Done()
	tick := time.NewTicker(trickleInterval)
	defer tick.Stop()
	for i := 1; i < len(slowHeader); i++ {
		select {
		case <-ctx.Done():
			s.open.Add(-1)
			s.outlivedBound.Add(1)
			return
		case <-tick.C:
		}
		if _, err := conn.Write([]byte{slowHeader[i]}); err != nil {
			// Writing to a connection the peer closed fails at the latest
			// on the write after the one the peer answered with a reset.
			s.open.Add(-1)
			s.droppedByPeer.Add(1)
			return
		}
	}
	// Sent whole: impossible before the bound by construction of slowHeader.
	s.open.Add(-1)
	s.outlivedBound.Add(1)
}

// TestSlowClientsDoNotStarveTheEdge holds many connections open that
// trickle a request head one byte every 50 ms, against the edge served with
// the production server settings, and checks that a normal publisher's
// signed webhooks are accepted all along; then that the server dropped
// every slow connection by itself (its header read timeout), rather than
// holding them for as long as the clients liked.
func TestSlowClientsDoNotStarveTheEdge(t *testing.T) {
	cfg, presence := presenceConfig(t, specSecret)
	brokers := testenv.Fake(t)
	testenv.Topics(t, testenv.Context(t, 30*time.Second), cfg, brokers).Close()
	routes, _ := edgeRoutes(t, brokers, []*config.Stream{presence}, Options{Now: fixedClock})
	baseURL := serveProduction(t, routes)

	trickleCtx, stopTrickling := context.WithTimeout(context.Background(), trickleBound)
	var loris slowLoris
	// Registered after the server, so it runs before the server's shutdown:
	// every slow connection is closed and its goroutine gone first.
	t.Cleanup(func() {
		stopTrickling()
		loris.done.Wait()
	})
	loris.start(trickleCtx, strings.TrimPrefix(baseURL, "http://"), slowConnections)
	if n := loris.refused.Load(); n > 0 {
		t.Fatalf("%d of %d slow connections could not be opened or send a byte: %v", n, slowConnections, *loris.firstRefusal.Load())
	}

	// A normal publisher, on its own connections, for as long as any slow
	// connection is held.
	publisher := &http.Client{Transport: &http.Transport{}}
	defer publisher.CloseIdleConnections()
	var accepted, whileHeld int
	for n := 0; loris.open.Load() > 0 && trickleCtx.Err() == nil; n++ {
		id := fmt.Sprintf("evt-slow-%d", n)
		d := signedDelivery(t, specSecret, "msg_"+id, testenv.Presence{EventID: id, User: "alice", Version: int64(n + 1)}.Body())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := d.sendWith(ctx, publisher, baseURL)
		held := loris.open.Load()
		cancel()
		if err != nil {
			t.Fatalf("webhook %d, with %d slow connections held: %v", n, held, err)
		}
		if r.status != http.StatusAccepted {
			t.Fatalf("webhook %d, with %d slow connections held: status %d, body %s", n, held, r.status, r.body)
		}
		accepted++
		if held > 0 {
			whileHeld++
		}
		time.Sleep(10 * time.Millisecond) // a steady publisher, not a flood
	}
	stopTrickling()
	loris.done.Wait()

	t.Logf("%d webhooks accepted, %d of them while slow connections were held", accepted, whileHeld)
	if whileHeld == 0 {
		t.Errorf("no webhook was answered while slow connections were held, so this proves nothing")
	}
	if n := loris.outlivedBound.Load(); n > 0 {
		t.Errorf("%d of %d slow connections were still open after %s: the server does not time out slow request heads",
			n, slowConnections, trickleBound)
	}
	if got := loris.droppedByPeer.Load(); got != slowConnections {
		t.Errorf("the server dropped %d of %d slow connections", got, slowConnections)
	}
}
