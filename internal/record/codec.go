package record

import (
	"encoding/json"
	"strconv"
)

// The outcome and state records are written for nearly every event and are
// nearly all a sink reads, so both directions are written by hand: the
// encoders append the JSON encoding/json produces for the same struct, up
// to escaping, without its reflection (which would also re-validate the
// payload the edge checked); the decoders read what the encoders write
// with a scanner of their own (scan.go) and leave any other input to
// encoding/json, so they always give what encoding/json gives. codec_test.go
// holds each direction to encoding/json and the decoders' fast path to the
// encoders' output.

// AppendOutcome appends o as JSON.
func AppendOutcome(b []byte, o *Outcome) []byte {
	b = appendStringField(b, '{', "stream", o.Stream)
	b = appendStringField(b, ',', "key", o.Key)
	b = appendStringField(b, ',', "event_id", o.EventID)
	b = appendStringField(b, ',', "type", o.EventType)
	b = appendIntField(b, "version", o.Version)
	b = appendStringField(b, ',', "outcome", string(o.Outcome))
	if o.Reason != "" {
		b = appendStringField(b, ',', "reason", string(o.Reason))
	}
	b = appendIntField(b, "gap", o.Gap)
	b = appendIntField(b, "buffer_depth", int64(o.BufferDepth))
	if o.MessageID != "" {
		b = appendStringField(b, ',', "message_id", o.MessageID)
	}
	if o.AcceptedAtMs != 0 {
		b = appendIntField(b, "accepted_at_ms", o.AcceptedAtMs)
	}
	if o.Action != "" {
		b = appendStringField(b, ',', "action", string(o.Action))
	}
	if o.RequestedBy != "" {
		b = appendStringField(b, ',', "requested_by", o.RequestedBy)
	}
	b = appendIntField(b, "occurred_at_ms", o.OccurredAtMs)
	b = appendIntField(b, "received_at_ms", o.ReceivedAtMs)
	b = appendIntField(b, "processed_at_ms", o.ProcessedAtMs)
	b = appendIntField(b, "input_partition", int64(o.InputPartition))
	b = appendIntField(b, "input_offset", o.InputOffset)
	b = appendStringField(b, ',', "decision_id", o.DecisionID)
	if len(o.Payload) > 0 {
		b = append(b, `,"payload":`...)
		b = append(b, o.Payload...)
	}
	return append(b, '}')
}

// DecodeOutcome reads an outcome record into o, all but its payload, which
// it returns as a string over data's own bytes (o.Payload is left nil).
// Every string of o shares data's memory too: the caller copies what it
// keeps beyond data's life, and may reuse o record after record.
func DecodeOutcome(data []byte, o *Outcome) (payload string, err error) {
	return decodeFlat(data, o, &o.Payload, outcomeFields)
}

// AppendState appends st as JSON.
func AppendState(b []byte, st *State) []byte {
	b = appendStringField(b, '{', "stream", st.Stream)
	b = appendStringField(b, ',', "key", st.Key)
	b = appendIntField(b, "version", st.Version)
	b = append(b, `,"state":`...)
	if len(st.State) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, st.State...)
	}
	b = appendIntField(b, "updated_at_ms", st.UpdatedAtMs)
	b = appendIntField(b, "expires_at_ms", st.ExpiresAtMs)
	return append(b, '}')
}

// DecodeState reads a state record into st, all but its state, which it
// returns as a string over data's own bytes (st.State is left nil), as
// DecodeOutcome does.
func DecodeState(data []byte, st *State) (state string, err error) {
	return decodeFlat(data, st, &st.State, stateFields)
}

// decodeFlat reads data into v, by scanFlat or else encoding/json, and
// returns v's raw field as a string, leaving the field nil.
func decodeFlat[T any](data []byte, v *T, raw *json.RawMessage, fields *flatFields) (string, error) {
	var zero T
	*v = zero
	if text, ok := scanFlat(data, v, fields); ok {
		return text, nil
	}
	*v = zero
	if err := json.Unmarshal(data, v); err != nil {
		return "", err
	}
	text := string(*raw)
	*raw = nil
	return text, nil
}

var (
	outcomeFields = fieldsOf[Outcome]()
	stateFields   = fieldsOf[State]()
)

func appendStringField(b []byte, sep byte, name, value string) []byte {
	b = append(b, sep, '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return AppendJSONString(b, value, false)
}

func appendIntField(b []byte, name string, value int64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, value, 10)
}
