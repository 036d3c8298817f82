package clickhouse_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A record the sink cannot decode, on the outcomes or the state topic,
// becomes a dlq row with reason sink_undecodable, the decode error and the
// raw bytes, located where the sink read it; the records after it are
// written too; a view mark is passed over. Read again from the start (another consumer group, as after
// lost offsets), nothing is written twice. On the real broker.
func TestUndecodableRecordsReachTheDLQTable(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	b := newBrokerSink(t, ctx, "poison")
	st := state("alice", 1, "ONLINE")
	st.Stream = b.stream
	goodState := kafkaRecord(t, b.names.State, 0, 0, st)
	goodState.Partition, goodState.Offset, goodState.Key = 0, 0, []byte("alice")
	poison := func(topic, value string) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte("alice"), Value: []byte(value)}
	}
	// The processors' view mark is no record of an entity, nor a poison:
	// it makes no row at all.
	mark := &kgo.Record{Topic: b.names.State, Key: []byte{}}
	b.produce(b.outcome("e1"), poison(b.names.Outcomes, `{"stream":`), b.outcome("e2"),
		poison(b.names.State, "\xff not json"), mark, goodState)
	stop := b.run()
	b.waitForEvents(2)
	db := b.cfg.ClickHouse.Database
	dead := func() []string {
		return b.strings("SELECT concat(stream, ' ', reason, ' ', `topic`, '/', toString(`offset`), ' ', source_topic, '/', toString(source_offset), ' ', " +
			"entity_key, ' ', payload, ' | ', detail) FROM " + db + ".dlq ORDER BY source_topic")
	}
	testenv.WaitFor(t, ctx, "two dlq rows", func() bool { return len(dead()) == 2 })
	testenv.WaitFor(t, ctx, "the state after the poison", func() bool {
		return len(b.strings("SELECT entity_key FROM "+db+".entity_state")) == 1
	})
	rows := dead()
	for i, want := range []string{
		fmt.Sprintf("%s %s %s/1 %s/1 alice {\"stream\": | outcome record", b.stream, record.ReasonSinkUndecodable, b.names.Outcomes, b.names.Outcomes),
		fmt.Sprintf("%s %s %s/0 %s/0 alice \xff not json | state record", b.stream, record.ReasonSinkUndecodable, b.names.State, b.names.State),
	} {
		if !strings.HasPrefix(rows[i], want) {
			t.Errorf("dlq row %d:\n%q\nwant it to start\n%q", i, rows[i], want)
		}
	}
	if got := b.eventIDs(); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Errorf("events %v, want e1 and e2 around the poison", got)
	}

	stop()
	b.cfg.ClickHouse.ConsumerGroup += "-again"
	b.run()
	b.produce(b.outcome("e3"))
	b.waitForEvents(3)
	if got := b.eventIDs(); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
		t.Errorf("events after reading again %v", got)
	}
	if got := dead(); len(got) != 2 {
		t.Errorf("dlq after reading again:\n%s", strings.Join(got, "\n"))
	}
}
