package ingest

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The record arithmetic the edge and config validation rely on is what the
// real broker holds to max.message.bytes: on a topic whose limit is set, a
// record counted at exactly the limit is written and one byte more is
// refused, for keys, values and headers on both sides of each length
// prefix's size; and a producer with record.ProducerBatchLimit refuses
// exactly what the broker would.
func TestRecordBytesAreWhatKafkaHolds(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := testenv.Context(t, time.Minute)
	const limit = 20_000
	topic := testenv.UniqueName("record-size")
	admin, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	limitText := strconv.Itoa(limit)
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limitText}, topic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = kadm.NewClient(admin).DeleteTopic(ctx, topic) })

	// A topic just created may be unknown to the broker's metadata for a
	// moment on a busy machine: the producers wait for it (the test's
	// context bounds them) rather than fail the first record.
	uncompressed := []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.UnknownTopicRetries(-1)}
	// The broker's own check: the producer sends batches of any size.
	toBroker, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, append(uncompressed, kgo.ProducerBatchMaxBytes(10*limit))...)
	if err != nil {
		t.Fatal(err)
	}
	defer toBroker.Close()
	// The producer's check, with the limit the edge gives it.
	limited, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, append(uncompressed, kgo.ProducerBatchMaxBytes(record.ProducerBatchLimit(limit)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer limited.Close()

	shapes := []struct {
		name    string
		key     int
		headers []record.HeaderSizes
	}{
		{"no key, no headers", 0, nil},
		{"a key of 63 bytes (one-byte prefix)", 63, nil},
		{"a key of 64 bytes (two-byte prefix)", 64, nil},
		{"ingest's headers", 5, record.InputHeaders(8, 12, 16, 13, 17)},
		{"long headers", 100, []record.HeaderSizes{{Key: 63, Value: 64}, {Key: 64, Value: 8191}}},
		{"a header value of 8192 bytes (three-byte prefix)", 10, []record.HeaderSizes{{Key: 9, Value: 8192}}},
	}
	for _, shape := range shapes {
		// The largest value that fits.
		value := limit - record.SingleRecordBatchBytes(shape.key, 0, shape.headers...)
		for record.SingleRecordBatchBytes(shape.key, value, shape.headers...) > limit {
			value--
		}
		if got := record.SingleRecordBatchBytes(shape.key, value, shape.headers...); got != limit {
			// A length prefix growing by a byte can skip the limit: the
			// value one longer is the first over it all the same.
			t.Logf("%s: the largest value, %d bytes, makes a batch of %d", shape.name, value, got)
		}
		rec := func(value int) *kgo.Record {
			r := &kgo.Record{Topic: topic, Key: bytes.Repeat([]byte("k"), shape.key), Value: bytes.Repeat([]byte("v"), value)}
			if shape.key == 0 {
				r.Key = nil
			}
			for i, h := range shape.headers {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: string(bytes.Repeat([]byte{'a' + byte(i)}, h.Key)), Value: bytes.Repeat([]byte("h"), h.Value)})
			}
			return r
		}
		for _, cl := range []struct {
			name string
			cl   *kgo.Client
		}{{"the broker", toBroker}, {"the limited producer", limited}} {
			if err := cl.cl.ProduceSync(ctx, rec(value)).FirstErr(); err != nil {
				t.Errorf("%s: a record counted at %d bytes, refused by %s: %v", shape.name, record.SingleRecordBatchBytes(shape.key, value, shape.headers...), cl.name, err)
			}
			err := cl.cl.ProduceSync(ctx, rec(value+1)).FirstErr()
			if !errors.Is(err, kerr.MessageTooLarge) {
				t.Errorf("%s: a record counted at %d bytes, over the limit of %d: %s answered %v, want MESSAGE_TOO_LARGE", shape.name,
					record.SingleRecordBatchBytes(shape.key, value+1, shape.headers...), limit, cl.name, err)
			}
		}
	}
}
