package httpframe_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
)

// echoServer serves, with the production server, a handler that answers
// each request with its body, counting the requests it is given.
func echoServer(t *testing.T) (addr string, served *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served = &atomic.Int64{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- telemetry.ServeListener(ctx, ln, h, testenv.Logger(t)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String(), served
}

// dial opens a raw connection; the deadline only keeps a broken server
// from hanging the test.
func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return c, bufio.NewReader(c)
}

func TestAmbiguousFramingIsRefusedAndTheConnectionClosed(t *testing.T) {
	addr, served := echoServer(t)
	// Each is followed by the request a smuggler hides in it: a server
	// that framed the first by its Content-Length would serve the second.
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	for name, head := range map[string]string{
		"TE then CL":        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		"CL then TE":        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		"lower case":        "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
		"HTTP/1.0 with TE":  "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"after a good one":  "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		"bare LF line ends": "POST / HTTP/1.1\nHost: x\nContent-Length: 5\nTransfer-Encoding: chunked\n\n",
		"spaces in values":  "POST / HTTP/1.1\r\nHost: x\r\nContent-Length:   5  \r\nTransfer-Encoding:\tchunked\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			before := served.Load()
			c, br := dial(t, addr)
			if _, err := io.WriteString(c, head+"0\r\n\r\n"+smuggled); err != nil {
				t.Fatal(err)
			}
			var last *http.Response
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					// The server closed the connection after its answers.
					if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
						t.Fatalf("after %v: %v", last, err)
					}
					break
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.Request = nil; strings.Contains(string(body), "smuggled") {
					t.Fatalf("the smuggled request was served: %s", body)
				}
				last = resp
				if last.StatusCode == http.StatusBadRequest {
					if !last.Close {
						t.Errorf("the 400 does not close the connection: %v", last.Header)
					}
					if !strings.Contains(string(body), "Transfer-Encoding") {
						t.Errorf("the 400 says %q", body)
					}
				}
			}
			if last == nil || last.StatusCode != http.StatusBadRequest {
				t.Fatalf("last answer %v, want 400", last)
			}
			if n := served.Load() - before; n > 1 {
				t.Errorf("the handler served %d requests of the connection", n)
			}
		})
	}
}

// TestFramingFollowedOnOneConnection sends requests of every framing on
// one connection, pipelined, and then one more: all are served, so the
// tracker found each head where net/http did.
func TestFramingFollowedOnOneConnection(t *testing.T) {
	addr, _ := echoServer(t)
	c, br := dial(t, addr)
	requests := []struct{ raw, body string }{
		{"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nabcd\r\n3  \r\nefg\r\n0\r\nX-Trailer: 1\r\n\r\n", "abcdefg"},
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", "hello"},
		{"GET / HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n", ""},
		{"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n1A\r\n" + strings.Repeat("z", 26) + "\r\n0\r\n\r\n", strings.Repeat("z", 26)},
	}
	var all strings.Builder
	for _, r := range requests {
		all.WriteString(r.raw)
	}
	if _, err := io.WriteString(c, all.String()); err != nil {
		t.Fatal(err)
	}
	requests = append(requests, requests[1])
	for i, r := range requests {
		if i == len(requests)-1 {
			if _, err := io.WriteString(c, r.raw); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != r.body || resp.Close {
			t.Fatalf("request %d: %d %q (close %v), want 200 %q and the connection kept", i, resp.StatusCode, body, resp.Close, r.body)
		}
	}
}
