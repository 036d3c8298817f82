package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
	"github.com/driftguard/driftguard/benchmarks/peers/peertest"
)

// BenchmarkWebhook sends signed presence webhooks over loopback HTTP from
// parallel senders to the peer, each a new sequence of one of 1,000 users.
// "edge" skips PostgreSQL (signature, parse, answer only): the baseline
// the two ways of applying are measured against in the same run.
//
//	go test -run '^$' -bench Webhook -benchtime 5000x ./peers/pgpresence
func BenchmarkWebhook(b *testing.B) {
	for _, tc := range []struct{ name, mode string }{{"edge", ""}, {"statement", ModeStatement}, {"tx", ModeTransaction}} {
		b.Run(tc.name, func(b *testing.B) {
			store, err := Open(context.Background(), Options{DSN: schemaDSN(b), MaxConns: defaultMaxConns, Mode: tc.mode}, true)
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			if tc.mode == "" {
				store.apply = func(context.Context, *presenceEvent) (string, error) { return peer.OutcomeApplied, nil }
			}
			c := serve(b, store, "")
			peertest.Measure(b, peertest.PostgresPID(b), func(n int64) error {
				ev := event(fmt.Sprintf("bench-%d", n), fmt.Sprintf("user-%d", n%1000), "ONLINE", n)
				return c.SendAccepted(ev.EventID, ev)
			})
		})
	}
}
