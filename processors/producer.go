package processors

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
)

// producer is goka's Producer on franz-go: every table write, outcome and
// state record goes through it. sarama's idempotent producer allows one
// request in flight per broker and hops each record through several
// goroutines; franz-go keeps up to five idempotent requests in flight and
// batches per partition, which is most of the processor's throughput (see
// docs/processors.md, "Throughput"). It keeps acks=all and idempotence
// (internal/kafka.NewClient) and Kafka's murmur2 key placement, the same as
// partition.GokaHasher gives goka's consumers, so a table record lands on the
// partition its processor owns.
type producer struct {
	cl *kgo.Client
}

// Producer settings, measured with BenchmarkProcessorAgainstRawConsumer.
const (
	producerBufferedRecords = 100_000
	producerBufferedBytes   = 16 << 20
	producerLinger          = 10 * time.Millisecond
	// producerCloseTimeout bounds how long Close waits for buffered records.
	producerCloseTimeout = 60 * time.Second
)

func newProducer(brokers []string, clientID string) (goka.Producer, error) {
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.ClientID(clientID),
		// Three records per event wait for acks=all: a deep buffer keeps
		// the processor deciding while the broker catches up, bounded in
		// bytes so memory stays bounded whatever the record sizes.
		kgo.MaxBufferedRecords(producerBufferedRecords), kgo.MaxBufferedBytes(producerBufferedBytes),
		// Fuller batches cost the broker less per record.
		kgo.ProducerLinger(producerLinger))
	if err != nil {
		return nil, err
	}
	return &producer{cl: cl}, nil
}

func (p *producer) Emit(topic, key string, value []byte) *goka.Promise {
	return p.EmitWithHeaders(topic, key, value, nil)
}

// EmitWithHeaders produces asynchronously; the promise resolves with the
// record's partition and offset (goka stores the table offset from it) once
// every in-sync replica has the record, or with the error.
func (p *producer) EmitWithHeaders(topic, key string, value []byte, headers goka.Headers) *goka.Promise {
	promise, finish := goka.NewPromiseWithFinisher()
	rec := &kgo.Record{Topic: topic, Key: []byte(key), Value: value}
	if len(headers) > 0 {
		for _, k := range slices.Sorted(maps.Keys(headers)) {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: headers[k]})
		}
	}
	p.cl.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
		if err != nil {
			finish(nil, err)
			return
		}
		finish(&sarama.ProducerMessage{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}, nil)
	})
	return promise
}

// Close waits for what is buffered, then closes the client.
func (p *producer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), producerCloseTimeout)
	defer cancel()
	err := p.cl.Flush(ctx)
	p.cl.Close()
	return err
}
