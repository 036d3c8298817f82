package processors

import (
	"strconv"

	"github.com/driftguard/driftguard/internal/envelope"
)

// The outcome and state records are written for nearly every event, so
// they are encoded by hand instead of through encoding/json's reflection
// (which also re-validates the payload the decoder already checked). The
// output is the JSON encoding/json produces for the same struct, up to
// escaping; records_test.go holds them to that.

// appendOutcome appends o as JSON, with the field names of envelope.Outcome.
func appendOutcome(b []byte, o *envelope.Outcome) []byte {
	b = appendStringField(b, '{', "stream", o.Stream)
	b = appendStringField(b, ',', "key", o.Key)
	b = appendStringField(b, ',', "event_id", o.EventID)
	b = appendStringField(b, ',', "type", o.EventType)
	b = appendIntField(b, "version", o.Version)
	b = appendStringField(b, ',', "outcome", o.Outcome)
	if o.Reason != "" {
		b = appendStringField(b, ',', "reason", o.Reason)
	}
	b = appendIntField(b, "gap", o.Gap)
	b = appendIntField(b, "buffer_depth", int64(o.BufferDepth))
	if o.MessageID != "" {
		b = appendStringField(b, ',', "message_id", o.MessageID)
	}
	b = appendIntField(b, "occurred_at_ms", o.OccurredAtMs)
	b = appendIntField(b, "received_at_ms", o.ReceivedAtMs)
	b = appendIntField(b, "processed_at_ms", o.ProcessedAtMs)
	b = appendIntField(b, "input_partition", int64(o.InputPartition))
	b = appendIntField(b, "input_offset", o.InputOffset)
	if len(o.Payload) > 0 {
		b = append(b, `,"payload":`...)
		b = append(b, o.Payload...)
	}
	return append(b, '}')
}

// appendState appends st as JSON, with the field names of envelope.State.
func appendState(b []byte, st *envelope.State) []byte {
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

func appendStringField(b []byte, sep byte, name, value string) []byte {
	b = append(b, sep, '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return envelope.AppendJSONString(b, value, false)
}

func appendIntField(b []byte, name string, value int64) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, value, 10)
}
