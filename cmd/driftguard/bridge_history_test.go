package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// A device offline across a bridge SIGKILL and more than
// bridge.chat_window messages catches up every message of its intervals,
// in order, once, on the real broker: the processor decides a
// conversation's events; carol joins after message 40, her phone reads up
// to message 60 and goes offline; 60 more messages come, the bridge
// (chat_window 20) is killed, carol is removed after message 120 and added
// again after 130, 30 more come while the bridge is down; a new bridge
// starts, and the phone, paging from 60, gets 61 to 120 and 131 to 150,
// nothing else, none twice, never limited (a new device of hers, from 0,
// gets 41 to 120 and 131 to 150).
func TestBridgeChatHistoryThroughASIGKILL(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	brokers := testenv.Kafka(t)
	stream := testenv.UniqueName("chat")
	configFile, cfg := writeCatalogueCopies(t, t.TempDir(), map[string]string{"chat": stream}, func(string, *config.Stream) {},
		map[string]any{"bridge": map[string]any{"chat_window": 20}})
	cfg.Kafka.Brokers = brokers
	// The bridge serves the shipped streams too: their topics must exist.
	all, err := config.Load(configFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := testenv.Topics(t, ctx, all, brokers)
	defer cl.Close()
	runServices(t, ctx, "processor", processors.NewService(processors.ServiceOptions{Config: cfg, Brokers: brokers, Logger: testenv.Logger(t), InMemoryTables: true}))

	const conv = "room"
	events := 0
	event := func(in *crashInput) {
		t.Helper()
		events++
		in.eventID = fmt.Sprintf("history-%d", events)
		if err := cl.ProduceSync(ctx, inputRecord(stream, conv, chatBody(in, conv))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	sent := 0
	send := func(n int) {
		for range n {
			sent++
			event(&crashInput{chatType: "message.send", user: "alice", message: fmt.Sprintf("alice-phone/c%d", sent)})
		}
	}
	member := func(typ, user string) { event(&crashInput{chatType: typ, user: user}) }

	const secret = "bridge-history-test-secret-0123456789abcdef"
	bin := buildDriftguard(t)
	addr := freeLoopbackAddr(t)
	bridge := startBridgeProcess(t, ctx, bin, configFile, brokers, addr, secret)
	tok, err := realtime.Sign([]byte(secret), "carol", []string{stream}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	phone := newBridgeReader(ctx, "http://"+addr, tok)
	// catchUp pages carol's messages from after until the conversation's
	// last sequence, as her phone does, once the bridge shows it at last.
	catchUp := func(after, last int64) []int64 {
		t.Helper()
		testenv.WaitFor(t, ctx, fmt.Sprintf("the bridge at message %d", last), func() bool {
			var e bridgeEntity
			var st struct {
				LastSeq int64 `json:"last_seq"`
			}
			return phone.getJSON(ctx, "/v1/streams/"+stream+"/entities/"+conv, &e) == nil && json.Unmarshal(e.State, &st) == nil && st.LastSeq == last
		})
		var seqs []int64
		for after < last {
			var page messagesPage
			path := fmt.Sprintf("/v1/streams/%s/entities/%s/messages?after_seq=%d&limit=25", stream, conv, after)
			if err := phone.getJSON(ctx, path, &page); err != nil {
				t.Fatal(err)
			}
			if page.Limited || page.NextAfterSeq < after {
				t.Fatalf("%s: limited %v, next_after_seq %d", path, page.Limited, page.NextAfterSeq)
			}
			if page.NextAfterSeq == after {
				// The bridge's outcomes are behind its states for more
				// than the 2 s a request waits: ask again.
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for _, m := range page.Messages {
				if m.ID != fmt.Sprintf("%s:%d", conv, m.Seq) {
					t.Fatalf("%s: message %d has id %s", path, m.Seq, m.ID)
				}
				seqs = append(seqs, m.Seq)
			}
			after = page.NextAfterSeq
		}
		return seqs
	}

	member("member.added", "alice")
	member("member.added", "bob")
	send(40)
	member("member.added", "carol")
	send(20)
	if got := catchUp(0, 60); !slices.Equal(got, testenv.Seqs(41, 60)) {
		t.Fatalf("carol's phone online: %v, want 41 to 60", got)
	}

	// The phone goes offline at 60.
	send(60)
	sigkill(t, bridge)
	member("member.removed", "carol")
	send(10)
	member("member.added", "carol")
	send(20)
	startBridgeProcess(t, ctx, bin, configFile, brokers, addr, secret)
	if got, want := catchUp(60, 150), append(testenv.Seqs(61, 120), testenv.Seqs(131, 150)...); !slices.Equal(got, want) {
		t.Fatalf("carol's phone after the crash: %v, want %v", got, want)
	}
	// A new device of hers reads all her intervals.
	if got, want := catchUp(0, 150), append(testenv.Seqs(41, 120), testenv.Seqs(131, 150)...); !slices.Equal(got, want) {
		t.Fatalf("carol's new device: %v, want %v", got, want)
	}
}
