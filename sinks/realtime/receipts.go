package realtime

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/driftguard/driftguard/internal/problem"
	"github.com/driftguard/driftguard/internal/record"
)

// receiptRequest is a client's receipt: how far the user has read, or
// their device has received, the conversation.
type receiptRequest struct {
	Type            string      `json:"type"`
	ConversationSeq json.Number `json:"conversation_seq"`
}

// receipted is the answer to a decided receipt: applied (the cursor
// moved), stale (it was there already) or duplicate.
type receipted struct {
	Status          string `json:"status"`
	ConversationSeq int64  `json:"conversation_seq"`
	EventID         string `json:"event_id"`
}

// receipt serves POST /v1/streams/{stream}/entities/{key}/receipts: the
// bridge writes a read or delivery receipt of the token's user (and
// device, where the stream records delivery per device) and answers with
// the decision: 200 applied or stale, 403 not_member, 409 ahead of the
// conversation, 202 pending.
func (b *Bridge) receipt(q *request) {
	start := time.Now()
	w, ok := b.writing(q)
	if !ok {
		return
	}
	a := &w.cfg.Assign
	device := ""
	if a.Receipts.Device != "" {
		if device, ok = requireDevice(q); !ok {
			return
		}
	}
	raw, ok := readBody(q, w)
	if !ok {
		return
	}
	var in receiptRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil {
		problem.Write(q.w, http.StatusBadRequest, "json", `the body must be {"type":"read"|"delivered","conversation_seq":N}: `+err.Error(), nil)
		return
	}
	types := map[string][]string{"read": a.Receipts.Read, "delivered": a.Receipts.Delivered}[in.Type]
	if len(types) == 0 {
		problem.Write(q.w, http.StatusUnprocessableEntity, "schema", "the receipt's type must be read or delivered",
			[]problem.Field{{Pointer: "/type", Detail: "must be read or delivered, got " + quote(in.Type)}})
		return
	}
	s, conversation, eventID, typ := w.cfg, q.r.PathValue("key"), newEventID(), types[0]
	set := setByBridge{{s.KeyPointer(typ), conversation}, {s.EventID, eventID}, {s.Type.Field, typ},
		{a.Receipts.User, q.user.Subject}, {a.Receipts.Device, device}}
	if in.ConversationSeq != "" {
		set = append(set, setByBridge{{a.Receipts.Sequence, in.ConversationSeq}}...)
	}
	body, err := eventBody{}.build(set)
	if err != nil {
		problem.Write(q.w, http.StatusUnprocessableEntity, "schema", "the receipt's fields collide: "+err.Error(), nil)
		return
	}
	f, ok := w.event(q, body, eventID)
	if !ok {
		return
	}
	d, err := b.write(q, w, body, f, start)
	switch {
	case err == errPending:
		writeStatus(q.w, http.StatusAccepted, pending{Status: "pending", EventID: eventID})
	case err != nil:
		b.refused(q, err)
	case d.Outcome == record.Rejected:
		problem.Write(q.w, rejectedStatus(d.Reason), string(d.Reason), "the processor rejected the receipt: "+string(d.Reason), nil)
	default:
		writeStatus(q.w, http.StatusOK, receipted{Status: string(d.Outcome), ConversationSeq: d.Version, EventID: eventID})
	}
}

// quote is s as a JSON string, for details that show a client's value.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
