package kafka

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/record"
)

// Input is one `<stream>.in` record as driftguard's edges write it (design
// §3): keyed by the entity, the body byte for byte as its value, and the
// headers dg-stream, dg-event-id, dg-type, dg-received-at and dg-scheme.
// The ingest edge and the bridge both build theirs here, so the processors
// read one shape whoever accepted the event. The record, its headers and
// its per-event header bytes are allocated together: one allocation per
// event instead of one for each. It is not reused, because a producer may
// keep the records it is given.
type Input struct {
	Record  kgo.Record
	headers [5]kgo.RecordHeader
	// room holds the key, event id, type and received-at bytes when they
	// fit, as they do for ids of typical length.
	room [96]byte
}

// InputFields are what the record of an event says of it besides its
// body: its entity key, event id and type (as envelope.Fields holds them).
type InputFields struct{ Key, EventID, Type string }

// NewInput builds the record of event f with body for topic; stream and
// scheme are the dg-stream and dg-scheme header values, which a writer
// shares between all its records of a stream (nothing writes to them).
func NewInput(topic string, stream, scheme []byte, body []byte, f InputFields, receivedAt time.Time) *Input {
	o := &Input{}
	buf := o.room[:0]
	if n := len(f.Key) + len(f.EventID) + len(f.Type) + 20; n > len(o.room) {
		buf = make([]byte, 0, n)
	}
	buf = append(buf, f.Key...)
	buf = append(buf, f.EventID...)
	buf = append(buf, f.Type...)
	buf = strconv.AppendInt(buf, receivedAt.UnixMilli(), 10)
	key, rest := buf[:len(f.Key):len(f.Key)], buf[len(f.Key):]
	eventID, rest := rest[:len(f.EventID):len(f.EventID)], rest[len(f.EventID):]
	eventType, receivedAtMs := rest[:len(f.Type):len(f.Type)], rest[len(f.Type):]
	o.headers = [5]kgo.RecordHeader{
		{Key: record.HeaderStream, Value: stream},
		{Key: record.HeaderEventID, Value: eventID},
		{Key: record.HeaderType, Value: eventType},
		{Key: record.HeaderReceivedAt, Value: receivedAtMs},
		{Key: record.HeaderScheme, Value: scheme},
	}
	o.Record = kgo.Record{Topic: topic, Key: key, Value: body, Headers: o.headers[:]}
	return o
}

// Header is the value of the record's header key, nil when it has none.
func Header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}
