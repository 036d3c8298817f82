package record

// How big a `<stream>.in` record is on the wire, so that ingest refuses a
// body Kafka would refuse (413, once) instead of producing it (a 503 its
// publisher would retry forever), and config validation refuses a body
// limit no record could carry.

// DefaultMaxMessageBytes is Kafka's default message.max.bytes (1 MiB plus
// the 12 bytes of a log entry's offset and length): the largest record
// batch a broker appends to a topic that does not set max.message.bytes
// of its own, as no topic driftguard creates does.
const DefaultMaxMessageBytes = 1<<20 + 12

// BatchOverheadBytes is what a record batch (magic 2) takes besides its
// records: base offset, length, leader epoch, magic, CRC, attributes, last
// offset delta, first and max timestamps, producer id and epoch, base
// sequence and record count. The broker holds a batch's size, records and
// these, to max.message.bytes.
const BatchOverheadBytes = 8 + 4 + 4 + 1 + 4 + 2 + 4 + 8 + 8 + 8 + 2 + 4 + 4

// ProducerBatchLimit is the franz-go ProducerBatchMaxBytes that lets the
// producer send exactly the batches a topic of maxMessageBytes accepts:
// franz-go counts the 4-byte length prefix of a batch in a produce request
// as part of the batch, the broker does not.
func ProducerBatchLimit(maxMessageBytes int) int32 { return int32(maxMessageBytes + 4) }

// HeaderSizes are the lengths of one record header's key and value.
type HeaderSizes struct{ Key, Value int }

// SingleRecordBatchBytes is the size the broker holds to max.message.bytes
// of a batch of one record with a key, a value and headers of the given
// lengths, uncompressed (franz-go sends a compressed batch only when it is
// smaller). The record's timestamp and offset deltas are 0, one byte each.
func SingleRecordBatchBytes(key, value int, headers ...HeaderSizes) int {
	body := 1 + // attributes
		1 + // timestamp delta
		1 + // offset delta
		varintBytes(key) + key +
		varintBytes(value) + value +
		varintBytes(len(headers))
	for _, h := range headers {
		body += varintBytes(h.Key) + h.Key + varintBytes(h.Value) + h.Value
	}
	return BatchOverheadBytes + varintBytes(body) + body
}

// varintBytes is the length of n, not negative, as Kafka's zigzag varint.
func varintBytes(n int) int {
	zz := uint64(n) << 1
	size := 1
	for zz >= 0x80 {
		zz >>= 7
		size++
	}
	return size
}

// InputHeaders are the sizes of the headers ingest sets on a `<stream>.in`
// record (design §3): the stream's name, the event id, the type, the
// received-at time in unix milliseconds and the scheme.
func InputHeaders(stream, eventID, eventType, receivedAtMs, scheme int) []HeaderSizes {
	return []HeaderSizes{
		{Key: len(HeaderStream), Value: stream},
		{Key: len(HeaderEventID), Value: eventID},
		{Key: len(HeaderType), Value: eventType},
		{Key: len(HeaderReceivedAt), Value: receivedAtMs},
		{Key: len(HeaderScheme), Value: scheme},
	}
}

// ReceivedAtDigits is the most digits a dg-received-at value has until the
// year 2286 (unix milliseconds under 10^13).
const ReceivedAtDigits = 13

// IdentityAllowanceBytes is the room config validation leaves in a
// `<stream>.in` record beside a body at the stream's limit for the entity
// key, the event id and the type, which are copies of body fields (or of a
// delivery header) and so of any length. Ids and keys are tens of bytes;
// an event whose record would still not fit is refused by the edge with
// 413, counted exactly (InputRecordBytes).
const IdentityAllowanceBytes = 4 << 10

// InputRecordBytes is the batch size of a `<stream>.in` record of a body
// with its key, event id and type, for stream and scheme names of the
// given lengths.
func InputRecordBytes(streamName, scheme, key, eventID, eventType, body int) int {
	return SingleRecordBatchBytes(key, body, InputHeaders(streamName, eventID, eventType, ReceivedAtDigits, scheme)...)
}

// MaxInputBody is the largest body a `<stream>.in` record can carry within
// maxMessageBytes when its key, event id and type take
// IdentityAllowanceBytes together.
func MaxInputBody(streamName, scheme, maxMessageBytes int) int {
	// Split so that each of the three has a two-byte length prefix, the
	// longest a field under 8 KiB has: no split of the allowance takes
	// more room.
	const id, typ = 64, 64
	const key = IdentityAllowanceBytes - id - typ
	fits := func(body int) bool {
		return InputRecordBytes(streamName, scheme, key, id, typ, body) <= maxMessageBytes
	}
	// The value's own length prefix grows with it: step down from the
	// estimate without it, a few bytes at most.
	body := maxMessageBytes - InputRecordBytes(streamName, scheme, key, id, typ, 0)
	for body > 0 && !fits(body) {
		body--
	}
	return max(body, 0)
}
