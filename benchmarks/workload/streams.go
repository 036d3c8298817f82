package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/driftguard/driftguard/benchmarks/model"
)

// item marshals body as the webhook of stream about key.
func item(stream, id, key, typ string, body any) Item {
	b, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("workload: %s body: %v", stream, err)) // the bodies here are plain structs
	}
	return Item{Stream: stream, EventID: id, Key: key, Type: typ, Body: b}
}

// withNewID returns it under a fresh event id, its content otherwise the
// same. Bodies here carry their id once, as event_id.
func (g base) withNewID(it Item) Item {
	id := g.ids.id("retry")
	old, _ := json.Marshal(it.EventID)
	now, _ := json.Marshal(id)
	it.Body = bytes.Replace(it.Body, old, now, 1)
	it.EventID = id
	return it
}

func (g base) retry(it Item) Item { return g.withNewID(it) }

// presence: each user's sequence_number grows, now and then skipping
// some; the highest one wins.
type presence struct {
	base
	gaps  float64
	seq   []int64
	state map[string]model.Presence
}

var presenceValues = []string{"ONLINE", "BUSY", "AWAY", "OFFLINE"}

func newPresence(g base, gaps float64) *presence {
	return &presence{base: g, gaps: gaps, seq: make([]int64, g.keys), state: map[string]model.Presence{}}
}

type presenceBody struct {
	EventID        string `json:"event_id"`
	UserID         string `json:"user_id"`
	Presence       string `json:"presence"`
	SequenceNumber int64  `json:"sequence_number"`
	Timestamp      int64  `json:"timestamp"`
}

func (p *presence) next() (Item, int) {
	u := p.rng.IntN(p.keys)
	p.seq[u]++
	for p.rng.Float64() < p.gaps {
		p.seq[u]++
	}
	user := p.ids.key("u", u)
	value := presenceValues[p.rng.IntN(len(presenceValues))]
	p.state[user] = model.Presence{Presence: value, SequenceNumber: p.seq[u]}
	id := p.ids.id("presence")
	return item("presence", id, user, "presence.changed", presenceBody{EventID: id, UserID: user, Presence: value,
		SequenceNumber: p.seq[u], Timestamp: p.now().Unix()}), 0
}

func (p *presence) expect(st *model.State) { st.Presence = p.state }

// workflow: operations numbered 1, 2, 3..., interleaved; some with a step
// that never comes, most ending in a terminal step, some sending a step
// after it.
type workflow struct {
	base
	gaps, terminal, afterTerminal float64
	open                          []*operation
	done                          []*operation
	made                          int
}

type operation struct {
	key string
	// steps is its length; plan, the steps it sends, in order: 1..steps
	// without the one that never comes, and steps+1 after a terminal one
	// for some; sent, how many of them were made.
	steps    int
	plan     []int
	sent     int
	missing  int
	terminal string
	// applied and status are what the gapless policy leaves: the last
	// step before the first one missing.
	applied int
	status  string
}

type workflowBody struct {
	EventID     string   `json:"event_id"`
	OperationID string   `json:"operation_id"`
	Sequence    int      `json:"sequence"`
	Status      string   `json:"status"`
	Progress    *float64 `json:"progress,omitempty"`
	OccurredAt  string   `json:"occurred_at"`
}

var terminalStatuses = []string{"completed", "failed", "cancelled"}

func newWorkflow(g base, gaps, terminal, afterTerminal float64) *workflow {
	w := &workflow{base: g, gaps: gaps, terminal: terminal, afterTerminal: afterTerminal}
	for range g.keys {
		w.open = append(w.open, w.operation())
	}
	return w
}

func (w *workflow) operation() *operation {
	op := &operation{key: w.ids.key("op", w.made), steps: 3 + w.rng.IntN(6)}
	w.made++
	if w.rng.Float64() < w.gaps {
		op.missing = 2 + w.rng.IntN(op.steps-1)
	}
	for step := 1; step <= op.steps; step++ {
		if step != op.missing {
			op.plan = append(op.plan, step)
		}
	}
	if w.rng.Float64() < w.terminal {
		op.terminal = terminalStatuses[w.rng.IntN(len(terminalStatuses))]
		if w.rng.Float64() < w.afterTerminal {
			op.plan = append(op.plan, op.steps+1)
		}
	}
	return op
}

// status is what step of op says.
func (w *workflow) status(op *operation, step int) (string, *float64) {
	switch {
	case step == 1:
		return "queued", nil
	case step == op.steps && op.terminal != "":
		return op.terminal, nil
	case step == 2:
		return "running", nil
	case step > op.steps:
		return "progress", nil
	}
	pct := float64(100*step/(op.steps+1)) + 0.5
	return "progress", &pct
}

func (w *workflow) next() (Item, int) {
	i := w.rng.IntN(len(w.open))
	op := w.open[i]
	step := op.plan[op.sent]
	op.sent++
	if op.sent == len(op.plan) {
		w.done = append(w.done, op)
		w.open[i] = w.operation()
	}
	status, pct := w.status(op, step)
	if (op.missing == 0 || step < op.missing) && step <= op.steps {
		op.applied, op.status = step, status
	}
	id := w.ids.id("wf")
	return item("workflow", id, op.key, "workflow.progress", workflowBody{EventID: id, OperationID: op.key, Sequence: step,
		Status: status, Progress: pct, OccurredAt: w.now().UTC().Format(time.RFC3339)}), 0
}

func (w *workflow) expect(st *model.State) {
	st.Workflow = map[string]model.Workflow{}
	for _, op := range append(slices.Clone(w.done), w.open...) {
		if op.applied > 0 {
			st.Workflow[op.key] = model.Workflow{Sequence: int64(op.applied), Status: op.status}
		}
	}
}

// chat: conversations whose members are added first, messages from
// members (retried under new event ids with the same client message id),
// then read and delivery receipts, some behind the cursor.
type chat struct {
	base
	members [][]string
	sent    []int64
	clients int
	// cursors are the furthest receipts made, by conversation and member.
	cursors []map[string]model.Cursor
}

const chatMembers = 3

func newChat(g base) *chat {
	c := &chat{base: g, members: make([][]string, g.keys), sent: make([]int64, g.keys), cursors: make([]map[string]model.Cursor, g.keys)}
	for i := range c.members {
		for m := range chatMembers {
			c.members[i] = append(c.members[i], fmt.Sprintf("%s-m%d", c.ids.key("conv", i), m))
		}
	}
	return c
}

// ChatBody is a chat webhook's body, every type's fields (the chat
// benchmark sends them too).
type ChatBody struct {
	EventID         string `json:"event_id"`
	Type            string `json:"type"`
	ConversationID  string `json:"conversation_id"`
	UserID          string `json:"user_id,omitempty"`
	SenderID        string `json:"sender_id,omitempty"`
	SenderDeviceID  string `json:"sender_device_id,omitempty"`
	ClientMessageID string `json:"client_message_id,omitempty"`
	Body            string `json:"body,omitempty"`
	DeviceID        string `json:"device_id,omitempty"`
	ConversationSeq int64  `json:"conversation_seq,omitempty"`
}

func (c *chat) event(conv int, body ChatBody) Item {
	body.EventID = c.ids.id("chat")
	body.ConversationID = c.ids.key("conv", conv)
	return item("chat", body.EventID, body.ConversationID, body.Type, body)
}

func (c *chat) setup() []Item {
	var out []Item
	for conv, members := range c.members {
		for _, m := range members {
			out = append(out, c.event(conv, ChatBody{Type: "member.added", UserID: m}))
		}
	}
	return out
}

func (c *chat) next() (Item, int) {
	conv := c.rng.IntN(c.keys)
	sender := c.members[conv][c.rng.IntN(chatMembers)]
	c.clients++
	c.sent[conv]++
	return c.event(conv, ChatBody{Type: "message.send", SenderID: sender, SenderDeviceID: sender + "-phone",
		ClientMessageID: fmt.Sprintf("cm-%d", c.clients), Body: "hello " + sender}), 0
}

// final sends each member's receipts: one to the cursor it ends at and
// one behind it (stale), for reads and deliveries.
func (c *chat) final() []Item {
	var out []Item
	for conv, members := range c.members {
		if c.sent[conv] == 0 {
			continue
		}
		c.cursors[conv] = map[string]model.Cursor{}
		for _, m := range members {
			var cur model.Cursor
			for _, typ := range []string{"receipt.read", "receipt.delivered"} {
				to := 1 + c.rng.Int64N(c.sent[conv])
				if typ == "receipt.read" {
					cur.Read = to
				} else {
					cur.Delivered = to
				}
				out = append(out, c.event(conv, ChatBody{Type: typ, UserID: m, DeviceID: m + "-phone", ConversationSeq: to}))
				if to > 1 {
					out = append(out, c.event(conv, ChatBody{Type: typ, UserID: m, DeviceID: m + "-phone",
						ConversationSeq: 1 + c.rng.Int64N(to-1)}))
				}
			}
			c.cursors[conv][m] = cur
		}
	}
	return out
}

func (c *chat) expect(st *model.State) {
	st.Chat = map[string]model.Conversation{}
	for conv, members := range c.members {
		st.Chat[c.ids.key("conv", conv)] = model.Conversation{LastSeq: c.sent[conv], Members: slices.Sorted(slices.Values(members)),
			Cursors: c.cursors[conv]}
	}
}

// orders: orders with one to three children; most parents come first,
// some after their children (late), some never (orphans).
type orders struct {
	base
	orphans, late float64
	delay         int
	open          []*order
	done          []*order
	byKey         map[string]*order
	made          int
}

type order struct {
	key      string
	kind     int // orderNormal, orderLate, orderOrphan
	children int // how many it sends
	// sent counts its webhooks made so far: the parent and children, in
	// the order its kind sends them.
	sent     int
	created  bool
	childIDs []string
}

const (
	orderNormal = iota
	orderLate
	orderOrphan
)

var childTypes = []string{"order.payment_received", "payment.captured", "order.shipped"}

type orderBody struct {
	EventID   string         `json:"event_id"`
	EventType string         `json:"event_type"`
	OrderID   string         `json:"order_id,omitempty"`
	ParentID  string         `json:"parent_id,omitempty"`
	Payload   map[string]any `json:"payload"`
}

func newOrders(g base, orphans, late float64, delay int) *orders {
	o := &orders{base: g, orphans: orphans, late: late, delay: delay, byKey: map[string]*order{}}
	for range g.keys {
		o.open = append(o.open, o.order())
	}
	return o
}

func (o *orders) order() *order {
	od := &order{key: o.ids.key("order", o.made), children: 1 + o.rng.IntN(len(childTypes))}
	o.made++
	o.byKey[od.key] = od
	switch r := o.rng.Float64(); {
	case r < o.orphans:
		od.kind = orderOrphan
	case r < o.orphans+o.late:
		od.kind = orderLate
	}
	return od
}

func (o *orders) next() (Item, int) {
	i := o.rng.IntN(len(o.open))
	od := o.open[i]
	total := od.children + 1
	if od.kind == orderOrphan {
		total = od.children
	}
	parentAt := 0
	if od.kind == orderLate {
		parentAt = od.children
	}
	n := od.sent
	od.sent++
	if od.sent == total {
		o.done = append(o.done, od)
		o.open[i] = o.order()
	}
	id := o.ids.id("ord")
	if od.kind != orderOrphan && n == parentAt {
		od.created = true
		delay := 0
		if od.kind == orderLate {
			delay = o.delay
		}
		return item("orders", id, od.key, "order.created", orderBody{EventID: id, EventType: "order.created", OrderID: od.key,
			Payload: map[string]any{"amount_cents": 1000 + o.rng.IntN(9000)}}), delay
	}
	child := n
	if n > parentAt && od.kind != orderOrphan {
		child--
	}
	typ := childTypes[child%len(childTypes)]
	od.childIDs = append(od.childIDs, id)
	return item("orders", id, od.key, typ, orderBody{EventID: id, EventType: typ, ParentID: od.key,
		Payload: map[string]any{"step": child + 1}}), 0
}

// retry records a child sent again under a new id: to driftguard, and to
// any contender, that is a child of its own.
func (o *orders) retry(it Item) Item {
	r := o.withNewID(it)
	if it.Type != "order.created" {
		od := o.byKey[it.Key]
		od.childIDs = append(od.childIDs, r.EventID)
	}
	return r
}

func (o *orders) expect(st *model.State) {
	st.Orders = map[string]model.Order{}
	for _, od := range append(slices.Clone(o.done), o.open...) {
		if od.created {
			st.Orders[od.key] = model.Order{Created: true, Children: slices.Sorted(slices.Values(od.childIDs))}
		}
	}
}
