package ingest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The edge stays ready while its broker is away: publishers then get the
// edge's own 503 with Retry-After, not a load balancer's error because
// every replica left the Service at once. The service is the one `ingest`
// runs, its broker the real one behind a proxy that stops carrying
// frames, so no other test's broker is touched.
func TestReadyWhileTheBrokerIsAway(t *testing.T) {
	brokers := testenv.Kafka(t)
	cfg, stream := presenceConfig(t, specSecret)
	stream.Name = testenv.UniqueName("ready")
	cfg = testenv.OnlyStream(t, stream)
	cfg.Kafka.ProduceTimeout = time.Second
	ctx := testenv.Context(t, 2*time.Minute)
	testenv.Topics(t, ctx, cfg, brokers).Close()
	proxy := testenv.NewKafkaProxy(t, brokers)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ops := telemetry.NewOps()
	svc := NewService(ServiceOptions{Config: cfg, Brokers: proxy.Addrs(), Logger: testenv.Logger(t), Ops: ops,
		Listener: ln, OpsOnListener: true, Now: fixedClock})
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ingest: %v", err)
		}
	})
	baseURL := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	ready := func() (int, string) {
		status, body, err := readyzStatus(client, baseURL, 10*time.Second)
		if err != nil {
			t.Fatalf("/readyz: %v", err)
		}
		return status, body
	}
	send := func(id string) reply {
		d := signedDelivery(t, specSecret, "msg_"+id, testenv.Presence{EventID: id, User: "alice", Version: 1}.Body())
		d.stream = stream.Name
		r, err := d.sendWith(ctx, client, baseURL)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	if !testenv.Poll(ctx, func() bool { s, _ := ready(); return s == http.StatusOK }) {
		s, body := ready()
		t.Fatalf("/readyz before any fault: %d %q", s, body)
	}
	if r := send("evt-before"); r.status != http.StatusAccepted {
		t.Fatalf("before the fault: %d %s", r.status, r.body)
	}

	proxy.Pause()
	r := send("evt-away")
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("while the broker is away: %d %s, want 503", r.status, r.body)
	} else if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("the 503 has Retry-After %q, want whole seconds", r.header.Get("Retry-After"))
	}
	if s, body := ready(); s != http.StatusOK {
		t.Errorf("/readyz while the broker is away: %d %q, want 200: the edge answers, with 503s", s, body)
	}
	proxy.Resume()

	if !testenv.Poll(ctx, func() bool {
		return send("evt-after-"+strconv.FormatInt(time.Now().UnixNano(), 10)).status == http.StatusAccepted
	}) {
		t.Errorf("no webhook accepted after the broker came back")
	}
}
