package processors

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/processors/eos"
)

// A conversation's remembered sends, kept in parts of the table, come
// back with it from the changelog alone: an instance with an empty
// storage (tables in memory) after the one that decided the sends gives a
// retry of a send still remembered its first sequence, and one of a send
// the memory forgot a new one; the changelog holds the sends in parts, and
// the parts of forgotten sends deleted.
func TestChatSendsInPartsRestoredFromTheChangelog(t *testing.T) {
	const sends, remembered = 150, 70
	cluster, ctx, s, names, cl := faultyPartitionStream(t, "chat", func(s *config.Stream) { s.Limits.IdempotencyKeys = remembered })
	brokers := cluster.ListenAddrs()
	send := func(id string, client int) *kgo.Record {
		return &kgo.Record{Topic: names.In, Key: []byte("c1"), Value: fmt.Appendf(nil,
			`{"event_id":%q,"type":"message.send","conversation_id":"c1","sender_id":"u1","sender_device_id":"d","client_message_id":"m%d","body":"hi"}`, id, client)}
	}
	recs := []*kgo.Record{{Topic: names.In, Key: []byte("c1"), Value: []byte(`{"event_id":"j","type":"member.added","conversation_id":"c1","user_id":"u1"}`)}}
	for i := 1; i <= sends; i++ {
		recs = append(recs, send(fmt.Sprintf("s%d", i), i))
	}
	first, _ := newRuntime(t, brokers, s, RuntimeOptions{TransactionalID: "chat-a"})
	stop := runRuntime(ctx, first)
	// In two goes, so that the first part is written, then forgotten.
	from := 0
	for _, upTo := range []int{60, len(recs)} {
		if err := cl.ProduceSync(ctx, recs[from:upTo]...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		waitInputsCommitted(t, ctx, cl, s, int64(upTo))
		from = upTo
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// What the changelog holds for c1, latest per key.
	latest := map[string][]byte{}
	for _, rec := range readTopic(t, ctx, cl, names.Table, true) {
		latest[string(rec.Key)] = rec.Value
	}
	parts := 0
	for k, v := range latest {
		if IsTablePart([]byte(k)) && v != nil {
			parts++
		}
	}
	// Sends 81 to 150 are remembered: in the parts of sequences 64-127
	// and 128-191 (the sends' sequences follow the join's version 0).
	if want := 2; parts != want {
		t.Fatalf("%d parts of sends live in the changelog, want %d", parts, want)
	}
	if v, ok := latest["c1"+eos.PartSeparator+sendsPartName(0)]; !ok || v != nil {
		t.Fatalf("the first part, written then forgotten, ends as %q (written: %v), want a tombstone", v, ok)
	}

	// A second instance restores the table from the changelog alone.
	startRuntime(t, ctx, brokers, s, RuntimeOptions{TransactionalID: "chat-b"})
	oldest := sends - remembered + 1
	if err := cl.ProduceSync(ctx, send("r1", oldest), send("r2", sends), send("r3", oldest-1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitInputsCommitted(t, ctx, cl, s, int64(len(recs)+3))
	byID := map[string]record.Outcome{}
	for _, o := range committedOutcomes(t, ctx, cl, names.Outcomes) {
		byID[o.EventID] = o
	}
	for _, c := range []struct {
		id      string
		outcome record.Result
		seq     int64
	}{{"r1", record.Duplicate, int64(oldest)}, {"r2", record.Duplicate, sends}, {"r3", record.Applied, sends + 1}} {
		if o := byID[c.id]; o.Outcome != c.outcome || o.Version != c.seq {
			t.Errorf("retry %s: %s at %d, want %s at %d", c.id, o.Outcome, o.Version, c.outcome, c.seq)
		}
	}
}
