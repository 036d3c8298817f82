package clickhouse_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/topics"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// cutProxy forwards TCP to a target until cut, so a test can take
// ClickHouse away from one client without stopping the shared server.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

// setCut refuses new connections and drops the open ones, or lets them
// through again.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// While ClickHouse is unreachable the sink reports not ready and keeps its
// batch; when it returns, every row lands exactly once, without a restart.
func TestSinkRidesOutAClickHouseOutage(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	conn, cfg := migratedDatabase(t, ctx)
	proxy := newCutProxy(t, cfg.ClickHouse.Addr)
	viaProxy := cfg.ClickHouse
	viaProxy.Addr = proxy.ln.Addr().String()
	sinkConn, err := sinkch.Open(ctx, viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	defer sinkConn.Close()

	cl := withFakeBroker(t, ctx, cfg)
	brokers := cfg.Kafka.Brokers
	ops := telemetry.NewOps()
	sinkCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- service.RunAll(sinkCtx, sinkch.New(cfg, brokers, sinkConn, testenv.Logger(t), ops)) }()
	defer func() { stop(); <-done }()

	outcomes := topics.For("presence").Outcomes
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			value, _ := json.Marshal(envelope.Outcome{Stream: "presence", Key: "k", EventID: fmt.Sprintf("e%d", i),
				Outcome: envelope.OutcomeApplied, Version: int64(i), ProcessedAtMs: 1_700_000_000_000})
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: outcomes, Key: []byte("k"), Value: value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rows := func() uint64 {
		var n uint64
		_ = conn.QueryRow(ctx, "SELECT count() FROM "+cfg.ClickHouse.Database+".events").Scan(&n)
		return n
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	produce(0, 10)
	wait("the first rows", func() bool { return rows() == 10 })

	proxy.setCut(true)
	produce(10, 30)
	wait("the sink to report not ready", func() bool {
		err := ops.Ready(ctx)
		return err != nil && strings.Contains(err.Error(), "clickhouse")
	})
	if n := rows(); n != 10 {
		t.Fatalf("%d rows while ClickHouse was unreachable", n)
	}

	proxy.setCut(false)
	wait("every row after ClickHouse returned", func() bool { return rows() >= 30 })
	wait("the sink to report ready again", func() bool { return ops.Ready(ctx) == nil })
	var total, positions uint64
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExact(`topic`, `partition`, `offset`) FROM "+cfg.ClickHouse.Database+".events").
		Scan(&total, &positions); err != nil {
		t.Fatal(err)
	}
	if total != 30 || positions != 30 {
		t.Fatalf("%d rows for %d positions, want 30 each", total, positions)
	}
}
