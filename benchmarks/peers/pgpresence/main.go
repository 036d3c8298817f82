// Command pgpresence is the presence seed's own design, run as a peer of
// driftguard in the benchmarks: an HTTP handler that verifies each
// webhook's signature and applies it in one PostgreSQL transaction, a claim
// of its event id in processed_webhook_events and a conditional upsert of
// user_presence that only moves to a greater sequence_number.
//
//	pgpresence serve --dsn postgres://... --listen 127.0.0.1:8081 --secret whsec_...
//	pgpresence reset --dsn ...
//	pgpresence state --dsn ... > state.json
//
// benchmarks/peers/README.md describes the schema and the choices.
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
		Name:   "pgpresence",
		Listen: "127.0.0.1:8081",
		Stream: "presence",
		Flags: func(fs *flag.FlagSet, _ *config.Stream) {
			fs.StringVar(&opts.DSN, "dsn", os.Getenv("DRIFTGUARD_TEST_POSTGRES"), "PostgreSQL connection string (default $DRIFTGUARD_TEST_POSTGRES, what benchmarks/scripts/postgres.sh start prints)")
			fs.IntVar(&opts.MaxConns, "max-conns", defaultMaxConns, "connections in the pool")
			fs.StringVar(&opts.Mode, "mode", ModeStatement, "how a webhook is applied: "+ModeStatement+" (one round trip) or "+ModeTransaction+" (BEGIN, INSERT, upsert, COMMIT)")
		},
		Open: func(ctx context.Context, edge *peer.Edge, _ *slog.Logger) (peer.Store, error) {
			return Open(ctx, opts, edge != nil)
		},
	}
}
