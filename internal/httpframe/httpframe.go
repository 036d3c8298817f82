// Package httpframe refuses HTTP/1.1 requests whose body framing is
// ambiguous, as RFC 9112 §6.3 asks of a server: a request with both
// Transfer-Encoding and Content-Length, or an HTTP/1.0 request with
// Transfer-Encoding, is answered 400 and its connection closed.
//
// net/http cannot do it alone: it serves such a request by its
// Transfer-Encoding, keeps the connection, and deletes both headers before
// a handler runs, so no handler can tell. A proxy in front that framed the
// same bytes by Content-Length would see other requests on the connection
// than the server (request smuggling). So the check is made on the bytes:
// Listener follows each connection's requests as net/http reads them, head
// by head and body by body, and Handler answers a connection on which an
// ambiguous head arrived with 400 and Connection: close from then on.
package httpframe

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/driftguard/driftguard/internal/problem"
)

// Listener follows the framing of every connection ln accepts. Serve with
// ConnContext as the server's ConnContext and Handler around its handler.
// ln must yield plaintext HTTP/1 (a TLS listener's connections, which the
// tracker could not read, would all be refused).
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c}, nil
}

// conn tracks the requests read from it.
type conn struct {
	net.Conn
	mu sync.Mutex
	t  tracker
	// refused is set once an ambiguous head, or bytes the tracker cannot
	// follow, arrived: every request served after is refused.
	refused atomic.Bool
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.refused.Load() {
		// The bytes are followed before net/http sees them, so a head is
		// judged before its request reaches a handler.
		c.mu.Lock()
		if !c.t.feed(p[:n]) {
			c.refused.Store(true)
		}
		c.mu.Unlock()
	}
	return n, err
}

// NetConn is the connection the listener accepted, for an http.Server's
// ConnState that follows its own listener's connections.
func (c *conn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes a TCP connection, as net/http does before it
// closes one whose request body it did not read.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

type connKey struct{}

// ConnContext is an http.Server's ConnContext that lets Handler find the
// request's connection.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connKey{}, fc)
	}
	return ctx
}

// Handler refuses the requests of a connection whose framing is
// ambiguous, with 400 and Connection: close, and passes the others to h.
// A request pipelined on the same connection ahead of the ambiguous one
// may be refused too: the connection is an attack's, not a client's.
func Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*conn); ok && c.refused.Load() {
			w.Header().Set("Connection", "close")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			problem.Write(w, http.StatusBadRequest, "framing",
				"a request may not carry both Transfer-Encoding and Content-Length (RFC 9112 section 6.3), nor an HTTP/1.0 one Transfer-Encoding", nil)
			return
		}
		h.ServeHTTP(w, r)
	})
}
