package processors

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/processors/decide"
)

// After a crash goka redelivers inputs whose decisions its table may
// already hold: they must get their first outcomes again, drained
// successors included, with the state, and write the table value again
// unchanged; the next new input is decided as usual.
func TestRedeliveredInputRepeatsItsDecisions(t *testing.T) {
	step := func(id string, seq int64, status string) []byte {
		return fmt.Appendf(nil, `{"event_id":%q,"operation_id":"op","sequence":%d,"status":%q,"occurred_at":"2026-01-01T00:00:00Z"}`, id, seq, status)
	}
	inputs := [][]byte{step("s2", 2, "running"), step("s1", 1, "queued"), step("s1", 1, "queued"), step("s3", 3, "running")}
	table := goka.GroupTable(goka.Group("workflow"))
	// The broker redelivers a record as it was, received_at included.
	received := tester.WithHeaders(goka.Headers{record.HeaderReceivedAt: []byte("1700000000123")})
	clock := func(ms int64) Options { return Options{Now: func() time.Time { return time.UnixMilli(ms) }} }

	first, _, names := startTester(t, testenv.Shipped(t, "workflow"), clock(1000))
	firstOut := first.NewQueueTracker(names.Outcomes)
	for _, in := range inputs {
		first.Consume(names.In, "op", in, received)
	}
	want := outcomes(t, firstOut)
	if got := len(want); got != 5 { // buffered, applied, applied (drained), duplicate, applied
		t.Fatalf("%d outcomes before the crash: %+v", got, want)
	}
	ahead := first.TableValue(table, "op").(*tableValue)

	// The restarted processor's table holds every decision; its input
	// starts again at offset 0.
	second, _, _ := startTester(t, testenv.Shipped(t, "workflow"), clock(2000))
	second.SetTableValue(table, "op", ahead)
	out, state := second.NewQueueTracker(names.Outcomes), second.NewQueueTracker(names.State)
	changelog := second.NewQueueTracker(string(table))
	for _, in := range inputs {
		second.Consume(names.In, "op", in, received)
	}
	if got := outcomes(t, out); !reflect.DeepEqual(got, want) {
		t.Errorf("redelivered inputs got\n%+v\nwant their first outcomes\n%+v", got, want)
	}
	if n := state.Hwm() - state.NextOffset(); n != 2 {
		t.Errorf("%d state records for two redelivered applying inputs", n)
	}
	// The table value is written again each time: the crash may have lost
	// its changelog record.
	if n := changelog.Hwm() - changelog.NextOffset(); n != int64(len(inputs)) {
		t.Errorf("%d table writes for %d redelivered inputs", n, len(inputs))
	}
	if after := second.TableValue(table, "op").(*tableValue); !reflect.DeepEqual(after, ahead) {
		t.Errorf("redelivery changed the table:\n%+v\nwas\n%+v", after, ahead)
	}

	second.Consume(names.In, "op", step("s4", 4, "completed"), received)
	if got := outcomes(t, out); len(got) != 1 || got[0].Outcome != record.Applied || got[0].InputOffset != 4 || got[0].ProcessedAtMs != 2000 {
		t.Errorf("the next input: %+v", got)
	}
}

// A key forgets the inputs before its partition's committed offset, which
// are never redelivered, and holds at most decidedMemory inputs whatever
// its traffic.
func TestDecidedMemoryIsBounded(t *testing.T) {
	var e tableValue
	decided := func(offset, committed int64) {
		ev := decide.Event{InputOffset: offset}
		effects := decide.Effects{Decisions: []decide.Decision{{Event: ev, Outcome: record.Applied, Version: offset}}}
		if err := e.rememberDecided(ev, effects, 1000+offset, committed); err != nil {
			t.Fatal(err)
		}
	}
	for offset := range int64(decidedMemory + 10) {
		decided(offset, 0)
	}
	if d := remembered(t, &e); len(d) != decidedMemory || d[0].Offset != 10 || e.NextInput != decidedMemory+10 {
		t.Fatalf("%d inputs remembered from offset %d, next input %d", len(d), d[0].Offset, e.NextInput)
	}
	// Committed up to 100: inputs 100 onwards may still come again.
	decided(500, 100)
	if d := remembered(t, &e); len(d) != decidedMemory-100+10+1 || d[0].Offset != 100 || d[len(d)-1].Offset != 500 || d[len(d)-1].AtMs != 1500 {
		t.Fatalf("after a commit at 100: %d inputs from %+v to %+v", len(d), d[0], d[len(d)-1])
	}
	decided(501, 501)
	if d := remembered(t, &e); len(d) != 1 || d[0].Offset != 501 || d[0].AtMs != 1501 || e.NextInput != 502 {
		t.Fatalf("after a commit at 501: %+v, next input %d", d, e.NextInput)
	}
}

// remembered is the entity's redelivery memory, decoded.
func remembered(t *testing.T, e *tableValue) []DecidedInput {
	t.Helper()
	inputs, err := e.Decided.inputs()
	if err != nil {
		t.Fatal(err)
	}
	return inputs
}

// crashOutputs are the records one input caused, per output topic.
type crashOutputs struct{ outcomes, states, deadLetters, replays [][]byte }

// drain takes every record left on the trackers.
func drain(qts ...*tester.QueueTracker) crashOutputs {
	var got [4][][]byte
	for i, qt := range qts {
		got[i] = rawRecords(qt)
	}
	return crashOutputs{got[0], got[1], got[2], got[3]}
}

// crashHistory draws one key's deliveries: workflow steps out of order,
// some twice or retried under a new id, with a buffer small enough to
// overflow; or presence versions of the user and two devices, out of order
// and duplicated.
func crashHistory(t *rapid.T, stream, key string) [][]byte {
	var bodies [][]byte
	n := rapid.IntRange(1, 12).Draw(t, "deliveries")
	for i := range n {
		id := fmt.Sprintf("%s-e%d", key, rapid.IntRange(0, i).Draw(t, "event"))
		version := rapid.Int64Range(1, 6).Draw(t, "version")
		if stream == "workflow" {
			bodies = append(bodies, fmt.Appendf(nil, `{"event_id":%q,"operation_id":%q,"sequence":%d,"status":"running","occurred_at":"2026-01-01T00:00:00Z"}`, id, key, version))
			continue
		}
		status := rapid.SampledFrom([]string{"ONLINE", "AWAY", "OFFLINE"}).Draw(t, "status")
		if device := rapid.SampledFrom([]string{"", "phone", "laptop"}).Draw(t, "device"); device != "" {
			bodies = append(bodies, testenv.Presence{EventID: id, User: key, Device: device, Status: status, Version: version, Timestamp: 1700000000 + version}.Body())
		} else {
			bodies = append(bodies, testenv.Presence{EventID: id, User: key, Status: status, Version: version}.Body())
		}
	}
	return bodies
}

// A crash at any point of any history: the restarted processor's input
// starts again at the committed offset, and its table, rebuilt from the
// changelog, holds the decisions of inputs up to any later point (the
// changelog ran ahead of the outputs). Every input then gets the outcomes,
// dead letters and replay requests it first got, byte for byte; a
// redelivered input that changed the state writes the state record of the
// table value it finds, which is the last one written before the crash;
// inputs after that point are decided as they were; and the table ends
// as if nothing had happened.
func TestCrashAnywhereRepeatsTheFirstOutputs(t *testing.T) {
	received := tester.WithHeaders(goka.Headers{record.HeaderReceivedAt: []byte("1700000000123")})
	opts := Options{Now: func() time.Time { return time.UnixMilli(5000) }}
	for _, stream := range []string{"workflow", "presence"} {
		t.Run(stream, func(t *testing.T) {
			s := testenv.Shipped(t, stream)
			s.Limits.Buffer = 2
			first, _, names := startTester(t, s, opts)
			second, _, _ := startTester(t, s, opts)
			table := goka.GroupTable(goka.Group(s.Name))
			trackers := func(tt *tester.Tester) []*tester.QueueTracker {
				out := []*tester.QueueTracker{tt.NewQueueTracker(names.Outcomes), tt.NewQueueTracker(names.State), tt.NewQueueTracker(names.DLQ)}
				if stream == "workflow" {
					out = append(out, tt.NewQueueTracker(names.Replay))
				}
				return out
			}
			firstQ, secondQ := trackers(first), trackers(second)
			// Both testers' inputs share offsets: the second is padded
			// with records of another key up to where a history starts.
			var offset, secondOffset int
			iteration := 0
			rapid.Check(t, func(rt *rapid.T) {
				key := fmt.Sprintf("k%d", iteration)
				iteration++
				bodies := crashHistory(rt, stream, key)
				start := offset
				var firstOut []crashOutputs
				var snapshots [][]byte
				lastState := make([][]byte, len(bodies)) // the last state record as of each input
				for i, body := range bodies {
					first.Consume(names.In, key, body, received)
					offset++
					out := drain(firstQ...)
					firstOut = append(firstOut, out)
					if i > 0 {
						lastState[i] = lastState[i-1]
					}
					if len(out.states) > 0 {
						lastState[i] = out.states[len(out.states)-1]
					}
					data, err := entityCodec{}.Encode(first.TableValue(table, key))
					if err != nil {
						rt.Fatal(err)
					}
					snapshots = append(snapshots, data)
				}
				committed := rapid.IntRange(0, len(bodies)-1).Draw(rt, "committed input")
				ahead := rapid.IntRange(committed, len(bodies)).Draw(rt, "inputs the table holds") // 0: none
				for secondOffset < start+committed {
					second.Consume(names.In, "padding", []byte(`not json`))
					secondOffset++
				}
				drain(secondQ...)
				if ahead > 0 {
					e, err := entityCodec{}.Decode(snapshots[ahead-1])
					if err != nil {
						rt.Fatal(err)
					}
					second.SetTableValue(table, key, e)
				}
				for i := committed; i < len(bodies); i++ {
					second.Consume(names.In, key, bodies[i], received)
					secondOffset++
					got, want := drain(secondQ...), firstOut[i]
					if i < ahead && len(want.states) > 0 {
						want.states = [][]byte{lastState[ahead-1]}
					}
					if !reflect.DeepEqual(got, want) {
						rt.Fatalf("input %d (committed %d, table at %d) wrote\n%s\nfirst\n%s", i, committed, ahead, got, want)
					}
				}
				end, err := entityCodec{}.Encode(second.TableValue(table, key))
				if err != nil {
					rt.Fatal(err)
				}
				if !bytes.Equal(end, snapshots[len(snapshots)-1]) {
					rt.Fatalf("the table ends as\n%q\nwithout the crash\n%q", end, snapshots[len(snapshots)-1])
				}
				if secondOffset != offset {
					rt.Fatalf("inputs at %d and %d", offset, secondOffset)
				}
			})
		})
	}
}

// On a real broker the timer loop reads the group's committed offsets, and
// a key forgets its inputs before them: after a commit, the next input
// leaves only itself and what is not committed yet in the memory.
func TestRedeliveryMemoryForgetsCommittedInputs(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := testenv.Context(t, 2*time.Minute)
	s := testenv.Shipped(t, "presence")
	s.Name = testenv.UniqueName("forget")
	s.Limits.Partitions = 1
	cl := testenv.Topics(t, ctx, testenv.OnlyStream(t, s), brokers)
	defer cl.Close()
	in := naming.Prefixes{}.For(s.Name).In
	produce := func(version int64) {
		body := testenv.Presence{EventID: fmt.Sprint("e", version), User: "alice", Version: version}.Body()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte("alice"), Value: body}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	metrics := NewMetrics(prometheus.NewRegistry())
	// Produced before the processor starts, so that it decides them in
	// one go, before its first commit.
	for version := range int64(5) {
		produce(version + 1)
	}
	proc, err := New(brokers, s, Options{Metrics: metrics}, GokaOptions(1, t.TempDir(), testenv.Logger(t))...)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- proc.Run(runCtx) }()
	go func() { done <- proc.RunTimers(runCtx, 50*time.Millisecond, kadm.NewClient(cl)) }()
	defer func() {
		stop()
		for range 2 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}()
	// The table's entity, empty until the processor holds the partition.
	alice := func() *tableValue {
		if !proc.Recovered() {
			return &tableValue{}
		}
		v, _ := proc.Get("alice")
		if e, ok := v.(*tableValue); ok {
			return e
		}
		return &tableValue{}
	}
	testenv.WaitFor(t, ctx, "five inputs decided", func() bool { return alice().NextInput == 5 })
	if n := len(remembered(t, alice())); n != 5 {
		t.Fatalf("%d inputs remembered before any commit was read", n)
	}
	testenv.WaitFor(t, ctx, "the commit read", func() bool { return proc.h.committedOffset(0) == 5 })
	produce(6)
	testenv.WaitFor(t, ctx, "the sixth input decided", func() bool { return alice().NextInput == 6 })
	if d := remembered(t, alice()); len(d) != 1 || d[0].Offset != 5 {
		t.Fatalf("after a commit at 5 the memory holds %+v", d)
	}
	// The timer loop, having read the commit of all six, shows no lag.
	testenv.WaitFor(t, ctx, "the commit of the sixth read", func() bool { return proc.h.committedOffset(0) == 6 })
	testenv.WaitFor(t, ctx, "no consumer lag", func() bool {
		return testutil.CollectAndCount(metrics.lag) == 1 && testutil.ToFloat64(metrics.lag.WithLabelValues(s.Name)) == 0
	})
}
