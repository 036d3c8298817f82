package realtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/sinks/realtime"
)

// A snapshot, then the events from its cursor: every change after it,
// once, with ids that resume where they stand.
func TestSnapshotThenEvents(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "presence")
	for i := range 10 {
		e.publish("presence", fmt.Sprintf("u%d", i), 1, `{"presence":"ONLINE"}`)
	}
	tok := e.token("alice", "presence")
	testenv.WaitFor(t, e.ctx, "ten entities", func() bool {
		_, ents := e.snapshot("presence", tok, 3)
		return len(ents) == 10
	})
	cursor, ents := e.snapshot("presence", tok, 3)
	for i, ent := range ents {
		if want := fmt.Sprintf("u%d", i); ent.Key != want || ent.Version != 1 {
			t.Fatalf("entity %d: %+v, want %s at 1", i, ent, want)
		}
	}
	s, status := e.open(e.ctx, "presence", tok, cursor, "")
	if status != http.StatusOK {
		t.Fatalf("events: %d", status)
	}
	defer s.close()
	e.publish("presence", "u3", 2, `{"presence":"AWAY"}`)
	e.publish("presence", "u3", 1, `{"presence":"STALE"}`) // lower: never sent
	e.publish("presence", "u4", 2, `{"presence":"BUSY"}`)
	var last string
	for _, want := range []string{"u3@2", "u4@2"} {
		ev, _ := s.next(t, 10*time.Second)
		var ent entityJSON
		if err := json.Unmarshal([]byte(ev.data), &ent); err != nil || ev.event != "state" {
			t.Fatalf("event %+v: %v", ev, err)
		}
		if got := fmt.Sprintf("%s@%d", ent.Key, ent.Version); got != want {
			t.Fatalf("event %s, want %s", got, want)
		}
		last = ev.id
	}
	s.close()
	// Resuming from the last id sends only what came after it.
	e.publish("presence", "u5", 2, `{"presence":"AWAY"}`)
	s2, status := e.open(e.ctx, "presence", tok, last, "")
	if status != http.StatusOK {
		t.Fatalf("resume: %d", status)
	}
	defer s2.close()
	ev, _ := s2.next(t, 10*time.Second)
	var ent entityJSON
	_ = json.Unmarshal([]byte(ev.data), &ent)
	if ent.Key != "u5" || ent.Version != 2 {
		t.Fatalf("after resuming: %s", ev.data)
	}
}

// The processors' view marks on the state topic (a tombstone of the empty
// key, for goka's view) are positions only: no entity, and no warning,
// though they come after every transaction; a record no reader can use
// is passed over with one.
func TestViewMarksArePassedOverSilently(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "presence")
	topic := naming.Prefixes{}.For("presence").State
	for i := range 3 {
		e.publish("presence", fmt.Sprintf("u%d", i), 1, `{"presence":"ONLINE"}`)
		if err := e.cl.ProduceSync(e.ctx, &kgo.Record{Topic: topic, Key: []byte{}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.cl.ProduceSync(e.ctx, &kgo.Record{Topic: topic, Key: []byte("u9"), Value: []byte("{")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.publish("presence", "u3", 1, `{"presence":"AWAY"}`)
	tok := e.token("alice", "presence")
	testenv.WaitFor(t, e.ctx, "the four entities and no other", func() bool {
		_, ents := e.snapshot("presence", tok, 10)
		var keys []string
		for _, ent := range ents {
			keys = append(keys, ent.Key)
		}
		return slices.Equal(keys, []string{"u0", "u1", "u2", "u3"})
	})
	if n := e.warnings.count("state record skipped"); n != 1 {
		t.Errorf("%d records skipped with a warning, want the one undecodable record", n)
	}
}

// A cursor that cannot resume is 410 Gone with the problem type, never a
// partial replay: malformed, of another epoch (the topic deleted and
// created again), with another partition count, ahead of the log end, or
// below the log start. On the real broker, which deletes and creates
// topics by name as an operator would.
func TestCursorsThatCannotResumeAreGone(t *testing.T) {
	{
		brokers := testenv.Kafka(t)
		stream := testenv.UniqueName("presence")
		e := newBridgeEnv(t, brokers, presenceAs(stream, func(cfg *config.Config) { cfg.Bridge.Window = 2 }), "presence")
		tok := e.token("alice", "*")
		for v := range int64(8) {
			e.publish(stream, "u", v+1, `{"presence":"ONLINE"}`)
		}
		testenv.WaitFor(t, e.ctx, "version 8", func() bool {
			var ent entityJSON
			return e.get("/v1/streams/"+stream+"/entities/u", tok, &ent) == http.StatusOK && ent.Version == 8
		})
		cursor, _ := e.snapshot(stream, tok, 10)
		c, err := realtime.ParseCursor(cursor)
		if err != nil {
			t.Fatal(err)
		}
		ahead := c.Clone()
		ahead.Offsets[0] += 1000
		ahead.Offsets[1] += 1000
		ahead.Offsets[2] += 1000
		fewer := c.Clone()
		fewer.Offsets = fewer.Offsets[:2]
		other := c.Clone()
		other.Epoch[0] ^= 0xff
		for name, cur := range map[string]string{
			"malformed": "not-a-cursor", "truncated": cursor[:len(cursor)-3],
			"another partition count": fewer.String(), "another epoch": other.String(), "ahead of the log end": ahead.String(),
		} {
			var p problemBody
			if status := e.get("/v1/streams/"+stream+"/events?cursor="+cur, tok, &p); status != http.StatusGone || p.Type != "https://driftguard.dev/problems/cursor-gone" {
				t.Errorf("%s: %d %+v, want 410 cursor-gone", name, status, p)
			}
		}
		// Records deleted below a cursor the log no longer holds: an
		// operator may give a state topic retention too (compact,delete).
		p0 := c.Clone()
		for p := range p0.Offsets {
			p0.Offsets[p] = 0
		}
		admin, err := kafka.NewClient(kafka.Conn{Brokers: brokers})
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		adm := kadm.NewClient(admin)
		policy := "compact,delete"
		if _, err := adm.AlterTopicConfigs(e.ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: &policy}}, naming.Prefixes{}.For(stream).State); err != nil {
			t.Fatal(err)
		}
		ends, err := adm.ListEndOffsets(e.ctx, naming.Prefixes{}.For(stream).State)
		if err != nil {
			t.Fatal(err)
		}
		var deleteTo kadm.Offsets
		ends.Each(func(o kadm.ListedOffset) {
			deleteTo.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset})
		})
		// The broker applies a config change asynchronously: until it has,
		// deleting records of a compacted topic is a policy violation.
		var deleteErr error
		testenv.WaitFor(t, e.ctx, "the records deleted once deletion is allowed", func() bool {
			deleted, err := adm.DeleteRecords(e.ctx, deleteTo)
			if err == nil {
				err = deleted.Error()
			}
			deleteErr = err
			return !errors.Is(err, kerr.PolicyViolation)
		})
		if deleteErr != nil {
			t.Fatalf("deleting records: %v", deleteErr)
		}
		var p problemBody
		if status := e.get("/v1/streams/"+stream+"/events?cursor="+p0.String(), tok, &p); status != http.StatusGone || !strings.Contains(p.Detail, "below the log start") {
			t.Errorf("below the log start: %d %+v", status, p)
		}
		// The topic deleted and created again: a cursor of the old one is
		// gone, once the bridge has read the new one.
		topic := naming.Prefixes{}.For(stream).State
		if resp, err := adm.DeleteTopics(e.ctx, topic); err != nil || resp[topic].Err != nil {
			t.Fatalf("deleting %s: %v %+v", topic, err, resp)
		}
		testenv.WaitFor(t, e.ctx, "the topic created again", func() bool {
			resp, err := adm.CreateTopic(e.ctx, 3, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic)
			return err == nil && resp.Err == nil
		})
		// A producer that knew the old topic's id would be refused.
		e.cl = admin
		e.publish(stream, "u", 1, `{"presence":"AWAY"}`)
		testenv.WaitFor(t, e.ctx, "the old cursor gone", func() bool {
			ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
			defer cancel()
			s, status := e.open(ctx, stream, tok, cursor, "")
			if s != nil {
				s.close()
			}
			return status == http.StatusGone
		})
		fresh, ents := e.snapshot(stream, tok, 10)
		if len(ents) != 1 || ents[0].Version != 1 || fresh == cursor {
			t.Fatalf("after the topic was created again: %s %+v", fresh, ents)
		}
	}
}

// A stream with more entities than bridge.max_entities: the new ones are
// dropped and counted, and the bridge degrades instead of leaving its
// Service: /readyz stays ready, the gauge says the stream is over its
// limit, and the entities held are still served.
func TestEntityLimit(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) { c.Bridge.MaxEntities = 3 }, "presence")
	if n := gathered(t, e, "driftguard_bridge_entities_over_limit"); n != 0 {
		t.Errorf("over the limit (%v) before any entity", n)
	}
	for i := range 5 {
		e.publish("presence", fmt.Sprintf("u%d", i), 1, `{"presence":"ONLINE"}`)
	}
	testenv.WaitFor(t, e.ctx, "two entities dropped", func() bool {
		return gathered(t, e, "driftguard_bridge_entities_dropped_total") == 2
	})
	resp, err := http.Get(e.opsURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz %d %s, want 200: a stream over its limit degrades, it does not take the replica out", resp.StatusCode, body)
	}
	if n := gathered(t, e, "driftguard_bridge_entities_over_limit"); n != 1 {
		t.Errorf("driftguard_bridge_entities_over_limit %v, want 1", n)
	}
	if n := gathered(t, e, "driftguard_bridge_entities"); n != 3 {
		t.Errorf("%v entities held, want 3", n)
	}
	if _, ents := e.snapshot("presence", e.token("alice", "presence"), 10); len(ents) != 3 {
		t.Errorf("the snapshot serves %d entities, want the 3 held", len(ents))
	}
}

// Live clients share each change's message, `expired` as of when it is
// sent: changes of one batch, some of whose claims have lapsed, reach
// every live client in order, each with the id to resume after it.
func TestLiveMessagesSayExpired(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), nil, "presence")
	now := time.Now() // held still: a claim expires as of it
	e.now = func() time.Time { return now }
	tok := e.token("alice", "presence")
	cursor, _ := e.snapshot("presence", tok, 10)
	var clients []*sse
	for range 2 {
		s, status := e.open(e.ctx, "presence", tok, cursor, "")
		if status != http.StatusOK {
			t.Fatalf("events: %d", status)
		}
		defer s.close()
		clients = append(clients, s)
	}
	testenv.WaitFor(t, e.ctx, "both clients live", func() bool {
		return gathered(t, e, "driftguard_bridge_catchup_changes") == 2
	})
	// One key, so one partition and one batch as far as the producer
	// lingers: versions 1 to 6, the even ones expired by now.
	expiries := []int64{0, now.UnixMilli() - 1, now.UnixMilli() + 60_000, now.UnixMilli(), 0, 1}
	for i, exp := range expiries {
		r := stateRecord("presence", "u", int64(i+1), `{"presence":"ONLINE"}`)
		st := record.State{Stream: "presence", Key: "u", Version: int64(i + 1), State: json.RawMessage(`{"presence":"ONLINE"}`), ExpiresAtMs: exp}
		r.Value = record.AppendState(nil, &st)
		e.cl.Produce(e.ctx, r, nil)
	}
	if err := e.cl.Flush(e.ctx); err != nil {
		t.Fatal(err)
	}
	var got [2][]sseEvent
	for c, s := range clients {
		for i := range expiries {
			ev, _ := s.next(t, 10*time.Second)
			var ent entityJSON
			if err := json.Unmarshal([]byte(ev.data), &ent); err != nil {
				t.Fatalf("client %d event %d: %v", c, i, err)
			}
			if want := i%2 == 1; ent.Version != int64(i+1) || ent.Expired != want {
				t.Fatalf("client %d event %d: %s, want version %d expired %v", c, i, ev.data, i+1, want)
			}
			got[c] = append(got[c], ev)
		}
	}
	if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
		t.Fatalf("live clients were sent different messages:\n%v\n%v", got[0], got[1])
	}
	// Each id resumes after its change.
	s, status := e.open(e.ctx, "presence", tok, got[0][3].id, "")
	if status != http.StatusOK {
		t.Fatalf("resume: %d", status)
	}
	defer s.close()
	for _, want := range got[0][4:] {
		if ev, _ := s.next(t, 10*time.Second); ev != want {
			t.Fatalf("resumed: %+v, want %+v", ev, want)
		}
	}
}
