// Command redisorders is the orphan seed's own design, run as a peer of
// driftguard's orders stream in the benchmarks: a Go handler over Redis
// that keeps a child event (payment, capture, shipment) whose order does
// not exist yet in lost+found, a Redis list per order id with a TTL, and
// applies those children when the order.created arrives. Each webhook is
// one Lua script, one round trip, atomic against its order's other events.
//
//	redisorders serve --redis 127.0.0.1:16379 --listen 127.0.0.1:8082 --secret whsec_...
//	redisorders reset --redis ...
//	redisorders state --redis ... > state.json
//
// benchmarks/peers/README.md describes the keys and the choices.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
	"github.com/driftguard/driftguard/internal/config"
)

func main() {
	os.Exit(peer.Main(program(), os.Args[1:], os.Stdout, os.Stderr))
}

func program() peer.Program {
	var opts Options
	return peer.Program{
		Name:   "redisorders",
		Listen: "127.0.0.1:8082",
		Stream: "orders",
		Flags: func(fs *flag.FlagSet, s *config.Stream) {
			fs.StringVar(&opts.Addr, "redis", os.Getenv("DRIFTGUARD_TEST_REDIS"), "Redis address host:port (default $DRIFTGUARD_TEST_REDIS, what benchmarks/scripts/redis.sh start prints)")
			fs.StringVar(&opts.Prefix, "prefix", "orders:", "prefix of every key the peer writes")
			fs.IntVar(&opts.PoolSize, "pool-size", 0, "connections in the pool (0: go-redis's default, 10 per CPU)")
			fs.DurationVar(&opts.OrphanTTL, "orphan-ttl", s.Parent.TTL, "how long a child waits for its order (driftguard's parent.ttl)")
			fs.IntVar(&opts.OrphanBuffer, "orphan-buffer", s.Parent.Buffer, "children waiting for one order at most; more are rejected (driftguard's parent.buffer)")
			fs.DurationVar(&opts.DedupTTL, "dedup-ttl", s.Limits.DedupWindow, "how long an event id is remembered (driftguard's limits.dedup_window)")
		},
		Open: func(ctx context.Context, edge *peer.Edge, log *slog.Logger) (peer.Store, error) {
			return Open(ctx, opts, log)
		},
	}
}
