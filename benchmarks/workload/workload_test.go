package workload

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/benchmarks/model"
)

// The expected state is what the policies leave whatever order the main
// part (and, apart, the setup and the final part) arrives in: a replay of
// any permutation through a plain reading of each policy gives it.
func TestExpectedStateIsOrderFree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := Options{
			Mix: map[string]int{
				"presence": rapid.IntRange(0, 3).Draw(t, "presence"),
				"workflow": rapid.IntRange(0, 3).Draw(t, "workflow"),
				"chat":     rapid.IntRange(0, 3).Draw(t, "chat"),
				"orders":   rapid.IntRange(1, 3).Draw(t, "orders"),
			},
			Count:         rapid.IntRange(0, 400).Draw(t, "count"),
			Keys:          map[string]int{"presence": 5, "workflow": 4, "chat": 2, "orders": 6},
			Disorder:      rapid.IntRange(0, 30).Draw(t, "disorder"),
			Duplicates:    rapid.Float64Range(0, 0.5).Draw(t, "duplicates"),
			Retries:       rapid.Float64Range(0, 0.5).Draw(t, "retries"),
			Orphans:       rapid.Float64Range(0, 0.5).Draw(t, "orphans"),
			LateParents:   rapid.Float64Range(0, 0.5).Draw(t, "late"),
			Gaps:          rapid.Float64Range(0, 0.5).Draw(t, "gaps"),
			Terminal:      rapid.Float64Range(0, 1).Draw(t, "terminal"),
			AfterTerminal: rapid.Float64Range(0, 1).Draw(t, "after terminal"),
			Seed:          rapid.Uint64().Draw(t, "seed"),
		}
		p, err := Generate(o)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Main) != o.Count {
			t.Fatalf("main part has %d webhooks, want %d", len(p.Main), o.Count)
		}
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "shuffle"), 1))
		r := newReplay()
		for _, part := range [][]Item{p.Setup, p.Main, p.Final} {
			part = slices.Clone(part)
			rng.Shuffle(len(part), func(i, j int) { part[i], part[j] = part[j], part[i] })
			for _, it := range part {
				r.apply(t, it)
			}
		}
		got := r.state()
		for _, stream := range model.Streams {
			if o.Mix[stream] == 0 {
				continue
			}
			if m := model.Compare(stream, p.Expected, got); len(m) > 0 {
				t.Fatalf("%d mismatches, first: %s", len(m), m[0])
			}
		}
	})
}

func TestEventIDsAreUniqueButForRedeliveries(t *testing.T) {
	p, err := Generate(Options{Mix: map[string]int{"presence": 1, "workflow": 1, "chat": 1, "orders": 1}, Count: 5000,
		Duplicates: 0.1, Retries: 0.1, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{}
	for _, it := range slices.Concat(p.Setup, p.Main, p.Final) {
		var head struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(it.Body, &head); err != nil || head.EventID != it.EventID {
			t.Fatalf("body %s: event_id %q, item says %q (%v)", it.Body, head.EventID, it.EventID, err)
		}
		if b, seen := bodies[it.EventID]; seen && b != string(it.Body) {
			t.Fatalf("event id %s names two bodies:\n%s\n%s", it.EventID, b, it.Body)
		}
		bodies[it.EventID] = string(it.Body)
	}
	if len(bodies) >= len(p.Main)+len(p.Setup)+len(p.Final) {
		t.Fatalf("no redelivery among %d webhooks", len(bodies))
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{Count: -1}, {Count: 1, Duplicates: 2}, {Count: 1, Orphans: 0.6, LateParents: 0.6},
		{Count: 1, Mix: map[string]int{"presence": 0}}} {
		if _, err := Generate(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if _, err := Parse("presence=2,nope=1"); err == nil {
		t.Error("an unknown stream parsed")
	}
	if m, err := Parse("presence=2, orders"); err != nil || m["presence"] != 2 || m["orders"] != 1 {
		t.Errorf("Parse: %v %v", m, err)
	}
}

// replay decides webhooks one at a time as each policy's docs say.
type replay struct {
	seen     map[string]bool
	presence map[string]model.Presence
	ops      map[string]*opState
	convs    map[string]*convState
	orders   map[string]*orderState
}

type opState struct {
	applied  int64
	status   string
	terminal bool
	buffer   map[int64]string // sequence → status
}

type convState struct {
	members map[string]bool
	clients map[string]bool
	last    int64
	cursors map[string]model.Cursor
}

type orderState struct {
	created  bool
	waiting  []string
	children []string
}

func newReplay() *replay {
	return &replay{seen: map[string]bool{}, presence: map[string]model.Presence{}, ops: map[string]*opState{},
		convs: map[string]*convState{}, orders: map[string]*orderState{}}
}

func (r *replay) apply(t *rapid.T, it Item) {
	var b struct {
		Presence        string `json:"presence"`
		SequenceNumber  int64  `json:"sequence_number"`
		Sequence        int64  `json:"sequence"`
		Status          string `json:"status"`
		UserID          string `json:"user_id"`
		SenderID        string `json:"sender_id"`
		SenderDeviceID  string `json:"sender_device_id"`
		ClientMessageID string `json:"client_message_id"`
		ConversationSeq int64  `json:"conversation_seq"`
	}
	if err := json.Unmarshal(it.Body, &b); err != nil {
		t.Fatal(err)
	}
	if r.seen[it.EventID] {
		return
	}
	r.seen[it.EventID] = true
	switch it.Stream {
	case "presence":
		if b.SequenceNumber > r.presence[it.Key].SequenceNumber {
			r.presence[it.Key] = model.Presence{Presence: b.Presence, SequenceNumber: b.SequenceNumber}
		}
	case "workflow":
		op := r.ops[it.Key]
		if op == nil {
			op = &opState{buffer: map[int64]string{}}
			r.ops[it.Key] = op
		}
		if op.terminal || b.Sequence <= op.applied {
			return
		}
		op.buffer[b.Sequence] = b.Status
		for !op.terminal {
			status, ok := op.buffer[op.applied+1]
			if !ok {
				break
			}
			delete(op.buffer, op.applied+1)
			op.applied++
			op.status = status
			op.terminal = slices.Contains(terminalStatuses, status)
		}
	case "chat":
		c := r.convs[it.Key]
		if c == nil {
			c = &convState{members: map[string]bool{}, clients: map[string]bool{}, cursors: map[string]model.Cursor{}}
			r.convs[it.Key] = c
		}
		switch it.Type {
		case "member.added":
			c.members[b.UserID] = true
		case "message.send":
			key := b.SenderDeviceID + "/" + b.ClientMessageID
			if c.clients[key] || !c.members[b.SenderID] {
				return
			}
			c.clients[key] = true
			c.last++
		case "receipt.read", "receipt.delivered":
			if b.ConversationSeq > c.last {
				t.Fatalf("receipt %s past the conversation's %d messages", it.Body, c.last)
			}
			cur := c.cursors[b.UserID]
			if it.Type == "receipt.read" {
				cur.Read = max(cur.Read, b.ConversationSeq)
			} else {
				cur.Delivered = max(cur.Delivered, b.ConversationSeq)
			}
			c.cursors[b.UserID] = cur
		}
	case "orders":
		o := r.orders[it.Key]
		if o == nil {
			o = &orderState{}
			r.orders[it.Key] = o
		}
		switch {
		case it.Type == "order.created":
			o.created = true
			o.children = append(o.children, o.waiting...)
			o.waiting = nil
		case o.created:
			o.children = append(o.children, it.EventID)
		default:
			o.waiting = append(o.waiting, it.EventID)
		}
	}
}

func (r *replay) state() model.State {
	st := model.State{Presence: r.presence, Workflow: map[string]model.Workflow{}, Chat: map[string]model.Conversation{},
		Orders: map[string]model.Order{}}
	for k, op := range r.ops {
		if op.applied > 0 {
			st.Workflow[k] = model.Workflow{Sequence: op.applied, Status: op.status}
		}
	}
	for k, c := range r.convs {
		var members []string
		for m := range c.members {
			members = append(members, m)
		}
		slices.Sort(members)
		st.Chat[k] = model.Conversation{LastSeq: c.last, Members: members, Cursors: c.cursors}
	}
	for k, o := range r.orders {
		slices.Sort(o.children)
		st.Orders[k] = model.Order{Created: o.created, Children: o.children}
	}
	return st
}
