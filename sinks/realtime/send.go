package realtime

import (
	"net/http"
	"time"

	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
)

// sent is the answer to a send that was decided: 201 when this attempt
// was applied, 200 with the original result for a retry of a send applied
// before (the same client_message_id from the same device).
type sent struct {
	Status          string `json:"status"`
	ConversationSeq int64  `json:"conversation_seq"`
	MessageID       string `json:"message_id"`
	ClientMessageID string `json:"client_message_id"`
	AcceptedAtMs    int64  `json:"accepted_at_ms"`
	EventID         string `json:"event_id"`
}

// send serves POST /v1/streams/{stream}/entities/{key}/messages: the
// client's body is the message's fields (for chat `client_message_id`,
// `body`, optionally `client_sent_at`); the bridge adds the conversation,
// the sender (the token's user), the device and a new event id, and
// answers with the processor's decision.
func (b *Bridge) send(q *request) {
	start := time.Now()
	w, ok := b.writing(q)
	if !ok {
		return
	}
	device, ok := requireDevice(q)
	if !ok {
		return
	}
	raw, ok := readBody(q, w)
	if !ok {
		return
	}
	obj, err := parseObject(raw)
	if err != nil {
		problem.Write(q.w, http.StatusBadRequest, "json", err.Error(), nil)
		return
	}
	s, conversation, eventID := w.cfg, q.r.PathValue("key"), newEventID()
	typ := s.Assign.Send.Types[0]
	set := setByBridge{{s.KeyPointer(typ), conversation}, {s.EventID, eventID}, {s.Type.Field, typ},
		{s.Assign.Send.Sender, q.user.Subject}, {s.Assign.Send.Device, device}}
	if problems := obj.refuseClientValues(set); problems != nil {
		problem.Write(q.w, http.StatusUnprocessableEntity, "schema", "the body holds fields only the bridge sets", problems)
		return
	}
	clientID := obj.text(s.Assign.Send.ClientMessageID)
	body, err := obj.build(set)
	if err != nil {
		problem.Write(q.w, http.StatusUnprocessableEntity, "schema", "the body's fields and those the bridge sets collide: "+err.Error(), nil)
		return
	}
	f, ok := w.event(q, body, eventID)
	if !ok {
		return
	}
	if !b.allowSend(q, w, conversation) {
		return
	}
	d, err := b.write(q, w, body, f, start)
	name := s.Name
	switch {
	case err == errPending:
		b.sendAck(name, "pending", start)
		writeStatus(q.w, http.StatusAccepted, pending{Status: "pending", EventID: eventID, ClientMessageID: clientID})
	case err != nil:
		b.sendAck(name, "error", start)
		b.refused(q, err)
	case d.Outcome == record.Applied || d.Outcome == record.Duplicate:
		b.sendAck(name, string(d.Outcome), start)
		status := http.StatusCreated
		if d.Outcome == record.Duplicate {
			status = http.StatusOK
		}
		writeStatus(q.w, status, sent{Status: string(d.Outcome), ConversationSeq: d.Version, MessageID: d.MessageID,
			ClientMessageID: clientID, AcceptedAtMs: d.acceptedAtMs(), EventID: eventID})
	default:
		b.sendAck(name, string(d.Outcome), start)
		problem.Write(q.w, rejectedStatus(d.Reason), string(d.Reason), "the processor rejected the message: "+string(d.Reason), nil)
	}
}

// allowSend takes a send of the user to conversation from both limits of
// bridge.send_rate; over either, it answers 429 with Retry-After and
// reports false.
func (b *Bridge) allowSend(q *request, w *writer, conversation string) bool {
	if ok, wait := w.perUser.take(q.user.Subject); !ok {
		b.tooMany(q, wait, "you are sending faster than bridge.send_rate.per_user allows")
		return false
	}
	if ok, wait := w.perConversation.take(conversation); !ok {
		w.perUser.give(q.user.Subject)
		b.tooMany(q, wait, "this conversation receives messages faster than bridge.send_rate.per_conversation allows")
		return false
	}
	return true
}

// tooMany answers 429, the wait rounded up to whole seconds.
func (b *Bridge) tooMany(q *request, wait time.Duration, detail string) {
	b.metrics.sendLimited.WithLabelValues(q.stream.cfg.Name).Inc()
	q.w.Header().Set("Retry-After", retryAfter(wait))
	problem.Write(q.w, http.StatusTooManyRequests, "rate_limited", detail+"; retry after the Retry-After seconds with the same client_message_id", nil)
}
