package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A crash history: seeded random deliveries for the three ordering
// policies and the parent join, with what their final state must be. Each key's deliveries are
// listed in the order they are produced, which is their log order.

// crashInput is one delivery to a stream's input.
type crashInput struct {
	stream  string // the catalogue stream: presence, workflow, chat or orders
	key     string
	eventID string
	body    []byte
	version int64 // presence sequence_number, workflow sequence
	// chat: the event type, the logical message of a send (device and
	// client message id), and the user of a membership change or receipt.
	chatType string
	message  string
	user     string
	// orders: the event type, whether it is received an hour ahead (a child
	// whose parent comes, below), and the final decision the model expects.
	orderType string
	ahead     bool
	want      record.Result
	// Where the broker put it.
	partition int32
	offset    int64
}

// crashHistory is the deliveries in production order, and what each key
// must end as.
type crashHistory struct {
	inputs []*crashInput
	// presence: the version and status of each user's highest version.
	presence map[string]delivery
	// workflow: each operation's last applicable sequence and its status.
	workflow map[string]workflowEnd
	// chat: each conversation's members, logical messages in the order of
	// their first delivery, and read and delivery cursors.
	chat map[string]*chatEnd
	// orders: each order's revision and last applied body, for the orders
	// whose order.created comes.
	orders map[string]ordersEnd
}

type ordersEnd struct {
	version int64
	body    []byte
}

type workflowEnd struct {
	seq    int64
	status string
}

type chatEnd struct {
	members   []string
	messages  []string
	read      map[string]int64
	delivered map[string]int64
}

// crashSizes are the minimum deliveries per stream.
type crashSizes struct{ presence, workflow, chat, orders int }

func newCrashHistory(rng *rand.Rand, sizes crashSizes) *crashHistory {
	h := &crashHistory{presence: map[string]delivery{}, workflow: map[string]workflowEnd{}, chat: map[string]*chatEnd{}, orders: map[string]ordersEnd{}}
	var perKey [][]*crashInput
	count := func(n *int, ds []*crashInput) { *n += len(ds); perKey = append(perKey, ds) }
	for n, u := 0, 0; n < sizes.presence; u++ {
		count(&n, h.presenceKey(rng, fmt.Sprintf("user-%04d", u)))
	}
	for n, o := 0, 0; n < sizes.workflow; o++ {
		count(&n, h.workflowKey(rng, fmt.Sprintf("op-%04d", o)))
	}
	for n, c := 0, 0; n < sizes.chat; c++ {
		count(&n, h.chatKey(rng, fmt.Sprintf("conv-%04d", c)))
	}
	for n, o := 0, 0; n < sizes.orders; o++ {
		count(&n, h.ordersKey(rng, fmt.Sprintf("order-%04d", o)))
	}
	// Interleave the keys at random, each key's deliveries in its order.
	var turns []int
	for k, ds := range perKey {
		for range ds {
			turns = append(turns, k)
		}
	}
	rng.Shuffle(len(turns), func(i, j int) { turns[i], turns[j] = turns[j], turns[i] })
	for _, k := range turns {
		h.inputs = append(h.inputs, perKey[k][0])
		perKey[k] = perKey[k][1:]
	}
	return h
}

// presenceKey is a user's versions 1..n, some retried under a new event id,
// shuffled and partly delivered twice.
func (h *crashHistory) presenceKey(rng *rand.Rand, user string) []*crashInput {
	history := presenceHistory(rng, user, 1, 3+rng.IntN(12))
	h.presence[user] = history[len(history)-1]
	for _, d := range history {
		if rng.IntN(10) == 0 {
			id := d.ID + "-retry"
			history = append(history, delivery{ID: id, Key: user, Version: d.Version, Status: d.Status,
				Body: testenv.Presence{EventID: id, User: user, Status: d.Status, Version: d.Version, Timestamp: 1_700_000_000 + d.Version}.Body()})
		}
	}
	var out []*crashInput
	for _, d := range disorder(rng, history, 0.3) {
		out = append(out, &crashInput{stream: "presence", key: user, eventID: d.ID, body: d.Body, version: d.Version})
	}
	return out
}

var terminalStatuses = []string{"completed", "failed", "cancelled"}

// workflowKey is an operation's sequences 1..n, every one delivered, in a
// shuffled order, some twice or retried under a new event id; some
// operations end early in a terminal status and report more steps after it.
func (h *crashHistory) workflowKey(rng *rand.Rand, op string) []*crashInput {
	n := int64(2 + rng.IntN(12))
	end := workflowEnd{seq: n}
	if rng.IntN(3) == 0 {
		end.seq = 2 + rng.Int64N(n-1) // the first step is queued
	}
	var out []*crashInput
	for seq := int64(1); seq <= n; seq++ {
		status := "progress"
		switch {
		case seq == 1:
			status = "queued"
		case seq == end.seq && end.seq < n:
			status = terminalStatuses[rng.IntN(len(terminalStatuses))]
		case seq == n:
			status = "completed"
		}
		if seq == end.seq {
			end.status = status
		}
		for attempt := 0; attempt == 0 || rng.IntN(8) == 0; attempt++ {
			id := fmt.Sprintf("%s-s%d-a%d-%08x", op, seq, attempt, rng.Uint32())
			body := fmt.Appendf(nil, `{"event_id":%q,"operation_id":%q,"sequence":%d,"status":%q,"progress":%d,"occurred_at":%q}`,
				id, op, seq, status, 100*seq/n, time.Unix(1_700_000_000+seq, 0).UTC().Format(time.RFC3339))
			in := crashInput{stream: "workflow", key: op, eventID: id, body: body, version: seq}
			out = append(out, &in)
			if rng.IntN(5) == 0 {
				again := in
				out = append(out, &again)
			}
		}
	}
	h.workflow[op] = end
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// chatKey is a conversation: its members join, then they send messages
// (some retried from the same device under the same or a new event id),
// acknowledge what they have seen with read and delivery receipts, and an
// outsider tries to send now and then.
func (h *crashHistory) chatKey(rng *rand.Rand, conv string) []*crashInput {
	end := &chatEnd{read: map[string]int64{}, delivered: map[string]int64{}}
	h.chat[conv] = end
	var out []*crashInput
	seq := 0
	add := func(in *crashInput) {
		in.stream, in.key = "chat", conv
		in.eventID = fmt.Sprintf("%s-e%d-%08x", conv, len(out), rng.Uint32())
		in.body = chatBody(in, conv)
		out = append(out, in)
	}
	for m := range 2 + rng.IntN(3) {
		user := fmt.Sprintf("%s-u%d", conv, m)
		end.members = append(end.members, user)
		add(&crashInput{chatType: "member.added", user: user})
	}
	slices.Sort(end.members)
	var sends []*crashInput
	for range 30 + rng.IntN(40) {
		switch r := rng.IntN(100); {
		case r < 60 || len(sends) == 0:
			user := end.members[rng.IntN(len(end.members))]
			device := fmt.Sprintf("%s-d%d", user, rng.IntN(2))
			in := &crashInput{chatType: "message.send", user: user, message: fmt.Sprintf("%s/c%d", device, seq)}
			add(in)
			sends = append(sends, in)
			end.messages = append(end.messages, in.message)
			seq++
		case r < 72: // a client retry: same device and client message id
			again := *sends[rng.IntN(len(sends))]
			add(&again)
		case r < 78: // a broker redelivery: the same event
			again := *out[rng.IntN(len(out))]
			out = append(out, &again)
		case r < 80:
			add(&crashInput{chatType: "message.send", user: conv + "-outsider", message: fmt.Sprintf("%s-outsider-d0/c%d", conv, rng.Uint32())})
		default:
			user := end.members[rng.IntN(len(end.members))]
			typ, cursor := "receipt.read", end.read
			if rng.IntN(2) == 0 {
				typ, cursor = "receipt.delivered", end.delivered
			}
			at := int64(1 + rng.IntN(seq))
			cursor[user] = max(cursor[user], at)
			add(&crashInput{chatType: typ, user: user, version: at})
		}
	}
	return out
}

// chatBody is the webhook body of a chat event.
func chatBody(in *crashInput, conv string) []byte {
	switch in.chatType {
	case "message.send":
		device, client, _ := strings.Cut(in.message, "/")
		return fmt.Appendf(nil, `{"event_id":%q,"type":"message.send","conversation_id":%q,"sender_id":%q,"sender_device_id":%q,"client_message_id":%q,"body":"hello %s"}`,
			in.eventID, conv, in.user, device, client, client)
	case "member.added", "member.removed":
		return fmt.Appendf(nil, `{"event_id":%q,"type":%q,"conversation_id":%q,"user_id":%q}`, in.eventID, in.chatType, conv, in.user)
	}
	return fmt.Appendf(nil, `{"event_id":%q,"type":%q,"conversation_id":%q,"user_id":%q,"device_id":"%s-d0","conversation_seq":%d}`,
		in.eventID, in.chatType, conv, in.user, in.user, in.version)
}

var orderChildTypes = []string{"order.payment_received", "payment.captured", "order.shipped"}

// ordersKey is an order's children and, for two orders in three, its
// order.created: after some of its children (they wait in lost+found and
// reconcile) or anywhere among them; some events are delivered twice. The
// children of an order that never comes expire after parent.ttl to the
// DLQ. A child whose parent comes is received an hour ahead, so that its
// parent, however many kills later it is decided, never races its TTL: the
// model then says exactly which children reconcile and which expire.
func (h *crashHistory) ordersKey(rng *rand.Rand, order string) []*crashInput {
	var out []*crashInput
	parent := rng.IntN(3) != 0
	for i := range 1 + rng.IntN(4) {
		typ := orderChildTypes[rng.IntN(len(orderChildTypes))]
		id := fmt.Sprintf("%s-c%d-%08x", order, i, rng.Uint32())
		out = append(out, &crashInput{stream: "orders", key: order, eventID: id, orderType: typ, ahead: parent,
			body: fmt.Appendf(nil, `{"event_id":%q,"event_type":%q,"parent_id":%q,"payload":{"amount":%d}}`, id, typ, order, 1+rng.IntN(500))})
	}
	if parent {
		id := fmt.Sprintf("%s-created-%08x", order, rng.Uint32())
		created := &crashInput{stream: "orders", key: order, eventID: id, orderType: "order.created",
			body: fmt.Appendf(nil, `{"event_id":%q,"event_type":"order.created","order_id":%q,"payload":{"total":%d}}`, id, order, 1+rng.IntN(500))}
		at := rng.IntN(len(out) + 1)
		if rng.IntN(2) == 0 {
			at = 1 + rng.IntN(len(out)) // after at least one child
		}
		out = slices.Insert(out, at, created)
	}
	// Retries: the same event again, somewhere after the first.
	for i := 0; i < len(out); i++ {
		if rng.IntN(5) == 0 {
			again := *out[i]
			out = slices.Insert(out, i+1+rng.IntN(len(out)-i), &again)
		}
	}
	// The model: the order as the parent join decides it, in log order.
	seen := map[string]bool{}
	created := false
	var waiting []*crashInput
	end := ordersEnd{}
	apply := func(in *crashInput) { end.version++; end.body = in.body }
	for _, in := range out {
		switch {
		case seen[in.eventID]:
			in.want = record.Duplicate
		case in.orderType == "order.created":
			in.want, created = record.Applied, true
			apply(in)
			for _, w := range waiting {
				w.want = record.Reconciled
				apply(w)
			}
			waiting = nil
		case created:
			in.want = record.Applied
			apply(in)
		default:
			waiting = append(waiting, in)
		}
		seen[in.eventID] = true
	}
	for _, w := range waiting {
		w.want = record.Expired
	}
	if parent {
		h.orders[order] = end
	}
	return out
}
