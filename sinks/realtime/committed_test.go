package realtime_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/testenv"
)

// The processors write state transactionally: the bridge shows committed
// states only, never one of an aborted transaction, and the markers that
// end transactions (the last offset of every partition a transaction
// wrote) neither keep a bridge from being ready nor break a cursor's
// resume across the gaps they and the aborted records leave. On the real
// broker.
func TestBridgeShowsCommittedStatesOnly(t *testing.T) {
	brokers := testenv.Kafka(t)
	stream := testenv.UniqueName("presence")
	e := newBridgeEnv(t, brokers, presenceAs(stream, nil), "presence")
	txn, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.TransactionalID(stream+"-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	transaction := func(commit bool, records ...*kgo.Record) {
		t.Helper()
		testenv.Transact(t, e.ctx, txn, commit, records...)
	}
	tok := e.token("alice", "*")
	version := func(key string) int64 {
		var ent entityJSON
		if e.get("/v1/streams/"+stream+"/entities/"+key, tok, &ent) != http.StatusOK {
			return 0
		}
		return ent.Version
	}

	transaction(true, stateRecord(stream, "u1", 1, `{"presence":"ONLINE"}`))
	testenv.WaitFor(t, e.ctx, "u1 at 1", func() bool { return version("u1") == 1 })
	before, _ := e.snapshot(stream, tok, 10)
	transaction(false, stateRecord(stream, "u1", 9, `{"presence":"ABORTED"}`), stateRecord(stream, "u2", 1, `{"presence":"ABORTED"}`))
	transaction(true, stateRecord(stream, "u3", 1, `{"presence":"ONLINE"}`))
	testenv.WaitFor(t, e.ctx, "u3 at 1", func() bool { return version("u3") == 1 })
	if v1, v2 := version("u1"), version("u2"); v1 != 1 || v2 != 0 {
		t.Fatalf("u1 at %d and u2 at %d: the aborted transaction is shown", v1, v2)
	}

	// A bridge started on logs that end in markers becomes ready (start
	// waits for it) and shows the same.
	e.stop()
	e.start()
	if _, ents := e.snapshot(stream, tok, 10); len(ents) != 2 || ents[0].Key != "u1" || ents[0].Version != 1 || ents[1].Key != "u3" {
		t.Fatalf("snapshot after a restart: %+v", ents)
	}
	// Resuming from before the aborted transaction gives the committed
	// changes after it, then live ones; nothing of the aborted one.
	s, status := e.open(e.ctx, stream, tok, before, "")
	if status != http.StatusOK {
		t.Fatalf("resume across the aborted transaction: %d", status)
	}
	defer s.close()
	transaction(true, stateRecord(stream, "u4", 1, `{"presence":"BUSY"}`))
	for _, want := range []string{"u3", "u4"} {
		ev, ok := s.next(t, 10*time.Second)
		var ent entityJSON
		if !ok || json.Unmarshal([]byte(ev.data), &ent) != nil || ent.Key != want {
			t.Fatalf("event %+v, want %s", ev, want)
		}
	}
}
