package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/internal/webhook"
)

// The publishers and the kills of TestFaultIngestKilledWhilePublishersRetry.
const (
	ingestKills       = 5
	ingestPublishers  = 6
	eventsByPublisher = 400
)

// retryWait is a publisher's wait before its n-th retry: 50 ms, doubling
// to at most a second (Standard Webhooks senders wait longer; the shape is
// the same, the test shorter).
func retryWait(n int) time.Duration {
	return min(50*time.Millisecond<<min(n-1, 5), time.Second)
}

// A real `driftguard ingest` is SIGKILLed five times (after a random
// number of 202s, so with requests in flight) and restarted after a random
// pause. Kills 1, 3 and 5 wait first until the broker has written a
// produce whose ack a proxy between ingest and the broker holds back, so
// each of them cuts off at least one request between its produce and its
// reply; kills 2 and 4 fall wherever they fall. Meanwhile
// six publishers each deliver 400 presence events in order, retrying on
// 5xx and connection errors with the same event id and body, and a real
// `driftguard process` decides. Then every event is delivered; every
// record of `<stream>.in` has exactly one decision (read_committed); every
// event is applied exactly once, its other records decided duplicate; and
// each event has at most as many records as its publisher made attempts
// (the bound: an attempt writes at most one record), so at most one extra
// record per attempt a kill cut off or a deadline answered 503.
func TestFaultIngestKilledWhilePublishersRetry(t *testing.T) {
	rng := rand.New(rand.NewPCG(seedOf(t, envFaultSeed), 16))
	ctx := testenv.Context(t, 4*time.Minute)
	stream, cfg, edge := ingestOnStream(t, ctx, "ingestkill", "")
	brokers := cfg.Kafka.Brokers
	proxy := testenv.NewKafkaProxy(t, brokers)
	edge.env = append(edge.env, "DRIFTGUARD_KAFKA_BROKERS="+strings.Join(proxy.Addrs(), ","))
	process := newProcessRunner(t, t.TempDir(), edge.configFile, brokers, stream)
	decider := process.start("ingestkill")
	ingest := edge.start()

	// The publishers, each delivering its user's events in order.
	var accepted atomic.Int64
	attempts := make([][][]webhook.Attempt, ingestPublishers)
	publishErr := make(chan error, ingestPublishers)
	var publishing sync.WaitGroup
	for p := range ingestPublishers {
		attempts[p] = make([][]webhook.Attempt, eventsByPublisher)
		publishing.Add(1)
		go func() {
			defer publishing.Done()
			pub := &webhook.Publisher{URL: edge.url(stream), Secret: faultSecret}
			for n := range eventsByPublisher {
				id := fmt.Sprintf("evt-%d-%d", p, n)
				body := testenv.Presence{EventID: id, User: fmt.Sprintf("user-%d", p), Version: int64(n + 1)}.Body()
				tries, err := pub.Deliver(ctx, "msg_"+id, body, retryWait)
				attempts[p][n] = tries
				if err != nil {
					publishErr <- fmt.Errorf("%s: %v after %d attempts", id, err, len(tries))
					return
				}
				if last := tries[len(tries)-1]; last.Status != 202 {
					publishErr <- fmt.Errorf("%s: refused with %d", id, last.Status)
					return
				}
				accepted.Add(1)
			}
		}()
	}
	total := int64(ingestPublishers * eventsByPublisher)
	heldKills := 0
	for kill := range ingestKills {
		target := accepted.Load() + 50 + rng.Int64N(total/(ingestKills+2))
		testenv.WaitFor(t, ctx, "the kill point", func() bool { return accepted.Load() >= min(target, total) })
		held := kill%2 == 0
		if held {
			proxy.HoldAcks(naming.Prefixes{}.For(stream).In)
			testenv.WaitFor(t, ctx, "a produce written and its ack held", func() bool { return proxy.Holding() > 0 })
			heldKills++
		}
		sigkill(t, ingest)
		if held {
			testenv.WaitFor(t, ctx, "the killed ingest's held acks dropped", func() bool { return proxy.Holding() == 0 })
			proxy.ReleaseAcks()
		}
		down := time.Duration(rng.IntN(500)) * time.Millisecond
		t.Logf("kill %d after %d accepted (with an ack held: %t), down %s", kill+1, accepted.Load(), held, down)
		time.Sleep(down)
		ingest = edge.start()
	}
	publishing.Wait()
	close(publishErr)
	for err := range publishErr {
		t.Fatal(err)
	}
	if accepted.Load() != total {
		t.Fatalf("%d events delivered, want %d", accepted.Load(), total)
	}

	// What landed in the input, and its decisions.
	inputs := presenceInputs(t, brokers, naming.Prefixes{}.For(stream).In)
	records := map[string]int{}
	for _, in := range inputs {
		records[in.eventID]++
	}
	out := newOutputReader(t, brokers, map[string]string{"presence": stream})
	decisions := out.decideAllAndStop(ctx, inputs, decider, 2*time.Minute)

	applied := map[string]int{}
	for _, in := range inputs {
		switch d := decisions[in.pos()]; d.Outcome {
		case record.Applied:
			applied[in.eventID]++
		case record.Duplicate, "":
		default:
			t.Errorf("%s at %d/%d decided %s %s, want applied or duplicate", in.eventID, in.partition, in.offset, d.Outcome, d.Reason)
		}
	}
	var extra, unanswered, answered503, cutOff, retried int
	for p := range ingestPublishers {
		for n := range eventsByPublisher {
			id := fmt.Sprintf("evt-%d-%d", p, n)
			tries := attempts[p][n]
			if applied[id] != 1 {
				t.Errorf("%s, delivered after %d attempts, was applied %d times", id, len(tries), applied[id])
			}
			if records[id] > len(tries) {
				t.Errorf("%s has %d records in the input, more than its %d attempts", id, records[id], len(tries))
			}
			extra += max(0, records[id]-1)
			for _, try := range tries[:len(tries)-1] {
				if try.Err != nil {
					unanswered++
				} else {
					answered503++
				}
			}
			if len(tries) > 1 {
				retried++
			}
			if records[id] > 1 {
				cutOff++
			}
		}
	}
	t.Logf("%d events, %d retried after %d attempts without an answer and %d answered 5xx; %d records in the input, %d of them extra, of %d events an attempt of which was written and not answered 202",
		total, retried, unanswered, answered503, len(inputs), extra, cutOff)
	// Each kill with an ack held cut off at least one attempt whose record
	// was written, and every such attempt's event has a record of its own
	// beyond the one answered 202.
	if cutOff == 0 || extra < heldKills {
		t.Errorf("%d extra records for %d kills with a written produce's ack held: the kills did not catch requests between their produce and their reply, so this proves nothing", extra, heldKills)
	}
}
