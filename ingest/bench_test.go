package ingest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/partition"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
)

// benchBody is testenv.BenchBody, which internal/envelope's BenchmarkDecode
// decodes too, so the two can be compared.
var benchBody = []byte(testenv.BenchBody)

// clientsPerCore is how many client goroutines RunParallel starts per core:
// more than one, so the server is never idle while a client waits on the
// loopback, which is what a requests-per-second capacity means.
const clientsPerCore = 4

// BenchmarkHandler measures the whole edge (signature, strict decode, schema,
// key extraction, produce, the 202 reply) against a handler that only reads
// the body and answers an empty 202, all over real HTTP with keep-alive on
// loopback. A third handler reads the body and writes the edge's reply,
// pre-built: the gap between it and the bare baseline is what the reply
// the design requires costs the server and the client, not the edge's work.
//
// The handlers are measured in alternating rounds of a few milliseconds, so
// a load that comes and goes on a shared machine weighs on all alike. Kafka
// is replaced by an in-memory producer: the broker's latency is not the
// edge's cost.
func BenchmarkHandler(b *testing.B) {
	bare := http.NewServeMux()
	bare.HandleFunc("/v1/webhooks/{stream}", readBodyOnly)
	replying := http.NewServeMux()
	replying.HandleFunc("/v1/webhooks/{stream}", readBodyAndReply)
	targets := []*loopbackTarget{newLoopbackTarget(b, bare), newLoopbackTarget(b, replying), newLoopbackTarget(b, benchEdge(b))}
	baseline, baselineReply, full := targets[0], targets[1], targets[2]
	header := signedBenchHeader(b)
	clients := clientsPerCore * runtime.GOMAXPROCS(0)

	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += roundRequests {
		n := min(roundRequests, b.N-done)
		for _, t := range targets {
			t.round(b, clients, n, header)
		}
	}
	b.StopTimer()
	b.ReportMetric(baseline.rate(), "baseline-req/s")
	b.ReportMetric(full.rate(), "full-req/s")
	b.ReportMetric(full.rate()/baseline.rate(), "full/baseline")
	// CPU time per request (client and server, this process) is what the
	// requests/s of a dedicated machine follow; on a shared one it moves
	// far less with the neighbours' load than wall time does.
	b.ReportMetric(baseline.cpuPerRequest(), "baseline-cpu-µs/req")
	b.ReportMetric(baselineReply.cpuPerRequest(), "baseline-reply-cpu-µs/req")
	b.ReportMetric(full.cpuPerRequest(), "full-cpu-µs/req")
	b.ReportMetric(baseline.cpuPerRequest()/full.cpuPerRequest(), "cpu-full/baseline")
	b.ReportMetric(baselineReply.cpuPerRequest()/full.cpuPerRequest(), "cpu-full/baseline-reply")
}

// roundRequests is one round of one handler: long enough to keep every
// client busy, short enough that the machine's load barely moves in it.
const roundRequests = 512

// loopbackTarget is a handler served on loopback and the time spent on
// the requests sent to it.
type loopbackTarget struct {
	client   *http.Client
	url      string
	requests int
	elapsed  time.Duration
	cpu      time.Duration
}

func newLoopbackTarget(b *testing.B, h http.Handler) *loopbackTarget {
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	// Enough idle connections for every client goroutine, or some requests
	// would pay for a new TCP connection and measure the handshake.
	clients := clientsPerCore * runtime.GOMAXPROCS(0)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	b.Cleanup(client.CloseIdleConnections)
	return &loopbackTarget{client: client, url: srv.URL + "/v1/webhooks/presence"}
}

// round sends n requests from clients goroutines and adds their wall time.
func (lt *loopbackTarget) round(b *testing.B, clients, n int, header http.Header) {
	var next atomic.Int64
	var wg sync.WaitGroup
	startCPU := testenv.ProcessCPU(b)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := postAccepted(lt.client, lt.url, header); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	lt.elapsed += time.Since(start)
	lt.cpu += testenv.ProcessCPU(b) - startCPU
	lt.requests += n
}

func (lt *loopbackTarget) rate() float64 { return float64(lt.requests) / lt.elapsed.Seconds() }

func (lt *loopbackTarget) cpuPerRequest() float64 {
	return float64(lt.cpu.Microseconds()) / float64(lt.requests)
}

// BenchmarkServeHTTP is the full edge without the network, so its own CPU
// cost and allocations are visible apart from net/http's.
func BenchmarkServeHTTP(b *testing.B) {
	edge := benchEdge(b)
	header := signedBenchHeader(b)
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/webhooks/presence", bytes.NewReader(benchBody))
		req.Header = header.Clone()
		w := httptest.NewRecorder()
		edge.ServeHTTP(w, req)
		if w.Code != http.StatusAccepted {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// readBodyOnly is the floor any edge pays: net/http, routing and reading
// the body.
func readBodyOnly(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// readBodyAndReply reads the body and writes the edge's 202 reply for the
// bench webhook, built once.
func readBodyAndReply(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(benchReply)
}

var benchReply = []byte(`{"status":"accepted","stream":"presence","event_id":"evt_01J0Z3K9Q7M2B8C4D6E8F0G1H2","partition":3,"offset":1234567}` + "\n")

// benchEdge is the presence edge as shipped, producing to memory, on the
// real clock: the deliveries are signed with time.Now.
func benchEdge(b *testing.B) http.Handler {
	_, presence := presenceConfig(b, specSecret)
	producer := &memoryProducer{partitions: int32(presence.Limits.Partitions)}
	h, err := NewHandler([]*config.Stream{presence}, producer, Options{})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Register(mux)
	return mux
}

// signedBenchHeader signs benchBody now; the edge's window is ±300 s, far
// longer than one benchmark run.
func signedBenchHeader(b *testing.B) http.Header {
	const id = "msg_bench"
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	sig, err := webhook.SignatureHeader(specSecret, id, ts, benchBody)
	if err != nil {
		b.Fatal(err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(webhook.HeaderWebhookID, id)
	h.Set(webhook.HeaderWebhookTimestamp, ts)
	h.Set(webhook.HeaderWebhookSignature, sig)
	return h
}

// postAccepted sends benchBody and reads the reply to its end, so the
// connection goes back to the pool for the next request.
func postAccepted(client *http.Client, url string, header http.Header) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(benchBody))
	if err != nil {
		return err
	}
	req.Header = header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("status %d, want 202: %s", resp.StatusCode, reply)
	}
	return nil
}

// memoryProducer acks every record at once, as a broker with no latency
// would, placing it where Kafka would.
type memoryProducer struct {
	partitions int32
	offset     atomic.Int64
}

func (p *memoryProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	r.Partition = partition.For(r.Key, p.partitions)
	r.Offset = p.offset.Add(1) - 1
	promise(r, nil)
}
