package ingest

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
)

// edgeRoutes routes like Service.Run does: the webhook route plus /metrics,
// /healthz and /readyz, ready whether the broker answers or not (see
// readinessCheck). The client is returned so a test can watch what the
// edge's producer sees.
func edgeRoutes(t testing.TB, brokers []string, streams []*config.Stream, opts Options) (*http.ServeMux, *kgo.Client) {
	t.Helper()
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ops := telemetry.NewOps()
	if opts.Registerer == nil {
		opts.Registerer = ops.Registry
	}
	h, err := NewHandler(streams, cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	ops.AddReadiness(readinessCheck, func(context.Context) error { return nil })
	mux := http.NewServeMux()
	h.Register(mux)
	ops.Register(mux)
	return mux, cl
}

// serveProduction serves handler on a loopback port with
// telemetry.ServeListener, so the production server's timeouts and limits
// apply, and returns its base URL. The server is shut down, and waited for,
// before the test ends.
func serveProduction(t testing.TB, handler http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- telemetry.ServeListener(ctx, ln, handler, testenv.Logger(t)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serving %s: %v", ln.Addr(), err)
		}
	})
	return "http://" + ln.Addr().String()
}

// sendWith is send with a given client, returning the error instead of
// failing the test, for goroutines and loops that report their own context.
func (d delivery) sendWith(ctx context.Context, client *http.Client, baseURL string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, d.method, baseURL+"/v1/webhooks/"+d.stream, bytes.NewReader(d.body))
	if err != nil {
		return reply{}, err
	}
	req.Header = d.header.Clone()
	if d.contentType != "" {
		req.Header.Set("Content-Type", d.contentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: body}, nil
}
