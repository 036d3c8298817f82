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
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/partition"
	"github.com/driftguard/driftguard/internal/webhook"
)

// benchBody is a schema-valid presence webhook of about 300 bytes, with the
// optional and extra fields real publishers send. internal/envelope's
// BenchmarkDecode decodes the same bytes, so the two can be compared.
var benchBody = []byte(`{"event_id":"evt_01J0Z3K9Q7M2B8C4D6E8F0G1H2","user_id":"usr_7f3a9c2e4b1d","presence":"AWAY","sequence_number":184467,"timestamp":1718900000,"device_id":"dev_macbook-pro-14_3f9a","expires_at":1718900300,"client":{"app":"desktop","version":"4.12.3","os":"macOS 14.5"},"status_text":"In a meeting until 15:30"}`)

// clientsPerCore is how many client goroutines RunParallel starts per core:
// more than one, so the server is never idle while a client waits on the
// loopback, which is what a requests-per-second capacity means.
const clientsPerCore = 4

// BenchmarkHandler measures the whole edge (signature, strict decode, schema,
// key extraction, produce) against a handler that only reads the body, both
// over real HTTP with keep-alive on loopback, in the same run so their
// requests/s can be compared on a noisy machine. Kafka is replaced by an
// in-memory producer: the broker's latency is not the edge's cost.
func BenchmarkHandler(b *testing.B) {
	b.Run("baseline", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.HandleFunc("/v1/webhooks/{stream}", readBodyOnly)
		benchmarkOverHTTP(b, mux)
	})
	b.Run("full", func(b *testing.B) {
		benchmarkOverHTTP(b, benchEdge(b))
	})
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

// benchmarkOverHTTP serves h on loopback and POSTs benchBody to it from
// clientsPerCore goroutines per core, reporting requests per second.
func benchmarkOverHTTP(b *testing.B, h http.Handler) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	clients := clientsPerCore * runtime.GOMAXPROCS(0)
	// Enough idle connections for every client goroutine, or some requests
	// would pay for a new TCP connection and measure the handshake.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	url := srv.URL + "/v1/webhooks/presence"
	header := signedBenchHeader(b)

	b.SetBytes(int64(len(benchBody)))
	b.SetParallelism(clientsPerCore)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := postAccepted(client, url, header); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// signedBenchHeader signs benchBody now; the edge's window is ±300 s, far
// longer than one benchmark run.
func signedBenchHeader(b *testing.B) http.Header {
	const id = "msg_bench"
	ts := time.Now().Unix()
	sig, err := webhook.SignatureHeader(specSecret, id, ts, benchBody)
	if err != nil {
		b.Fatal(err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderWebhookSignature, sig)
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
