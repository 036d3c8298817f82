// Package record is the contract between driftguard's components on Kafka:
// the headers ingest sets on every `<stream>.in` record, the records the
// processors write to `<stream>.outcomes`, `<stream>.state`, `<stream>.dlq`
// and `<stream>.replay`, and the names of every outcome and reason those
// records carry. Ingest, processors and sinks never import each other; they
// agree through this package, which imports no configuration.
//
// The outcome and state records are written and read for nearly every
// event, so their encoders and decoders are written by hand (codec.go),
// each next to the other and held to encoding/json by tests; the rare
// dead letters and replay requests go through encoding/json.
package record

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
)

// Kafka header names set by ingest on every `<stream>.in` record (design §3).
const (
	HeaderStream     = "dg-stream"
	HeaderEventID    = "dg-event-id"
	HeaderType       = "dg-type"
	HeaderReceivedAt = "dg-received-at" // unix milliseconds, decimal
	HeaderScheme     = "dg-scheme"
)

// Outcome is one decision, the value of a `<stream>.outcomes` record keyed by
// the entity key.
type Outcome struct {
	Stream    string `json:"stream"`
	Key       string `json:"key"`
	EventID   string `json:"event_id"`
	EventType string `json:"type"`
	// Version is the source version, or the assigned sequence for assign.
	Version int64  `json:"version"`
	Outcome Result `json:"outcome"`
	Reason  Reason `json:"reason,omitempty"`
	// Gap is how many versions this applied event skipped.
	Gap         int64 `json:"gap"`
	BufferDepth int   `json:"buffer_depth"`
	// MessageID is the message a send was assigned (assign), also on the
	// duplicate of a retried send.
	MessageID string `json:"message_id,omitempty"`
	// AcceptedAtMs is, on the duplicate of a retried send, when the send
	// that took the sequence was received (its applied outcome's
	// received_at), so that the retry answers with the original result;
	// 0 (omitted) on every other outcome.
	AcceptedAtMs int64 `json:"accepted_at_ms,omitempty"`
	// Action and RequestedBy name the operator action that made this
	// decision and who asked for it (see Action), on the action's own row
	// and on every row it decided; empty on every other decision.
	Action      ActionName `json:"action,omitempty"`
	RequestedBy string     `json:"requested_by,omitempty"`
	// The three clocks plus the decision time, unix ms.
	OccurredAtMs  int64 `json:"occurred_at_ms"`
	ReceivedAtMs  int64 `json:"received_at_ms"`
	ProcessedAtMs int64 `json:"processed_at_ms"`
	// Where the decided event sits in `<stream>.in`.
	InputPartition int32 `json:"input_partition"`
	InputOffset    int64 `json:"input_offset"`
	// DecisionID is the same on every repeat of this decision
	// (InputDecisionID, TimerDecisionID), so that each decision is counted
	// once anywhere; empty on records written before it existed.
	DecisionID string          `json:"decision_id"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// State is the public state of one entity after an applied change, the value
// of a `<stream>.state` record keyed by the entity key.
type State struct {
	Stream  string `json:"stream"`
	Key     string `json:"key"`
	Version int64  `json:"version"`
	// State is the JSON of the public state: the applied event's fields.
	State       json.RawMessage `json:"state"`
	UpdatedAtMs int64           `json:"updated_at_ms"`
	// ExpiresAtMs is when readers must show unknown; 0 means never.
	ExpiresAtMs int64 `json:"expires_at_ms"`
}

// DeadLetter is a record that could not be processed, the value of a
// `<stream>.dlq` record.
type DeadLetter struct {
	Stream    string `json:"stream"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Reason    Reason `json:"reason"`
	Detail    string `json:"detail,omitempty"`
	// What is known of the event (empty for a record that could not be
	// decoded), and when it was dead-lettered, unix ms.
	EventID      string `json:"event_id,omitempty"`
	EventType    string `json:"event_type,omitempty"`
	ReceivedAtMs int64  `json:"received_at_ms,omitempty"`
	AtMs         int64  `json:"at_ms"`
	// Payload is the original record value (base64 in JSON).
	Payload []byte `json:"payload"`
}

// ReplayRequest asks a producer to send an entity's events again from
// FirstMissing on, the value of a `<stream>.replay` record keyed by the
// entity key (gapless streams).
type ReplayRequest struct {
	Stream        string `json:"stream"`
	Key           string `json:"key"`
	FirstMissing  int64  `json:"first_missing"`
	RequestedAtMs int64  `json:"requested_at_ms"`
}

// HeaderReplayDelivery marks a `<stream>.replay` record written by the
// relay rather than by a processor: the delivery of a request, whose
// webhook-id it holds. The relay skips these records; the sink writes both
// kinds to replay_requests.
const HeaderReplayDelivery = "dg-replay-delivery"

// The ends of a replay request at the relay (ReplayDelivery.Result).
const (
	// ReplayDelivered: the publisher answered 2xx.
	ReplayDelivered = "delivered"
	// ReplayRefused: the publisher answered a 4xx other than 429, which
	// no retry changes; the request goes to the DLQ.
	ReplayRefused = "refused"
	// ReplayGaveUp: no 2xx within replay.give_up_after; to the DLQ.
	ReplayGaveUp = "gave_up"
	// ReplaySuperseded: a newer request for the key came before this one
	// was sent, and is sent instead; or the publisher accepted a later
	// from_sequence of the key less than replay.resend_after ago.
	ReplaySuperseded = "superseded"
	// ReplayDuplicate: the publisher accepted a request for the same gap
	// (the same webhook-id) less than replay.resend_after ago; not sent.
	ReplayDuplicate = "duplicate"
)

// ReplayDelivery is what became of one replay request, a `<stream>.replay`
// record keyed by the entity key with the HeaderReplayDelivery header,
// written in the transaction that commits the request's offset.
type ReplayDelivery struct {
	Stream string `json:"stream"`
	Key    string `json:"key"`
	// RequestID names the request's record (ReplayRequestID); Partition
	// and Offset locate it in the topic.
	RequestID string `json:"request_id"`
	// WebhookID is the webhook-id the request was (or would have been)
	// sent with: its gap's (ReplayWebhookID).
	WebhookID     string `json:"webhook_id"`
	Partition     int32  `json:"partition"`
	Offset        int64  `json:"offset"`
	FromSequence  int64  `json:"from_sequence"`
	RequestedAtMs int64  `json:"requested_at_ms"`
	Result        string `json:"result"`
	// Status is the publisher's last answer, 0 when none came.
	Status   int   `json:"status"`
	Attempts int   `json:"attempts"`
	AtMs     int64 `json:"at_ms"`
}

// ReplayRequestID names the replay request at partition and offset of
// stream's `<stream>.replay`: the same however often the record is read,
// it is the request_id joining a request's rows in replay_requests. The
// request's time tells apart the records of a topic deleted and created
// again, whose offsets start over.
func ReplayRequestID(stream string, partition int32, offset, requestedAtMs int64) string {
	return fmt.Sprintf("replay_%s_%d_%d_%d", stream, partition, offset, requestedAtMs)
}

// ReplayWebhookID is the webhook-id of every request for the gap of key
// at fromSequence: `replay_<stream>-<from_sequence>-<key>`, the key
// path-escaped so that any key makes a valid header value. A gap is asked
// for again every gap timeout while it stays open, and a relay that
// crashed sends again what it had not recorded; all of these name the
// same gap, so the publisher can deduplicate them. A stream name has no
// '-' and the key comes last, so the id is unambiguous.
func ReplayWebhookID(stream, key string, fromSequence int64) string {
	return "replay_" + stream + "-" + strconv.FormatInt(fromSequence, 10) + "-" + url.PathEscape(key)
}
