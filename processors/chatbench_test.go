package processors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The chat benchmark's shape: the larger load of the bridge's delivery
// benchmark (docs/bridge.md), 100 conversations of 20 members, each
// conversation sent 300 messages.
const (
	chatConversations = 100
	chatMembers       = 20
	chatMessages      = 30_000
)

// BenchmarkChatProcessor measures, on the broker named by
// DRIFTGUARD_TEST_KAFKA, what the chat processor (the runtime that ships,
// exactly once) costs per message: its CPU, the broker's, and the bytes it
// writes to the group table and to the state topic:
//
//	DRIFTGUARD_TEST_KAFKA=127.0.0.1:19092 DRIFTGUARD_TEST_KAFKA_PID=<pid> \
//	  go test -run='^$' -bench=ChatProcessor -benchtime=1x -count=3 ./processors/
func BenchmarkChatProcessor(b *testing.B) {
	brokers := testenv.Kafka(b)
	ctx := testenv.Context(b, 10*time.Minute)
	for range b.N {
		b.StopTimer()
		s := testenv.Shipped(b, "chat")
		s.Name = testenv.UniqueName("chatbench")
		produceChatEvents(b, ctx, brokers, s)
		selfBefore, brokerBefore := testenv.ProcessCPU(b), brokerCPU(b)
		took := decideChat(b, ctx, brokers, s)
		selfCPU, brokerUsed := testenv.ProcessCPU(b)-selfBefore, brokerCPU(b)-brokerBefore
		b.StartTimer()
		t := naming.Prefixes{}.For(s.Name)
		b.ReportMetric(chatMessages/took.Seconds(), "messages/s")
		b.ReportMetric(float64(selfCPU.Microseconds())/chatMessages, "processor-cpu-µs/message")
		if brokerUsed > 0 {
			b.ReportMetric(float64(brokerUsed.Microseconds())/chatMessages, "broker-cpu-µs/message")
		}
		b.ReportMetric(float64(topicBytes(b, ctx, brokers, t.Table))/chatMessages, "table-bytes/message")
		b.ReportMetric(float64(topicBytes(b, ctx, brokers, t.State))/chatMessages, "state-bytes/message")
	}
}

// produceChatEvents writes the members of every conversation, then the
// messages, each member in turn sending from their one device.
func produceChatEvents(b *testing.B, ctx context.Context, brokers []string, s *config.Stream) {
	cl := testenv.Topics(b, ctx, testenv.OnlyStream(b, s), brokers, kgo.ProducerLinger(5*time.Millisecond))
	defer cl.Close()
	in := naming.Prefixes{}.For(s.Name).In
	produce := func(conv int, body string) {
		cl.Produce(ctx, &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "conv-%d", conv), Value: []byte(body)}, nil)
	}
	for c := range chatConversations {
		for m := range chatMembers {
			produce(c, fmt.Sprintf(`{"event_id":"add-%d-%d","type":"member.added","conversation_id":"conv-%d","user_id":"user-%d-%d"}`, c, m, c, c, m))
		}
	}
	for i := range chatMessages {
		c, m := i%chatConversations, (i/chatConversations)%chatMembers
		produce(c, fmt.Sprintf(`{"event_id":"msg-%d","type":"message.send","conversation_id":"conv-%d","sender_id":"user-%d-%d","sender_device_id":"phone","client_message_id":"0b6f3c2e-%012d","body":"message %d of the benchmark","client_sent_at":"2026-12-02T10:00:00Z"}`,
			i, c, c, m, i, i))
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// decideChat runs the runtime until it has decided every member and
// message event, timed from the first decision.
func decideChat(b *testing.B, ctx context.Context, brokers []string, s *config.Stream) time.Duration {
	metrics := NewMetrics(prometheus.NewRegistry())
	rt, err := NewRuntime(kafka.Conn{Brokers: brokers}, s, Options{Metrics: metrics, Logger: testenv.Logger(b)}, RuntimeOptions{
		TransactionalID: naming.Prefixes{}.TransactionalID("bench", s.Name), Storage: tableStorageBuilder(b.TempDir()),
	})
	if err != nil {
		b.Fatal(err)
	}
	return untilDecided(b, ctx, s, metrics, chatConversations*chatMembers+chatMessages, rt.Run)
}

// topicBytes is the size of every committed record's key and value in
// topic, read from its start.
func topicBytes(b *testing.B, ctx context.Context, brokers []string, topic string) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var n int64
	for _, r := range readTopic(b, ctx, cl, topic, true) {
		n += int64(len(r.Key) + len(r.Value))
	}
	return n
}

// oneKeyTransaction is the context of one input decided alone in its
// transaction, as each message of a conversation is when its
// conversation sends less often than the commit interval: the table value
// is encoded after the decision, in its parts, as the runtime does once
// per transaction and key, and before it either kept decoded (the
// runtime's value cache) or, with decodeEach, decoded from what is stored
// (a key the cache does not hold). Emitted records are counted by size
// and dropped.
type oneKeyTransaction struct {
	key        string
	decodeEach bool
	stored     partedStore
	// written is the bytes of the table records the last decision wrote.
	written int
	value   any
	headers goka.Headers
	emitted int
	// outcome is the last outcome record emitted.
	outcome []byte
	failed  error
}

func (c *oneKeyTransaction) Key() string                             { return c.key }
func (c *oneKeyTransaction) Value() any                              { return c.value }
func (c *oneKeyTransaction) SetValue(v any, _ ...goka.ContextOption) { c.value = v }
func (c *oneKeyTransaction) Emit(topic goka.Stream, _ string, v any, _ ...goka.ContextOption) {
	c.emitted += len(v.([]byte))
	if strings.HasSuffix(string(topic), ".outcomes") {
		c.outcome = v.([]byte)
	}
}
func (c *oneKeyTransaction) Partition() int32      { return 0 }
func (c *oneKeyTransaction) Offset() int64         { return 0 }
func (c *oneKeyTransaction) Headers() goka.Headers { return c.headers }
func (c *oneKeyTransaction) Timestamp() time.Time  { return time.UnixMilli(1_800_000_000_000) }
func (c *oneKeyTransaction) Fail(err error)        { c.failed = err }

// decide decides body in its own transaction.
func (c *oneKeyTransaction) decide(b testing.TB, h *handler, body []byte) {
	if c.stored == nil {
		c.stored = partedStore{}
	} else if c.decodeEach {
		c.value = c.stored.read(b, c.key)
	}
	h.process(c, body)
	if c.failed != nil {
		b.Fatal(c.failed)
	}
	ps, err := entityCodec{}.EncodeParts(c.value)
	if err != nil {
		b.Fatal(err)
	}
	c.written = c.stored.write(c.key, ps)
	entityCodec{}.Stored(c.value)
}

// BenchmarkChatMessageAlone measures the processor's CPU for one chat
// message decided alone in its transaction (the steady state of a
// conversation sending less often than the commit interval), in a
// conversation of 20 members whose idempotency memory holds `sent` client
// keys (limits.idempotency_keys, 2,000 by default, is the bound). It
// reports the bytes of the table records (the value and the part of the
// memory its send joined) and of the emitted records (state and outcome),
// which every such message writes.
func BenchmarkChatMessageAlone(b *testing.B) {
	for _, sent := range []int{300, 2000} {
		for _, cached := range []bool{true, false} {
			b.Run(fmt.Sprintf("sent=%d/cached=%t", sent, cached), func(b *testing.B) {
				// A memory that holds exactly `sent` client keys all along.
				s := testenv.Shipped(b, "chat")
				s.Limits.IdempotencyKeys = sent
				h := newHandler(s, Options{Logger: testenv.Logger(b)})
				c := &oneKeyTransaction{key: "conv-1", headers: goka.Headers{}, decodeEach: !cached}
				for m := range chatMembers {
					c.decide(b, h, fmt.Appendf(nil, `{"event_id":"add-%d","type":"member.added","conversation_id":"conv-1","user_id":"user-%d"}`, m, m))
				}
				message := func(i int) []byte {
					return fmt.Appendf(nil, `{"event_id":"msg-%d","type":"message.send","conversation_id":"conv-1","sender_id":"user-%d","sender_device_id":"phone","client_message_id":"0b6f3c2e-%012d","body":"message %d of the benchmark","client_sent_at":"2026-12-02T10:00:00Z"}`,
						i, i%chatMembers, i, i)
				}
				for i := range sent {
					c.decide(b, h, message(i))
				}
				c.emitted = 0
				written := 0
				b.ResetTimer()
				cpu := testenv.ProcessCPU(b)
				for i := range b.N {
					c.decide(b, h, message(sent+i))
					written += c.written
				}
				b.StopTimer()
				// CPU time rather than the wall time of ns/op: the machine
				// is shared.
				b.ReportMetric(float64((testenv.ProcessCPU(b)-cpu).Nanoseconds())/1000/float64(b.N), "cpu-µs/message")
				b.ReportMetric(float64(written)/float64(b.N), "table-bytes/message")
				b.ReportMetric(float64(c.emitted)/float64(b.N), "emitted-bytes/message")
			})
		}
	}
}
