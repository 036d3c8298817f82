package main

// The demo traffic of `driftguard dev --demo`: the publishers of every
// shipped stream, shuffling, retrying and running ahead as real ones do,
// so that a newcomer sees each policy decide within seconds. A generator per stream (demo_presence.go,
// demo_workflow.go, demo_chat.go, demo_orders.go) makes the deliveries that
// come next; the service here interleaves them and posts them, one at a
// time, at a gentle pace, forever.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/webhook"
)

// delivery is one webhook as a publisher sends it.
type delivery struct {
	// ID is the event id, also sent as the webhook-id.
	ID string
	// Key is the entity the webhook is about.
	Key string
	// Version is the publisher's version or sequence, where the stream
	// has one.
	Version int64
	// Status is what a presence or workflow webhook says.
	Status string
	Body   []byte
}

// newDelivery is a delivery of event, marshalled as its body.
func newDelivery(id, key string, version int64, status string, event any) delivery {
	body, err := json.Marshal(event)
	if err != nil {
		panic(fmt.Sprintf("demo event %s: %v", id, err)) // the demo's own event types always marshal
	}
	return delivery{ID: id, Key: key, Version: version, Status: status, Body: body}
}

// demoID is a fresh event id under prefix.
func demoID(rng *rand.Rand, prefix string) string {
	return fmt.Sprintf("%s-%08x", prefix, rng.Uint32())
}

// demoSource is what a generator that makes up ids draws from: the random
// source, and run, which names this run of the generator inside the ids
// (of operations, orders, chat messages), so that a demo restarted against
// a broker that kept its topics does not collide with the last run's.
type demoSource struct {
	rng *rand.Rand
	run string
}

func newDemoSource(rng *rand.Rand) demoSource {
	return demoSource{rng: rng, run: fmt.Sprintf("%06x", rng.Uint32()>>8)}
}

// disorder shuffles deliveries and repeats some of them, as retrying
// publishers and queues do: each delivery is sent once and, with
// probability dupRate, once more.
func disorder(rng *rand.Rand, in []delivery, dupRate float64) []delivery {
	out := append([]delivery(nil), in...)
	for _, d := range in {
		if rng.Float64() < dupRate {
			out = append(out, d)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// demoFeed is one stream's demo traffic.
type demoFeed interface {
	// next returns the deliveries that come next, in the order they are
	// to be sent, made at now. It may return none.
	next(now time.Time) []delivery
}

// demoTeam is the team the presence and chat demos are about.
var demoTeam = []demoMember{
	{"ana", []string{"ana-laptop", "ana-phone"}},
	{"ben", []string{"ben-laptop"}},
	{"chen", []string{"chen-laptop", "chen-phone"}},
	{"dara", []string{"dara-laptop", "dara-phone"}},
	{"eli", []string{"eli-laptop"}},
	{"femi", []string{"femi-laptop", "femi-phone"}},
}

// demoMember is a member of the demo team and the ids of their devices.
type demoMember struct {
	user    string
	devices []string
}

// demoStream is a shipped stream the demo sends to.
type demoStream struct {
	name string
	// what the demo sends there, for the banner.
	what string
	feed func(rng *rand.Rand, now time.Time) demoFeed
}

// demoStreams are the shipped streams of the demo, in the order it
// interleaves them.
var demoStreams = []demoStream{
	{"presence", "a team of 6 on laptops and phones; some devices go quiet until their claims expire, then come back",
		func(rng *rand.Rand, now time.Time) demoFeed { return newPresenceDemo(rng, now) }},
	{"workflow", "operations whose steps arrive out of order, now and then retried, each ending completed, failed or cancelled",
		func(rng *rand.Rand, _ time.Time) demoFeed { return newWorkflowDemo(rng) }},
	{"chat", demoRoom + ": sends retried by the client, receipts, typing, a member who leaves but still sends, then rejoins",
		func(rng *rand.Rand, _ time.Time) demoFeed { return newChatDemo(rng) }},
	{"orders", "orders, every other one paid before it exists",
		func(rng *rand.Rand, _ time.Time) demoFeed { return newOrdersDemo(rng) }},
}

// demoPace is the default time between two deliveries: four a second in
// all, a gentle trickle that runs as long as dev does.
const demoPace = 250 * time.Millisecond

// demo sends the demo traffic of the shipped streams to ingest,
// interleaved: a delivery of each stream in turn, one every pace.
type demo struct {
	// url is ingest's webhook URL without the stream:
	// http://host:port/v1/webhooks/.
	url  string
	pace time.Duration
	log  *slog.Logger
	// lanes are the streams it sends to, in turn.
	lanes []demoLane
}

// demoLane is a stream the demo sends to, with the secret it signs with.
type demoLane struct {
	demoStream
	secret string
}

// newDemo returns the demo of cfg's shipped streams. A shipped stream that
// cfg lacks, or that is not signed the Standard Webhooks way, is left out;
// streams cfg adds get no demo traffic. pace 0 means demoPace; log nil, no
// logs.
func newDemo(cfg *config.Config, webhookURL string, pace time.Duration, log *slog.Logger) *demo {
	if pace <= 0 {
		pace = demoPace
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &demo{url: webhookURL, pace: pace, log: log}
	for _, s := range demoStreams {
		st := cfg.Streams[s.name]
		switch {
		case st == nil:
			log.Info("demo: no stream " + s.name + " in the catalogue; sending it nothing")
		case st.Signature.Scheme != config.SchemeStandardWebhooks || len(st.Signature.Secrets) == 0:
			log.Info("demo: stream "+s.name+" has no standard-webhooks secret; sending it nothing", "scheme", st.Signature.Scheme)
		default:
			d.lanes = append(d.lanes, demoLane{demoStream: s, secret: st.Signature.Secrets[0]})
		}
	}
	return d
}

// describe says what the demo sends, for the banner: a line, then a line
// per stream.
func (d *demo) describe() string {
	if len(d.lanes) == 0 {
		return "nothing: no shipped stream with a standard-webhooks secret"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "signed webhooks, %s a second, to", strconv.FormatFloat(float64(time.Second)/float64(d.pace), 'g', 3, 64))
	for _, l := range d.lanes {
		fmt.Fprintf(&b, "\n  %-9s %s", l.name, l.what)
	}
	return b.String()
}

func (d *demo) Name() string { return "dev demo traffic" }

func (d *demo) Run(ctx context.Context) error {
	if len(d.lanes) == 0 {
		return nil
	}
	now := time.Now()
	rng := rand.New(rand.NewPCG(uint64(now.UnixNano()), 1))
	type lane struct {
		stream string
		pub    *webhook.Publisher
		feed   demoFeed
		queue  []delivery
	}
	lanes := make([]lane, len(d.lanes))
	for i, l := range d.lanes {
		lanes[i] = lane{stream: l.name, pub: &webhook.Publisher{URL: d.url + l.name, Secret: l.secret}, feed: l.feed(rng, now)}
	}
	tick := time.NewTicker(d.pace)
	defer tick.Stop()
	for turn := 0; ; turn++ {
		l := &lanes[turn%len(lanes)]
		if len(l.queue) == 0 {
			l.queue = l.feed.next(time.Now())
		}
		if len(l.queue) > 0 {
			del := l.queue[0]
			l.queue = l.queue[1:]
			resp, err := l.pub.Post(ctx, del.ID, del.Body)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil || resp.Status != http.StatusAccepted {
				d.log.Warn("demo webhook not accepted", "stream", l.stream, "event_id", del.ID, "status", resp.Status, "err", err, "problem", string(resp.Body))
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
