package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
	"github.com/driftguard/driftguard/benchmarks/peers/peertest"
)

// BenchmarkWebhook sends signed orders webhooks over loopback HTTP from
// parallel senders to the peer: orders of four events each, the parent
// first ("parent-first": three children applied at once) or last
// ("children-first": three children through lost+found). "edge" skips
// Redis (signature, parse, answer only): the baseline measured in the
// same run.
//
//	go test -run '^$' -bench Webhook -benchtime 8000x ./peers/redisorders
func BenchmarkWebhook(b *testing.B) {
	for _, tc := range []struct {
		name     string
		parentAt int64 // the parent's place among an order's four events
		edge     bool
	}{{"edge", 0, true}, {"parent-first", 0, false}, {"children-first", 3, false}} {
		b.Run(tc.name, func(b *testing.B) {
			_, store := newPeer(b, defaults(b))
			if tc.edge {
				store.apply = func(context.Context, role, string, string, []byte) (string, error) {
					return peer.OutcomeApplied, nil
				}
			}
			c := serve(b, store)
			peertest.Measure(b, peertest.RedisPID(b), func(n int64) error {
				id := fmt.Sprintf("bench-o%d", n/4)
				ev := child(fmt.Sprintf("%s-c%d", id, n%4), id)
				if n%4 == tc.parentAt {
					ev = created(id+"-created", id)
				}
				return c.SendAccepted(ev.EventID, ev)
			})
		})
	}
}
