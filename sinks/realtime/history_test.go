package realtime_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// caughtUp is what one client reads paging a conversation's messages from
// after_seq on: the sequences in the order served, and the after_seq of
// each page that answered limited.
type caughtUp struct {
	seqs         []int64
	limitedAfter []int64
}

// catchUp pages conversation conv's messages from after with pages of
// limit until next_after_seq reaches last.
func (e *bridgeEnv) catchUp(conv, tok string, after, limit, last int64) caughtUp {
	e.t.Helper()
	var got caughtUp
	for pages := 0; after < last; pages++ {
		if pages > 100 {
			e.t.Fatalf("paging %s: still at %d after %d pages", conv, after, pages)
		}
		var page messagesPage
		path := fmt.Sprintf("/v1/streams/chat/entities/%s/messages?after_seq=%d&limit=%d", conv, after, limit)
		if status := e.get(path, tok, &page); status != http.StatusOK {
			e.t.Fatalf("%s: %d", path, status)
		}
		if page.NextAfterSeq < after {
			e.t.Fatalf("%s: next_after_seq %d is below after_seq", path, page.NextAfterSeq)
		}
		if page.Limited {
			got.limitedAfter = append(got.limitedAfter, after)
		}
		for _, m := range page.Messages {
			if m.MessageID != fmt.Sprintf("%s:%d", conv, m.Seq) || m.Body != fmt.Sprintf("message %d", m.Seq) {
				e.t.Errorf("%s: message %+v", path, m)
			}
		}
		got.seqs = append(got.seqs, page.seqs()...)
		after = page.NextAfterSeq
	}
	return got
}

// receipts writes n outcome records of applied read receipts of seq in
// conversation conv, as the processor does.
func (e *bridgeEnv) receipts(conv string, seq int64, n int) {
	e.t.Helper()
	for i := 0; i < n; i += 100 { // batches of 100, as a processor's transactions write them
		var recs []*kgo.Record
		for j := i; j < min(i+100, n); j++ {
			o := record.Outcome{Stream: "chat", Key: conv, EventID: fmt.Sprintf("r%d-%d-%016x", seq, j, rand.Uint64()), EventType: "receipt.read", Version: seq, Outcome: record.Applied}
			recs = append(recs, &kgo.Record{Topic: naming.Prefixes{}.For("chat").Outcomes, Key: []byte(conv), Value: record.AppendOutcome(nil, &o)})
		}
		if err := e.cl.ProduceSync(e.ctx, recs...).FirstErr(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// A client further behind than bridge.chat_window gets every message of
// its intervals from the outcomes, in order, each once, never limited;
// once retention has deleted the first outcomes (DeleteRecords moves the
// log start), limited is true exactly for a client that may read one of
// them, on the page that passes them, whether the bridge read them before
// they went or starts after.
func TestChatHistoryBeyondTheWindow(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) { c.Bridge.ChatWindow = 5 }, "chat")
	const last = 20
	topic := naming.Prefixes{}.For("chat").Outcomes
	adm := kadm.NewClient(e.cl)
	var deleteBelow kadm.ListedOffsets // the outcomes' ends before message 8
	for seq := int64(1); seq <= last; seq++ {
		if seq == 8 {
			var err error
			if deleteBelow, err = adm.ListEndOffsets(e.ctx, topic); err != nil {
				t.Fatal(err)
			}
		}
		e.sent("room", seq, "alice", fmt.Sprintf("message %d", seq))
		if seq == 10 {
			// Between two sends, more records than a fetch brings and one
			// range reads through: the reader seeks.
			e.receipts("room", 10, 5000)
		}
		if seq%4 == 0 {
			// Repeated after a processor restart, some long after.
			e.sent("room", seq/2, "alice", fmt.Sprintf("message %d", seq/2))
		}
	}
	// bob was a member from the start, carol joined after message 11,
	// dave was one for messages 3 to 6.
	e.publish("chat", "room", 1, fmt.Sprintf(`{"last_seq":%d,"members":["alice","bob","carol"],`+
		`"membership":{"alice":[{"from":1}],"bob":[{"from":1}],"carol":[{"from":12}],"dave":[{"from":3,"to":6}]}}`, last))
	bob, carol, dave := e.token("bob", "chat"), e.token("carol", "chat"), e.token("dave", "chat")
	testenv.WaitFor(t, e.ctx, "the membership read", func() bool { return e.get("/v1/streams/chat/entities/room", bob, nil) == http.StatusOK })

	for _, limit := range []int64{3, 100} {
		if got := e.catchUp("room", bob, 0, limit, last); !slices.Equal(got.seqs, testenv.Seqs(1, last)) || got.limitedAfter != nil {
			t.Fatalf("bob, pages of %d: %v, limited after %v", limit, got.seqs, got.limitedAfter)
		}
	}
	if got := e.catchUp("room", carol, 0, 3, last); !slices.Equal(got.seqs, testenv.Seqs(12, last)) || got.limitedAfter != nil {
		t.Fatalf("carol: %v, limited after %v", got.seqs, got.limitedAfter)
	}
	if got := e.catchUp("room", dave, 0, 2, 6); !slices.Equal(got.seqs, testenv.Seqs(3, 6)) || got.limitedAfter != nil {
		t.Fatalf("dave: %v, limited after %v", got.seqs, got.limitedAfter)
	}

	// Retention deletes messages 1 to 7.
	deletions, err := adm.DeleteRecords(e.ctx, deleteBelow.Offsets())
	if err != nil || deletions.Error() != nil {
		t.Fatalf("deleting records: %v %v", err, deletions.Error())
	}
	check := func(when string) {
		t.Helper()
		// bob and dave may read some of 1 to 7: their first page says so.
		if got := e.catchUp("room", bob, 0, 3, last); !slices.Equal(got.seqs, testenv.Seqs(8, last)) || !slices.Equal(got.limitedAfter, []int64{0}) {
			t.Errorf("%s: bob from 0: %v, limited after %v", when, got.seqs, got.limitedAfter)
		}
		if got := e.catchUp("room", bob, 5, 3, last); !slices.Equal(got.seqs, testenv.Seqs(8, last)) || !slices.Equal(got.limitedAfter, []int64{5}) {
			t.Errorf("%s: bob from 5: %v, limited after %v", when, got.seqs, got.limitedAfter)
		}
		if got := e.catchUp("room", bob, 7, 3, last); !slices.Equal(got.seqs, testenv.Seqs(8, last)) || got.limitedAfter != nil {
			t.Errorf("%s: bob from 7: %v, limited after %v", when, got.seqs, got.limitedAfter)
		}
		var page messagesPage
		if e.get("/v1/streams/chat/entities/room/messages?after_seq=0", dave, &page) != http.StatusOK || len(page.Messages) != 0 || !page.Limited {
			t.Errorf("%s: dave: %+v", when, page)
		}
		// carol joined after them: nothing she may read is gone.
		if got := e.catchUp("room", carol, 0, 3, last); !slices.Equal(got.seqs, testenv.Seqs(12, last)) || got.limitedAfter != nil {
			t.Errorf("%s: carol: %v, limited after %v", when, got.seqs, got.limitedAfter)
		}
	}
	check("deleted while the bridge ran")
	e.stop()
	e.start()
	check("a bridge started after the deletion")
}

// A conversation none of whose messages the bridge can read any more
// (retention deleted them before it started) is told so: its messages and
// its sync answer the sequences its state names as held nowhere, and go on
// past them, rather than waiting for messages that will not come and then
// answering as if there were none. Messages sent after that are served as
// ever.
func TestChatMessagesDeletedBeforeTheBridgeStarted(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "chat")
	topic := naming.Prefixes{}.For("chat").Outcomes
	for seq := int64(1); seq <= 3; seq++ {
		e.sent("room", seq, "alice", fmt.Sprintf("message %d", seq))
	}
	adm := kadm.NewClient(e.cl)
	ends, err := adm.ListEndOffsets(e.ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if deletions, err := adm.DeleteRecords(e.ctx, ends.Offsets()); err != nil || deletions.Error() != nil {
		t.Fatalf("deleting records: %v %v", err, deletions.Error())
	}
	e.stop()
	e.start()
	// bob joined after message 1; carol after the last.
	e.publish("chat", "room", 1, `{"last_seq":3,"members":["alice","bob","carol"],"membership":{"alice":[{"from":1}],"bob":[{"from":2}],"carol":[{"from":4}]}}`)
	alice, carol := e.token("alice", "chat"), e.token("carol", "chat")
	testenv.WaitFor(t, e.ctx, "the room", func() bool { return e.get("/v1/streams/chat/entities/room", alice, nil) == http.StatusOK })

	for _, c := range []struct {
		user    string
		after   int64
		limited bool
	}{{"alice", 0, true}, {"alice", 1, true}, {"bob", 0, true}, {"carol", 0, false}} {
		var page messagesPage
		status := e.get(fmt.Sprintf("/v1/streams/chat/entities/room/messages?after_seq=%d", c.after), e.token(c.user, "chat"), &page)
		if status != http.StatusOK || len(page.Messages) != 0 || page.Limited != c.limited || page.NextAfterSeq != 3 {
			t.Errorf("%s after %d: %d %+v, want no messages, limited %v, next_after_seq 3", c.user, c.after, status, page, c.limited)
		}
	}
	var sync struct {
		Conversations []struct {
			Key          string            `json:"key"`
			Messages     []json.RawMessage `json:"messages"`
			NextAfterSeq int64             `json:"next_after_seq"`
			Limited      bool              `json:"limited"`
			Gap          bool              `json:"gap"`
		} `json:"conversations"`
	}
	if status := e.get("/v1/streams/chat/sync", alice, &sync); status != http.StatusOK || len(sync.Conversations) != 1 {
		t.Fatalf("sync: %d %+v", status, sync)
	}
	if c := sync.Conversations[0]; len(c.Messages) != 0 || c.NextAfterSeq != 3 || c.Limited || !c.Gap {
		t.Errorf("sync: %+v, want no messages, next_after_seq 3, not limited, a gap", c)
	}

	// The conversation goes on: message 4 is read as ever.
	e.sent("room", 4, "alice", "message 4")
	e.publish("chat", "room", 2, `{"last_seq":4,"members":["alice","bob","carol"],"membership":{"alice":[{"from":1}],"bob":[{"from":2}],"carol":[{"from":4}]}}`)
	testenv.WaitFor(t, e.ctx, "message 4", func() bool {
		var page messagesPage
		return e.get("/v1/streams/chat/entities/room/messages?after_seq=3", carol, &page) == http.StatusOK && len(page.seqs()) == 1 && page.seqs()[0] == 4
	})
}
