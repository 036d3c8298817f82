package realtime_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The per-conversation fan-out's size, given after the package:
//
//	go test -run '^$' -bench FanOutPerConversation -benchtime 3x ./sinks/realtime/ -conv.count=100 -conv.members=20
var (
	convCount   = flag.Int("conv.count", 100, "conversations of BenchmarkFanOutPerConversation")
	convMembers = flag.Int("conv.members", 20, "members of each conversation, each following it with a connection of its own")
	convRecords = flag.Int("conv.records", 2000, "state records each round of BenchmarkFanOutPerConversation writes, spread evenly over the conversations")
)

// BenchmarkFanOutPerConversation is BenchmarkFanOut for chat clients: each
// member of each conversation follows its conversation alone
// (`events?key=`), with a token of its own, so a change concerns only the
// members of one conversation out of -conv.count. Each round writes
// -conv.records conversation states through Kafka, one conversation after
// the other, and waits until every member holds every state of its
// conversation; then a minimal keyed broadcaster (each client waits for
// its key's frames only) does the same with frames of the same size. CPU
// per delivery counts this whole process (clients and broker included);
// the baseline's says how much of it is the clients' and the loopback's.
//
//	go test -run='^$' -bench=FanOutPerConversation -benchtime=3x ./sinks/realtime/
func BenchmarkFanOutPerConversation(b *testing.B) {
	convs, members, records := *convCount, *convMembers, *convRecords
	records -= records % convs // every conversation changes as often
	clients := convs * members
	raiseOpenFiles(b, 2*2*clients+256)
	brokers, stream := chatBrokers(b)
	e := newBridgeEnv(b, brokers, func(cfg *config.Config) {
		s := cfg.Streams["chat"]
		s.Name = stream
		cfg.Streams = map[string]*config.Stream{stream: s}
		cfg.Bridge.Window = 10_000
	}, "chat")
	conv := func(k int) string { return fmt.Sprintf("conv-%d", k) }
	user := func(k, m int) string { return fmt.Sprintf("user-%d-%d", k, m) }
	membersOf := make([][]string, convs)
	for k := range convs {
		for m := range members {
			membersOf[k] = append(membersOf[k], user(k, m))
		}
		e.publishAsync(stream, conv(k), 1, conversationState(0, membersOf[k]))
	}
	if err := e.cl.Flush(e.ctx); err != nil {
		b.Fatal(err)
	}
	admin := e.token("admin", stream)
	testenv.WaitFor(b, e.ctx, "every conversation at the bridge", func() bool {
		// A token of the last member of the last conversation sees it.
		var ent entityJSON
		return e.get(fmt.Sprintf("/v1/streams/%s/entities/%s", stream, conv(convs-1)), e.token(user(convs-1, members-1), stream), &ent) == http.StatusOK
	})
	cursor, _ := e.snapshot(stream, admin, 1000)
	tokens := make([]string, clients)
	for i := range clients {
		tokens[i] = e.token(user(i/members, i%members), stream)
	}
	bridgeClients := connectEachSSE(b, e.ctx, func(i int) (string, string) {
		return fmt.Sprintf("%s/v1/streams/%s/events?cursor=%s&key=%s", e.url, stream, cursor, conv(i/members)), tokens[i]
	}, clients, 0)

	kb := &keyedBroadcaster{keys: map[string]*broadcaster{}}
	for k := range convs {
		kb.keys[conv(k)] = newBroadcaster()
	}
	srv := httptest.NewServer(kb)
	b.Cleanup(srv.Close)
	baselineClients := connectEachSSE(b, e.ctx, func(i int) (string, string) {
		return srv.URL + "/?key=" + url.QueryEscape(conv(i/members)), ""
	}, clients, 0)
	testenv.WaitFor(b, e.ctx, "every baseline client listening", func() bool { return kb.listening() >= int64(clients) })

	var bridge, baseline fanoutSide
	perClient := records / convs
	b.ReportAllocs()
	b.ResetTimer()
	for round := range b.N {
		bridge.round(b, bridgeClients, perClient, func() {
			for i := range records {
				k, seq := i%convs, int64(round*perClient+i/convs+1)
				e.publishAsync(stream, conv(k), seq+1, conversationState(seq, membersOf[k]))
			}
		})
		baseline.round(b, baselineClients, perClient, func() {
			for i := range records {
				k, seq := i%convs, int64(round*perClient+i/convs+1)
				kb.keys[conv(k)].broadcast(fmt.Appendf(nil, "id: %s\nevent: state\ndata: %s\n\n", cursor,
					conversationFrame(conv(k), seq+1, conversationState(seq, membersOf[k]))))
			}
		})
		b.SetBytes((bridge.bytes + baseline.bytes) / int64(round+1))
	}
	b.StopTimer()
	b.ReportMetric(bridge.rate(), "bridge-deliveries/s")
	b.ReportMetric(baseline.rate(), "baseline-deliveries/s")
	b.ReportMetric(bridge.cpuPerDelivery(), "bridge-cpu-µs/delivery")
	b.ReportMetric(baseline.cpuPerDelivery(), "baseline-cpu-µs/delivery")
	b.ReportMetric(bridge.cpuPerDelivery()-baseline.cpuPerDelivery(), "bridge-over-baseline-µs/delivery")
	b.ReportMetric(float64(bridge.bytes)/float64(bridge.deliveries), "bridge-B/frame")
}

// chatBrokers is benchBrokers for the chat stream.
func chatBrokers(b *testing.B) (brokers []string, stream string) {
	brokers, stream = benchBrokers(b)
	return brokers, strings.Replace(stream, "presence", "chat", 1)
}

// conversationState is a conversation's public state as the processor
// writes it after message seq: its members, each a member from the start,
// a read cursor and the last message.
func conversationState(seq int64, members []string) string {
	membership := map[string][]map[string]int64{}
	cursors := map[string]map[string]int64{}
	for _, m := range members {
		membership[m] = []map[string]int64{{"from": 1}}
		cursors[m] = map[string]int64{"read": max(seq-1, 0), "delivered": seq}
	}
	doc := map[string]any{"last_seq": seq, "members": members, "membership": membership, "cursors": cursors}
	if seq > 0 {
		doc["last_message"] = map[string]any{"conversation_seq": seq, "message_id": fmt.Sprintf("m-%d", seq),
			"sender_id": members[int(seq)%len(members)], "body": "a message of about the length people type, forty to eighty bytes"}
	}
	s, _ := json.Marshal(doc)
	return string(s)
}

// conversationFrame is the Entity the bridge sends for a state.
func conversationFrame(key string, version int64, state string) []byte {
	data, _ := json.Marshal(entityJSON{Key: key, Version: version, State: json.RawMessage(state), UpdatedAtMs: version})
	return data
}

// keyedBroadcaster is the per-conversation baseline: a broadcaster per
// key, each client reading the one its `?key=` names.
type keyedBroadcaster struct {
	mu   sync.Mutex
	keys map[string]*broadcaster
}

func (kb *keyedBroadcaster) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kb.mu.Lock()
	bc := kb.keys[r.URL.Query().Get("key")]
	kb.mu.Unlock()
	if bc == nil {
		http.NotFound(w, r)
		return
	}
	bc.ServeHTTP(w, r)
}

func (kb *keyedBroadcaster) listening() int64 {
	kb.mu.Lock()
	defer kb.mu.Unlock()
	var n int64
	for _, bc := range kb.keys {
		n += bc.listening.Load()
	}
	return n
}
