package checker

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/testenv"
)

// Each committed record is told the time of the commit marker that ended
// its transaction, which the broker writes once the commit is asked for
// (after answering it: EndTxn is answered once the commit is logged, and
// the markers that make it readable follow); an aborted transaction's
// records are not read at all, and a transaction interleaved with another
// producer's on the same partition gets its own marker's time.
func TestCommitTimesOnTheBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := testenv.Context(t, time.Minute)
	topic := testenv.UniqueName("checker-commits")
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	producer := func(id string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	first, second := producer(testenv.UniqueName("first")), producer(testenv.UniqueName("second"))

	// A transaction left open by the second producer while the first
	// commits two on the same partition.
	if err := second.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := second.ProduceSync(ctx, kgo.StringRecord("second-1")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The time each committed transaction's commit was asked for.
	committed := map[string]int64{}
	transact := func(cl *kgo.Client, commit bool, values ...string) {
		var records []*kgo.Record
		for _, v := range values {
			records = append(records, kgo.StringRecord(v))
		}
		// Each marker waits for the next millisecond, so that no two
		// transactions share one.
		time.Sleep(5 * time.Millisecond)
		from := time.Now().UnixMilli()
		testenv.Transact(t, ctx, cl, commit, records...)
		if commit {
			for _, v := range values {
				committed[v] = from
			}
		}
	}
	transact(first, true, "first-1", "first-2")
	transact(first, false, "aborted")
	transact(first, true, "first-3")
	from := time.Now().UnixMilli()
	if err := second.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	committed["second-1"] = from

	var commits commitTimes
	got := map[string]int64{}
	if _, err := readTopic(ctx, brokers, topic, func(rec *kgo.Record) {
		v := string(rec.Value)
		if _, dup := got[v]; dup {
			t.Errorf("%s read twice", v)
		}
		got[v] = 0
		commits.wrote(rec, func(atMs int64) { got[v] = atMs })
	}, commits.marker); err != nil {
		t.Fatal(err)
	}
	read := time.Now().UnixMilli()
	if _, ok := got["aborted"]; ok {
		t.Error("the aborted transaction's record was read")
	}
	for v, asked := range committed {
		at, ok := got[v]
		switch {
		case !ok:
			t.Errorf("%s not read", v)
		case at < asked || at > read:
			t.Errorf("%s committed at %d, outside %d (its commit asked) – %d (read)", v, at, asked, read)
		}
	}
	if got["first-1"] != got["first-2"] || got["first-1"] >= got["first-3"] || got["first-3"] > got["second-1"] {
		t.Errorf("commit times %v: one per transaction, in the order they committed", got)
	}
}

// A marker is a commit when its type, the second int16 of its key, is 1.
func TestIsCommitMarker(t *testing.T) {
	key := func(version, kind uint16) []byte {
		return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, version), kind)
	}
	for _, c := range []struct {
		key  []byte
		want bool
	}{{key(0, 1), true}, {key(0, 0), false}, {key(1, 1), true}, {nil, false}, {[]byte{0, 0, 0}, false}} {
		if got := isCommitMarker(&kgo.Record{Key: c.key}); got != c.want {
			t.Errorf("key %v: commit %v, want %v", c.key, got, c.want)
		}
	}
}
