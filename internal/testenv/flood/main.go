// Command flood attacks an ingest edge the way the fault tests need:
// junk at the body limit from many connections, as fast as they go, half
// of it unsigned and half signed with a wrong key; more wrongly signed
// junk from connections that each send their body at a slow pace, so
// that many bodies are in flight at once; connections from chosen local
// addresses that hold what they can without the secret (a head declaring
// a large body, then one byte; or nothing at all), opened again as soon
// as the edge ends them; and meanwhile a publisher sends valid presence
// webhooks at a steady pace. Then it prints what all of
// them saw as JSON. The publisher and the attackers are best run as two
// of these processes, as they would be two machines: the scheduler then
// shares the CPU between them, not the attack's goroutines. It is
// a process of its own, built without the race detector, so that what it
// measures is the edge's latency, not the instrumented test's.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
)

func main() {
	url := flag.String("url", "", "the stream's webhook URL")
	secret := flag.String("secret", "", "the stream's Standard Webhooks secret, for the valid webhooks")
	bodyBytes := flag.Int("body-bytes", 256<<10, "size of each junk body")
	connections := flag.Int("connections", 128, "junk connections sending as fast as they go")
	slowConnections := flag.Int("slow-connections", 0, "junk connections sending their bodies at -slow-rate")
	slowRate := flag.Int("slow-rate", 32<<10, "bytes a second of each slow connection")
	duration := flag.Duration("for", 30*time.Second, "how long to flood")
	every := flag.Duration("valid-every", 50*time.Millisecond, "the pace of valid webhooks; 0 sends none")
	firstID := flag.Int("first-id", 0, "the number of the first valid event")
	sources := flag.String("sources", "127.0.0.1", "local addresses the attacking connections come from, comma-separated: the junk connections spread over them, and each has -slow-bodies and -hoard of its own")
	slowBodies := flag.String("slow-bodies", "", "connections per source that each send a head declaring a body of LENGTH, then one byte: COUNTxLENGTH, comma-separated")
	hoard := flag.Int("hoard", 0, "connections per source left idle, half of them after one request for a stream that does not exist")
	redial := flag.Duration("redial", 200*time.Millisecond, "how long a -slow-bodies or -hoard connection waits to open again once the edge ended it")
	flag.Parse()
	if *url == "" || *secret == "" && *every > 0 {
		fmt.Fprintln(os.Stderr, "flood: -url, and -secret for valid webhooks, are required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()

	var junk junkCounter
	var wg sync.WaitGroup
	body := bytes.Repeat([]byte("j"), *bodyBytes)
	from := parseSources(*sources)
	// Each junk connection sends its requests one after the other, from
	// the sources in turn.
	for c := range *connections + *slowConnections {
		rate := 0
		if c >= *connections {
			rate = *slowRate
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			junk.flood(ctx, sourceTransport(from[c%len(from)]), *url, body, rate == 0 && c%2 == 0, rate)
		}()
	}
	slow := newHolder(*url, parseSources(*sources), *redial)
	for length, n := range parseSlowBodies(*slowBodies) {
		slow.start(ctx, n, slow.slowBody(length))
	}
	hoarder := newHolder(*url, parseSources(*sources), *redial)
	hoarder.start(ctx, *hoard, hoarder.idle)
	var valid testenv.FloodValid
	if *every > 0 {
		valid = publish(ctx, *url, *secret, *every, *firstID)
	}
	<-ctx.Done()
	wg.Wait()
	report := testenv.FloodReport{Junk: junk.report(), Valid: valid, Slow: slow.wait(), Hoard: hoarder.wait()}
	if err := json.NewEncoder(os.Stdout).Encode(report); err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		os.Exit(1)
	}
}

// publish sends a valid webhook every interval until ctx ends, each from
// a goroutine of its own so that a slow answer does not delay the next.
func publish(ctx context.Context, url, secret string, every time.Duration, first int) testenv.FloodValid {
	publisher := &webhook.Publisher{URL: url, Secret: secret,
		Client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	var mu sync.Mutex
	var out testenv.FloodValid
	var wg sync.WaitGroup
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := first; ctx.Err() == nil; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("evt-valid-%d", n)
			body := testenv.Presence{EventID: id, User: fmt.Sprintf("user-%d", n%50), Version: int64(n + 1)}.Body()
			start := time.Now()
			// Its own deadline: the end of the flood does not cut it short.
			resp, err := publisher.Post(context.Background(), "msg_"+id, body)
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || resp.Status != http.StatusAccepted {
				out.Refused = append(out.Refused, fmt.Sprintf("%s: %d %v %s", id, resp.Status, err, resp.Body))
				return
			}
			out.Accepted = append(out.Accepted, id)
			out.Latencies = append(out.Latencies, took.Seconds())
		}()
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	wg.Wait()
	return out
}

type junkCounter struct {
	sent, unsigned, bodiesRead, overBudget, transport, other atomic.Int64
	firstOther                                               atomic.Pointer[string]
}

// flood sends junk until ctx ends: without signature headers when
// unsigned (refused before the body is read), else with a current
// timestamp and a signature of a random key (read, then refused); each
// body at rate bytes a second, or as fast as it goes for 0.
func (f *junkCounter) flood(ctx context.Context, transport *http.Transport, url string, body []byte, unsigned bool, rate int) {
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	wrong := make([]byte, 32)
	for n := 0; ctx.Err() == nil; n++ {
		var r io.Reader = bytes.NewReader(body)
		if rate > 0 {
			r = &pacedReader{r: r, rate: rate}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, r)
		if err != nil {
			panic(err)
		}
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
		if !unsigned {
			_, _ = rand.Read(wrong)
			req.Header.Set("webhook-id", "msg_junk_"+strconv.Itoa(n))
			req.Header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
			req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(wrong))
		}
		f.sent.Add(1)
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				f.transport.Add(1)
			}
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusUnauthorized && unsigned:
			f.unsigned.Add(1)
		case resp.StatusCode == http.StatusUnauthorized:
			f.bodiesRead.Add(1)
		case resp.StatusCode == http.StatusServiceUnavailable:
			f.overBudget.Add(1)
		default:
			f.other.Add(1)
			what := fmt.Sprintf("status %d (unsigned %v)", resp.StatusCode, unsigned)
			f.firstOther.CompareAndSwap(nil, &what)
		}
	}
}

// sourceTransport is a transport whose connections come from src.
func sourceTransport(src net.IP) *http.Transport {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}, Timeout: 5 * time.Second}
	return &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1}
}

// pacedReader reads r at rate bytes a second, in 4 KiB steps.
type pacedReader struct {
	r    io.Reader
	rate int
}

func (p *pacedReader) Read(b []byte) (int, error) {
	const step = 4 << 10
	time.Sleep(time.Duration(step) * time.Second / time.Duration(p.rate))
	return p.r.Read(b[:min(len(b), step)])
}

func (f *junkCounter) report() testenv.FloodJunk {
	r := testenv.FloodJunk{Sent: f.sent.Load(), Unsigned: f.unsigned.Load(), BodiesRead: f.bodiesRead.Load(),
		OverBudget: f.overBudget.Load(), Transport: f.transport.Load(), Other: f.other.Load()}
	if p := f.firstOther.Load(); p != nil {
		r.FirstOther = *p
	}
	return r
}
