package kafka_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/testenv"
)

// kafka.compression reaches the broker: a compressible batch produced
// with each codec is stored with it (the batch's attributes, as the
// broker hands it back), and none stores it plain.
func TestCompressionAsConfigured(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := testenv.Context(t, 60*time.Second)
	want := map[string]kgo.CompressionCodecType{
		config.CompressionNone: kgo.CodecNone, config.CompressionSnappy: kgo.CodecSnappy,
		config.CompressionLZ4: kgo.CodecLz4, config.CompressionZstd: kgo.CodecZstd, config.CompressionGzip: kgo.CodecGzip,
	}
	for _, codec := range config.Compressions {
		cfg, err := config.Default()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Kafka.Compression = codec
		conn, err := kafka.Connect(cfg, brokers)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		cl, err := kafka.NewClient(conn, append(kafka.ClientMetrics(reg, "ingest"), kgo.ProducerLinger(50*time.Millisecond))...)
		if err != nil {
			t.Fatal(err)
		}
		topic := testenv.UniqueName("compression-" + codec)
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		value := bytes.Repeat([]byte(`{"type":"presence.updated","status":"online"}`), 20)
		var recs []*kgo.Record
		for i := range 20 {
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: value})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// The client reports a batch once its response is handled, which
		// may be just after ProduceSync returns.
		sent, raw := producedBytes(t, reg)
		for wait := time.Now().Add(10 * time.Second); raw == 0 && time.Now().Before(wait); sent, raw = producedBytes(t, reg) {
			time.Sleep(10 * time.Millisecond)
		}
		if raw < float64(len(recs)*len(value)) || (codec == config.CompressionNone) != (sent >= raw) {
			t.Errorf("kafka.compression %s: the client reports %.0f bytes produced, %.0f before compression", codec, sent, raw)
		}
		cl.Close()
		read := testenv.ReadTopic(t, brokers, topic)
		if len(read) != len(recs) {
			t.Fatalf("kafka.compression %s: %d records read back, want %d", codec, len(read), len(recs))
		}
		got := read[0]
		if c := kgo.CompressionCodecType(got.Attrs.CompressionType()); c != want[codec] {
			t.Errorf("kafka.compression %s: the broker stored the batch with codec %d, want %d", codec, c, want[codec])
		}
		if !bytes.Equal(got.Value, value) {
			t.Errorf("kafka.compression %s: the record came back changed", codec)
		}
	}
}

// producedBytes is what the client's metrics say it produced, as sent and
// before compression.
func producedBytes(t *testing.T, reg *prometheus.Registry) (sent, raw float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "driftguard_kafka_produce_compressed_bytes_total":
				sent += m.GetCounter().GetValue()
			case "driftguard_kafka_produce_bytes_total":
				raw += m.GetCounter().GetValue()
			}
		}
	}
	return sent, raw
}

// A component builds its clients from one Conn at once (the processors'
// runtime and its view marks): building them must share nothing that
// franz-go changes (it dedupes the codecs in place), which -race checks.
func TestClientsOfOneConnBuiltAtOnce(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kafka.Compression = config.CompressionLZ4
	conn, err := kafka.Connect(cfg, []string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			cl, err := kafka.NewClient(conn)
			if err != nil {
				t.Error(err)
				return
			}
			cl.Close()
		})
	}
	wg.Wait()
}
