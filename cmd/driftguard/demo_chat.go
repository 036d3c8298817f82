package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// demoRoom is the conversation of the chat demo.
const demoRoom = "team-room"

// chatEvent is a chat webhook of any type; each type sets its own fields.
type chatEvent struct {
	EventID         string `json:"event_id"`
	Type            string `json:"type"`
	ConversationID  string `json:"conversation_id"`
	SenderID        string `json:"sender_id,omitempty"`
	SenderDeviceID  string `json:"sender_device_id,omitempty"`
	ClientMessageID string `json:"client_message_id,omitempty"`
	Body            string `json:"body,omitempty"`
	ClientSentAt    string `json:"client_sent_at,omitempty"`
	UserID          string `json:"user_id,omitempty"`
	DeviceID        string `json:"device_id,omitempty"`
	ConversationSeq int64  `json:"conversation_seq,omitempty"`
}

var demoLines = []string{
	"morning all", "standup in 5?", "the build is green again", "who has the deploy today?",
	"looking at the flaky test now", "lunch?", "PR is up, small one", "back in 10",
	"the dashboard looks off, anyone else?", "fixed, it was the cache", "thanks!", "+1",
}

// chatDemo is the demo team talking in demoRoom. The room opens with
// everyone joining, the page's user too; then it goes in cycles of a few messages and a leave.
// A message: now and then a typing indicator first, the send (the first
// of each cycle, and one in five of the others, sent again by the client
// under a new event id with the same device and client message id), a
// delivery receipt from another member, and sometimes their read receipt.
// A leave: last cycle's leaver rejoins, someone else leaves, and a client
// of theirs that has not heard yet sends a message anyway (refused: not a
// member).
type chatDemo struct {
	demoSource
	// in is who is a member, as far as the demo has said.
	in map[string]bool
	// left is who left at the last leave, "" before the first.
	left string
	// seq is the sequence of the room's last message.
	seq int64
	// messages is how many messages have been written, for their client
	// ids.
	messages int
	// toSend is how many messages are left in this cycle; retry says the
	// next one is retried.
	toSend int
	retry  bool
}

func newChatDemo(rng *rand.Rand) *chatDemo {
	return &chatDemo{demoSource: newDemoSource(rng)}
}

func (c *chatDemo) next(now time.Time) []delivery {
	switch {
	case c.in == nil:
		c.in = map[string]bool{}
		var out []delivery
		for _, m := range demoTeam {
			out = append(out, c.membership("member.added", m.user))
		}
		// The page's user joins too, to watch: it never speaks or leaves.
		out = append(out, c.event(chatEvent{Type: "member.added", UserID: pageUser}))
		c.toSend, c.retry = 2, true
		return out
	case c.toSend > 0:
		c.toSend--
		retry := c.retry || c.rng.IntN(5) == 0
		c.retry = false
		return c.message(now, retry)
	default:
		c.toSend, c.retry = 3+c.rng.IntN(4), true
		return c.leave(now)
	}
}

// message is one member's message and what follows it.
func (c *chatDemo) message(now time.Time, retry bool) []delivery {
	members := c.members()
	sender := members[c.rng.IntN(len(members))]
	var out []delivery
	if c.rng.IntN(3) == 0 {
		out = append(out, c.event(chatEvent{Type: "typing", UserID: sender}))
	}
	send := c.send(now, sender)
	out = append(out, c.event(send))
	if retry {
		out = append(out, c.event(send))
	}
	c.seq++
	reader := members[(slices.Index(members, sender)+1+c.rng.IntN(len(members)-1))%len(members)]
	device := c.device(reader)
	out = append(out, c.event(chatEvent{Type: "receipt.delivered", UserID: reader, DeviceID: device, ConversationSeq: c.seq}))
	if c.rng.IntN(2) == 0 {
		out = append(out, c.event(chatEvent{Type: "receipt.read", UserID: reader, DeviceID: device, ConversationSeq: c.seq}))
	}
	return out
}

// leave lets last cycle's leaver back in and someone else out, whose
// send after leaving is refused.
func (c *chatDemo) leave(now time.Time) []delivery {
	var out []delivery
	back := c.left
	if back != "" {
		out = append(out, c.membership("member.added", back))
	}
	members := slices.DeleteFunc(c.members(), func(m string) bool { return m == back })
	c.left = members[c.rng.IntN(len(members))]
	out = append(out, c.membership("member.removed", c.left))
	return append(out, c.event(c.send(now, c.left)))
}

// send is a new message of user from one of their devices; its event id
// is set when it is sent.
func (c *chatDemo) send(now time.Time, user string) chatEvent {
	c.messages++
	return chatEvent{Type: "message.send", SenderID: user, SenderDeviceID: c.device(user),
		ClientMessageID: fmt.Sprintf("msg-%s-%d", c.run, c.messages), Body: demoLines[c.rng.IntN(len(demoLines))],
		ClientSentAt: now.UTC().Format(time.RFC3339Nano)}
}

func (c *chatDemo) membership(typ, user string) delivery {
	c.in[user] = typ == "member.added"
	return c.event(chatEvent{Type: typ, UserID: user})
}

// event is ev in demoRoom under a new event id, named after its type (with
// no dot: a Standard Webhooks id has none).
func (c *chatDemo) event(ev chatEvent) delivery {
	ev.ConversationID = demoRoom
	ev.EventID = demoID(c.rng, demoRoom+"-"+strings.ReplaceAll(ev.Type, ".", "-"))
	return newDelivery(ev.EventID, demoRoom, 0, "", ev)
}

// members are the room's members, in the team's order.
func (c *chatDemo) members() []string {
	var out []string
	for _, m := range demoTeam {
		if c.in[m.user] {
			out = append(out, m.user)
		}
	}
	return out
}

// device is one of user's devices, at random.
func (c *chatDemo) device(user string) string {
	i := slices.IndexFunc(demoTeam, func(m demoMember) bool { return m.user == user })
	devices := demoTeam[i].devices
	return devices[c.rng.IntN(len(devices))]
}
