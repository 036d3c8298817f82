package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
)

// presenceHistory returns n versions of user's own presence (no device)
// from version first, in order, each with its own event id: the histories
// the pipeline, crash and rebalance tests shuffle.
func presenceHistory(rng *rand.Rand, user string, first int64, n int) []delivery {
	return presenceVersions(rng, presenceEvent{UserID: user, Sequence: first, Timestamp: 1_700_000_000 + first}, n)
}

// demoClock is when the generator tests run: a fixed instant, so a test
// reads the same deliveries every time.
var demoClock = time.Unix(1_800_000_000, 0)

// demoBodies checks what a stream's webhook must be to be accepted, as
// ingest checks it (strict JSON, the catalogue's fields, the event type's
// schema, here with formats asserted too), that the delivery's id and key
// are the body's, and returns the fields ingest reads of each.
type demoBodies struct {
	t       *testing.T
	cfg     *config.Config
	schemas map[string]*jsonschema.Schema
}

func newDemoBodies(t *testing.T) *demoBodies {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	return &demoBodies{t: t, cfg: cfg, schemas: map[string]*jsonschema.Schema{}}
}

func (b *demoBodies) check(stream string, d delivery, into any) envelope.Fields {
	t := b.t
	t.Helper()
	if strings.Contains(d.ID, ".") || len(d.ID) > 256 {
		t.Fatalf("%s %s: not a webhook-id of the Standard Webhooks scheme (no dot, at most 256 bytes)", stream, d.ID)
	}
	s := b.cfg.Streams[stream]
	doc, err := envelope.Parse(d.Body)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", stream, d.ID, err, d.Body)
	}
	f, err := doc.Extract(s, "")
	doc.Release()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", stream, d.ID, err, d.Body)
	}
	if f.EventID != d.ID || f.Key != d.Key {
		t.Fatalf("%s delivery %s of key %s has the body of %s of key %s", stream, d.ID, d.Key, f.EventID, f.Key)
	}
	sch := b.schemas[stream+" "+f.Type]
	if sch == nil {
		sch = b.compile(s, f.Type)
		b.schemas[stream+" "+f.Type] = sch
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(d.Body))
	if err == nil {
		err = sch.Validate(inst)
	}
	if err != nil {
		t.Fatalf("%s %s fails the schema of %s: %v\n%s", stream, d.ID, f.Type, err, d.Body)
	}
	if err := json.Unmarshal(d.Body, into); err != nil {
		t.Fatal(err)
	}
	return f
}

func (b *demoBodies) compile(s *config.Stream, eventType string) *jsonschema.Schema {
	b.t.Helper()
	data, err := s.SchemaBytes(eventType)
	if err != nil {
		b.t.Fatalf("%s has no schema for %q: %v", s.Name, eventType, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		b.t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		b.t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		b.t.Fatal(err)
	}
	return sch
}

// Every device moves on each round, delivered shuffled and partly twice;
// a quiet device's last claim expires within a minute, it stays silent a
// while, and comes back with later versions; claims carry the clock.
func TestPresenceDemoShufflesDevicesAndLetsSomeGoQuiet(t *testing.T) {
	bodies := newDemoBodies(t)
	p := newPresenceDemo(newTestRand(), demoClock)
	type row struct{ user, device string }
	highest := map[row]int64{} // the highest version delivered so far
	lastRound := map[row]int{} // the last round the device sent in
	quietAt := map[row]int64{} // when a device's short claim was made
	var stale, duplicates, returns int
	const rounds, every = 30, 10 * time.Second
	for r := range rounds {
		now := demoClock.Add(time.Duration(r) * every)
		seen := map[string]bool{}
		sending := map[row]bool{}
		for _, d := range p.next(now) {
			var ev presenceEvent
			f := bodies.check("presence", d, &ev)
			k := row{ev.UserID, ev.DeviceID}
			if ev.DeviceID == "" || !strings.HasPrefix(ev.DeviceID, ev.UserID+"-") {
				t.Fatalf("claim %s is not about a device of its member: %s", d.ID, d.Body)
			}
			if seen[d.ID] {
				duplicates++
			}
			seen[d.ID] = true
			if f.Version < highest[k] {
				stale++
			}
			highest[k] = max(highest[k], f.Version)
			if ev.Timestamp > now.Unix() || ev.Timestamp < now.Unix()-1 {
				t.Fatalf("claim %s made at %d, the round at %d", d.ID, ev.Timestamp, now.Unix())
			}
			life := ev.ExpiresAt - ev.Timestamp
			if life < presenceQuietLife || life >= presenceLife+30 {
				t.Fatalf("claim %s lives %ds: %s", d.ID, life, d.Body)
			}
			if life < presenceLife {
				quietAt[k] = now.Unix()
			}
			if last, ok := lastRound[k]; ok && last < r-1 {
				returns++
				if since := now.Unix() - quietAt[k]; since < presenceQuiet {
					t.Fatalf("%s came back %ds after going quiet", k.device, since)
				}
			}
			lastRound[k] = r
			sending[k] = true
		}
		if len(sending) < len(p.devices)-len(p.devices)/4 {
			t.Fatalf("round %d: %d devices of %d send; no more than a quarter may be quiet", r, len(sending), len(p.devices))
		}
	}
	devices := 0
	for _, m := range demoTeam {
		devices += len(m.devices)
	}
	if len(highest) != devices {
		t.Errorf("%d devices sent, the team has %d", len(highest), devices)
	}
	for k, v := range highest {
		if v <= demoClock.Unix() {
			t.Errorf("%s did not move on from %d", k.device, v)
		}
	}
	if stale == 0 || duplicates == 0 || len(quietAt) < 2 || returns == 0 {
		t.Errorf("stale %d, duplicates %d, devices gone quiet %d, come back %d: want each", stale, duplicates, len(quietAt), returns)
	}
}

// Each operation sends its steps 1..n once each but two in reverse order,
// some a second time under a new event id, and ends in a terminal status;
// new operations start as old ones end. A gapless reader of the deliveries
// buffers the step ahead and applies it when the gap fills.
func TestWorkflowDemoSendsStepsOutOfOrderAndEndsEveryOperation(t *testing.T) {
	bodies := newDemoBodies(t)
	w := newWorkflowDemo(newTestRand())
	type operation struct {
		applied  int64
		buffered map[int64]bool
		ids      map[int64][]string
		statuses []string
		progress []int
		ahead    bool // a step applied from the buffer
	}
	ops := map[string]*operation{}
	var order []string
	terminal := map[string]bool{"completed": true, "failed": true, "cancelled": true}
	for r := range 60 {
		now := demoClock.Add(time.Duration(r) * time.Second)
		inRound := map[string]bool{}
		for _, d := range w.next(now) {
			var ev workflowEvent
			f := bodies.check("workflow", d, &ev)
			if at := time.UnixMilli(f.OccurredAtMs); at.After(now) || at.Before(now.Add(-time.Second)) {
				t.Fatalf("step %s occurred at %s, the round at %s", d.ID, at, now)
			}
			op := ops[ev.OperationID]
			if op == nil {
				op = &operation{buffered: map[int64]bool{}, ids: map[int64][]string{}}
				ops[ev.OperationID] = op
				order = append(order, ev.OperationID)
			}
			inRound[ev.OperationID] = true
			seq := f.Version
			if slices.Contains(op.ids[seq], d.ID) {
				t.Fatalf("event id %s sent twice", d.ID)
			}
			op.ids[seq] = append(op.ids[seq], d.ID)
			if len(op.ids[seq]) > 1 {
				continue // a retry of a step: stale or a duplicate
			}
			if op.applied > 0 && terminal[op.statuses[len(op.statuses)-1]] {
				t.Fatalf("%s sends step %d after its terminal step", ev.OperationID, seq)
			}
			op.buffered[seq] = true
			for op.buffered[op.applied+1] {
				delete(op.buffered, op.applied+1)
				op.applied++
				op.ahead = op.ahead || op.applied != seq
				op.statuses = append(op.statuses, ev.Status)
				op.progress = append(op.progress, ev.Progress)
			}
		}
		if len(inRound) > demoOperations {
			t.Fatalf("round %d: %d operations under way, want at most %d", r, len(inRound), demoOperations)
		}
	}
	retried, ended := 0, 0
	for _, id := range order {
		op := ops[id]
		if len(op.buffered) > 0 {
			continue // still under way when the test stopped
		}
		if len(op.ids) == len(op.statuses) && terminal[op.statuses[len(op.statuses)-1]] {
			ended++
			if !op.ahead {
				t.Errorf("%s: no step delivered before its predecessor", id)
			}
			if op.statuses[0] != "queued" || slices.ContainsFunc(op.statuses[:len(op.statuses)-1], func(s string) bool { return terminal[s] }) {
				t.Errorf("%s: statuses %v", id, op.statuses)
			}
			if !slices.IsSorted(op.progress) {
				t.Errorf("%s: progress %v goes back", id, op.progress)
			}
		}
		for _, ids := range op.ids {
			if len(ids) > 1 {
				retried++
			}
		}
	}
	if ended < 10 || retried == 0 {
		t.Errorf("%d of %d operations ended, %d steps retried: want ten ended and a retry", ended, len(order), retried)
	}
}

// The room opens with the team joining; sends retried by the client keep
// their device and client message id under a new event id; a member who
// left still sends (refused) and rejoins a cycle later; receipts never run
// ahead of the room; typing now and then.
func TestChatDemoRetriesSendsAndRefusesALeaver(t *testing.T) {
	bodies := newDemoBodies(t)
	c := newChatDemo(newTestRand())
	members := map[string]bool{}
	sent := map[string]int64{} // client key → sequence
	var seq int64
	count := map[string]int{}
	removedAt := map[string]int{}
	ids := map[string]bool{} // every event id is new, retries included
	for r := range 40 {
		ds := c.next(demoClock.Add(time.Duration(r) * time.Second))
		if r == 0 && len(ds) != len(demoTeam)+1 {
			t.Fatalf("the room opens with %d events, want the %d members and the page's user joining", len(ds), len(demoTeam))
		}
		for _, d := range ds {
			var ev chatEvent
			f := bodies.check("chat", d, &ev)
			if f.Key != demoRoom || ids[d.ID] {
				t.Fatalf("%s is in %s, or sent before", d.ID, f.Key)
			}
			ids[d.ID] = true
			switch ev.Type {
			case "member.added":
				if members[ev.UserID] {
					t.Fatalf("%s joins again while a member", ev.UserID)
				}
				if _, ok := removedAt[ev.UserID]; ok {
					count["rejoin"]++
					if r-removedAt[ev.UserID] < 3 {
						t.Errorf("%s rejoined %d rounds after leaving", ev.UserID, r-removedAt[ev.UserID])
					}
				}
				members[ev.UserID] = true
			case "member.removed":
				members[ev.UserID] = false
				removedAt[ev.UserID] = r
			case "message.send":
				at, err := time.Parse(time.RFC3339, ev.ClientSentAt)
				if err != nil || !at.Equal(demoClock.Add(time.Duration(r)*time.Second)) {
					t.Fatalf("%s sent at %q (%v)", d.ID, ev.ClientSentAt, err)
				}
				key := ev.SenderDeviceID + "/" + ev.ClientMessageID
				switch _, again := sent[key]; {
				case !strings.HasPrefix(ev.SenderDeviceID, ev.SenderID+"-"):
					t.Fatalf("%s sends from %s", ev.SenderID, ev.SenderDeviceID)
				case again:
					count["retry"]++
				case !members[ev.SenderID]:
					count["not_member"]++
				default:
					seq++
					sent[key] = seq
				}
			case "receipt.read", "receipt.delivered":
				count[ev.Type]++
				if ev.ConversationSeq > seq {
					t.Fatalf("%s at %d, ahead of the room at %d", d.ID, ev.ConversationSeq, seq)
				}
				if !members[ev.UserID] || !strings.HasPrefix(ev.DeviceID, ev.UserID+"-") {
					t.Fatalf("receipt %s of %s on %s", d.ID, ev.UserID, ev.DeviceID)
				}
			case "typing":
				count["typing"]++
			default:
				t.Fatalf("type %q", ev.Type)
			}
		}
	}
	for _, what := range []string{"retry", "not_member", "rejoin", "receipt.read", "receipt.delivered", "typing"} {
		if count[what] == 0 {
			t.Errorf("no %s in 40 rounds: %v", what, count)
		}
	}
	if seq < 10 {
		t.Errorf("%d messages numbered in 40 rounds", seq)
	}
}

// Every other order, the first among them, is paid before it exists; each
// order's children name it as their parent, and every order is created,
// paid, captured and shipped.
func TestOrdersDemoPaysEveryOtherOrderBeforeItExists(t *testing.T) {
	bodies := newDemoBodies(t)
	o := newOrdersDemo(newTestRand())
	ids := map[string]bool{}
	for r := range 10 {
		var types []string
		waiting := 0
		for _, d := range o.next(demoClock) {
			var ev orderEvent
			f := bodies.check("orders", d, &ev)
			if f.Type == "order.created" {
				if ids[ev.OrderID] {
					t.Fatalf("order %s created twice", ev.OrderID)
				}
				ids[ev.OrderID] = true
			} else if !slices.Contains(types, "order.created") {
				waiting++ // quarantined until its parent arrives
			}
			if !slices.Contains(types, f.Type) {
				types = append(types, f.Type)
			}
		}
		slices.Sort(types)
		if want := []string{"order.created", "order.payment_received", "order.shipped", "payment.captured"}; !slices.Equal(types, want) {
			t.Fatalf("order %d: types %v, want %v", r+1, types, want)
		}
		if paidFirst := r%2 == 0; paidFirst != (waiting > 0) {
			t.Errorf("order %d: %d children before the order; want some on every other order, the first among them", r+1, waiting)
		}
	}
}

// The demo sends to the shipped streams the configuration has, signed the
// Standard Webhooks way, whatever their partitions, and to no other.
func TestDemoSendsToTheShippedStreamsItFinds(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	withSecrets(cfg)
	delete(cfg.Streams, "chat")
	cfg.Streams["orders"].Signature.Scheme = config.SchemeGitHub
	cfg.Streams["workflow"].Limits.Partitions = 2
	cfg.Streams["tickets"] = &config.Stream{Name: "tickets", Signature: config.Signature{Scheme: config.SchemeStandardWebhooks, Secrets: []string{demoSecret}}}
	d := newDemo(cfg, "http://127.0.0.1:1/v1/webhooks/", 0, nil)
	var names []string
	for _, l := range d.lanes {
		names = append(names, l.name)
	}
	if !slices.Equal(names, []string{"presence", "workflow"}) {
		t.Errorf("the demo sends to %v, want presence and workflow", names)
	}
	if text := d.describe(); !strings.HasPrefix(text, "signed webhooks, 4 a second, to\n  presence ") || strings.Contains(text, "chat") {
		t.Errorf("describe:\n%s", text)
	}
}
