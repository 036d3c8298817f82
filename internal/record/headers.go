package record

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SchemeBridge is the dg-scheme of the records the realtime bridge
// produces for its clients: they were authenticated by a client's token,
// not by a webhook signature.
const SchemeBridge = "bridge"

// Headers are the headers of an event's record, as ingest sets them on
// every record it produces: a producer other than the edge (the bridge)
// writes the same, so readers tell nothing apart but the scheme.
func Headers(stream, eventID, eventType, scheme string, receivedAt time.Time) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderStream, Value: []byte(stream)},
		{Key: HeaderEventID, Value: []byte(eventID)},
		{Key: HeaderType, Value: []byte(eventType)},
		{Key: HeaderReceivedAt, Value: strconv.AppendInt(nil, receivedAt.UnixMilli(), 10)},
		{Key: HeaderScheme, Value: []byte(scheme)},
	}
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
