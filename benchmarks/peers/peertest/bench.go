package peertest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/procstat"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Senders is how many goroutines per core send webhooks in a benchmark,
// as a publisher's concurrent connections.
const Senders = 16

// Measure calls send(0), send(1), ... b.N times from parallel senders and
// reports webhooks/s, this process's CPU per webhook (the senders and the
// peer, which run in it) and the server's (serverPID and its children;
// none when 0). CPU per webhook is what to compare on a shared machine:
// the rate swings with its load, the CPU time far less.
func Measure(b *testing.B, serverPID int, send func(n int64) error) {
	b.Helper()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(Senders)
	cpu, server, start := testenv.ProcessCPU(b), treeCPU(serverPID), time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := send(next.Add(1) - 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	elapsed := time.Since(start)
	perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "webhooks/s")
	b.ReportMetric(perOp(testenv.ProcessCPU(b)-cpu), "go-cpu-µs/op")
	if serverPID > 0 {
		b.ReportMetric(perOp(treeCPU(serverPID)-server), "server-cpu-µs/op")
	}
}

// treeCPU is the CPU time the server process pid and its descendants have
// used, the reaped ones included (PostgreSQL serves each connection from a
// child of its postmaster); zero when pid is 0 or gone. Benchmarks report
// it per webhook, which a shared machine's load moves far less than a rate.
func treeCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0 // no scan of /proc for a server that is not a process
	}
	d, _ := procstat.TreeCPU(pid)
	return d
}
