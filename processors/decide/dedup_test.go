package decide

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A dedupCase is one policy that dedups, on a shipped stream: the stream
// and a pool of distinct events to deliver (each with its own event id),
// the row each belongs to.
type dedupCase struct {
	name   string
	stream func(t testenv.Fataler) *config.Stream
	// pool returns the bodies of n distinct events and each one's row ("":
	// the entity's own, else a device).
	pool func(t *rapid.T, n int) (bodies [][]byte, rows []string)
	// otherDuplicate reports whether, with the memory missing ev's id, e
	// may still call ev a duplicate by another rule of the policy: a
	// buffered step's sequence, a waiting child's id, a send's client key.
	otherDuplicate func(e *Entity, ev Event, d Decision) bool
}

func never(*Entity, Event, Decision) bool { return false }

func entityRows(n int) []string { return make([]string, n) }

var dedupCases = []dedupCase{
	{
		name:   "latest with versions",
		stream: func(t testenv.Fataler) *config.Stream { return testenv.Shipped(t, "presence") },
		pool: func(t *rapid.T, n int) ([][]byte, []string) {
			var bodies [][]byte
			for i := range n {
				bodies = append(bodies, fmt.Appendf(nil, `{"event_id":"e%d","user_id":"k","presence":"ONLINE","sequence_number":%d,"timestamp":1700000000}`,
					i, rapid.Int64Range(1, 20).Draw(t, "version")))
			}
			return bodies, entityRows(n)
		},
		otherDuplicate: never,
	},
	{
		name: "latest without versions",
		stream: func(t testenv.Fataler) *config.Stream {
			s := testenv.Shipped(t, "workflow")
			s.Policy, s.Version, s.Terminal = config.PolicyLatest, "", config.Terminal{}
			return s
		},
		pool: func(t *rapid.T, n int) ([][]byte, []string) {
			var bodies [][]byte
			for i := range n {
				bodies = append(bodies, fmt.Appendf(nil, `{"event_id":"e%d","operation_id":"k","sequence":1,"status":"running","occurred_at":"2026-01-01T00:00:00Z"}`, i))
			}
			return bodies, entityRows(n)
		},
		otherDuplicate: never,
	},
	{
		name:   "device rows",
		stream: func(t testenv.Fataler) *config.Stream { return testenv.Shipped(t, "presence") },
		pool: func(t *rapid.T, n int) ([][]byte, []string) {
			var bodies [][]byte
			var rows []string
			for i := range n {
				device := rapid.SampledFrom([]string{"", "laptop", "phone"}).Draw(t, "device")
				field := ""
				if device != "" {
					field = fmt.Sprintf(`,"device_id":%q`, device)
				}
				bodies = append(bodies, fmt.Appendf(nil, `{"event_id":"e%d","user_id":"k","presence":"AWAY","sequence_number":%d,"timestamp":1700000000%s}`,
					i, rapid.Int64Range(1, 20).Draw(t, "version"), field))
				rows = append(rows, device)
			}
			return bodies, rows
		},
		otherDuplicate: never,
	},
	{
		name:   "gapless",
		stream: func(t testenv.Fataler) *config.Stream { return testenv.Shipped(t, "workflow") },
		pool: func(t *rapid.T, n int) ([][]byte, []string) {
			var bodies [][]byte
			for i := range n {
				status := rapid.SampledFrom([]string{"running", "progress", "running", "completed"}).Draw(t, "status")
				bodies = append(bodies, fmt.Appendf(nil, `{"event_id":"e%d","operation_id":"k","sequence":%d,"status":%q,"occurred_at":"2026-01-01T00:00:00Z"}`,
					i, rapid.Int64Range(1, 8).Draw(t, "sequence"), status))
			}
			return bodies, entityRows(n)
		},
		otherDuplicate: func(_ *Entity, _ Event, d Decision) bool { return d.Reason == record.ReasonSameSequence },
	},
	{
		name:   "assign",
		stream: func(t testenv.Fataler) *config.Stream { return testenv.Shipped(t, "chat") },
		pool: func(t *rapid.T, n int) ([][]byte, []string) {
			var bodies [][]byte
			for i := range n {
				user := rapid.SampledFrom([]string{"ann", "bo"}).Draw(t, "user")
				var b []byte
				switch rapid.IntRange(0, 3).Draw(t, "part") {
				case 0:
					b = fmt.Appendf(nil, `{"event_id":"e%d","type":"member.added","conversation_id":"k","user_id":%q}`, i, user)
				case 1:
					b = fmt.Appendf(nil, `{"event_id":"e%d","type":"member.removed","conversation_id":"k","user_id":%q}`, i, user)
				case 2:
					b = fmt.Appendf(nil, `{"event_id":"e%d","type":"receipt.read","conversation_id":"k","user_id":%q,"device_id":"d","conversation_seq":%d}`,
						i, user, rapid.IntRange(1, 4).Draw(t, "seq"))
				default:
					// A client sends a message once, or again under new ids.
					b = fmt.Appendf(nil, `{"event_id":"e%d","type":"message.send","conversation_id":"k","sender_id":%q,"sender_device_id":"d","client_message_id":"c%d","body":"hi","client_sent_at":"2026-01-01T00:00:00Z"}`,
						i, user, rapid.IntRange(0, 3).Draw(t, "client message"))
				}
				bodies = append(bodies, b)
			}
			return bodies, entityRows(n)
		},
		otherDuplicate: func(e *Entity, ev Event, _ Decision) bool {
			return e.Chat != nil && slices.ContainsFunc(e.Chat.Sent, func(m SentMessage) bool { return m.Client == sentKey(ev, false) && ev.ClientKey != "" })
		},
	},
	{
		name: "parent join",
		stream: func(t testenv.Fataler) *config.Stream {
			s := testenv.Shipped(t, "orders")
			s.Parent.TTL = time.Hour
			return s
		},
		pool: func(t *rapid.T, n int) ([][]byte, []string) {
			var bodies [][]byte
			for i := range n {
				if rapid.IntRange(0, 3).Draw(t, "parent") == 0 {
					bodies = append(bodies, fmt.Appendf(nil, `{"event_id":"e%d","event_type":"order.created","order_id":"k","payload":{}}`, i))
				} else {
					bodies = append(bodies, fmt.Appendf(nil, `{"event_id":"e%d","event_type":"order.shipped","parent_id":"k","payload":{}}`, i))
				}
			}
			return bodies, entityRows(n)
		},
		otherDuplicate: func(e *Entity, ev Event, _ Decision) bool {
			return slices.ContainsFunc(e.Quarantine, func(c Event) bool { return c.EventID == ev.EventID })
		},
	},
}

// memoryModel is the dedup guarantee as the docs state it, for one row and
// a clock that never goes back: an id is known iff it was first seen at
// most window ago and fewer than ids other ids were first seen on its row
// since. It keeps no list: only when each id was first seen, and how many
// first sights its row had by then.
type memoryModel struct {
	ids      int
	windowMs int64
	// firsts counts the first sights of each row; seen is, per row and
	// id, the last first sight's time and its number.
	firsts map[string]int
	seen   map[string]map[string]sight
}

type sight struct {
	atMs int64
	n    int
}

// deliver reports whether the model knows id on row at atMs, the ids an
// early eviction pushes out by this delivery (an id whose window has not
// ended, first seen exactly ids first sights ago), and records a first
// sight when it is new.
func (m *memoryModel) deliver(row, id string, atMs int64) (known bool, evicted int) {
	if m.seen[row] == nil {
		m.seen[row] = map[string]sight{}
	}
	s, ok := m.seen[row][id]
	if ok && atMs-s.atMs <= m.windowMs && m.firsts[row]-s.n < m.ids {
		return true, 0
	}
	m.firsts[row]++
	m.seen[row][id] = sight{atMs, m.firsts[row]}
	for _, other := range m.seen[row] {
		if other.n == m.firsts[row]-m.ids && atMs-other.atMs <= m.windowMs {
			evicted++
		}
	}
	return false, evicted
}

// For every policy that dedups, deliveries of a pool of events, repeated
// in any order, on a clock that moves by steps around the window: a
// delivery the model knows is a duplicate (so never applied twice within
// the window and the count); one it does not know is decided as new (only
// another rule of the policy may still call it a duplicate); and each
// decision reports exactly the early evictions the model sees.
func TestDedupWindowAndCount(t *testing.T) {
	for _, c := range dedupCases {
		t.Run(c.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				s := c.stream(t)
				s.Limits.DedupIDs = rapid.IntRange(1, 5).Draw(t, "dedup ids")
				windowMs := rapid.Int64Range(1, 1000).Draw(t, "window ms")
				s.Limits.DedupWindow = time.Duration(windowMs) * time.Millisecond
				rules := For(s)
				bodies, rows := c.pool(t, rapid.IntRange(1, 10).Draw(t, "events"))
				model := memoryModel{ids: s.Limits.DedupIDs, windowMs: windowMs, firsts: map[string]int{}, seen: map[string]map[string]sight{}}
				var e Entity
				now := int64(1_700_000_000_000)
				applied := map[string][]int64{}
				for range rapid.IntRange(1, 60).Draw(t, "deliveries") {
					now += rapid.SampledFrom([]int64{0, 0, 1, windowMs / 3, windowMs, windowMs + 1}).Draw(t, "advance ms")
					i := rapid.IntRange(0, len(bodies)-1).Draw(t, "event")
					ev := read(t, rules, bodies[i], now)
					before := cloneEntity(&e)
					effects := rules.Decide(&e, ev)
					d := effects.Decisions[0]
					known, evicted := model.deliver(rows[i], ev.EventID, now)
					switch {
					case known && d.Outcome != record.Duplicate:
						t.Fatalf("%s at %d, known since %d: %s, want duplicate", ev.EventID, now, model.seen[rows[i]][ev.EventID].atMs, d.Outcome)
					case !known && d.Outcome == record.Duplicate && !c.otherDuplicate(before, ev, d):
						t.Fatalf("%s at %d is forgotten, yet a duplicate", ev.EventID, now)
					}
					if effects.Evicted != evicted {
						t.Fatalf("%s at %d: %d early evictions reported, the model sees %d", ev.EventID, now, effects.Evicted, evicted)
					}
					for _, d := range effects.Decisions {
						if d.ChangesState() {
							// Applied, or reconciled: then first seen when
							// it was quarantined.
							applied[d.Event.EventID] = append(applied[d.Event.EventID], d.Event.ReceivedAtMs)
						}
					}
					for _, r := range e.rows() {
						if len(r.Recent) > s.Limits.DedupIDs {
							t.Fatalf("a row remembers %d ids, bound %d", len(r.Recent), s.Limits.DedupIDs)
						}
					}
				}
				// What the model's duplicates imply, said directly: with no
				// more distinct ids than the count, two applications of one
				// id are more than the window apart.
				for id, at := range applied {
					for j := 1; j < len(at); j++ {
						if at[j]-at[j-1] <= windowMs && len(bodies) <= s.Limits.DedupIDs {
							t.Fatalf("%s applied at %d and again at %d, within the window of %d ms", id, at[j-1], at[j], windowMs)
						}
					}
				}
			})
		})
	}
}

// rows are the entity's rows that keep a dedup memory.
func (e *Entity) rows() []*Row {
	rows := []*Row{&e.Row}
	for _, d := range e.Devices {
		rows = append(rows, &d.Row)
	}
	return rows
}

// cloneEntity copies what otherDuplicate reads of an entity before a
// decision changes it.
func cloneEntity(e *Entity) *Entity {
	c := &Entity{Quarantine: slices.Clone(e.Quarantine)}
	if e.Chat != nil {
		c.Chat = &Conversation{Sent: slices.Clone(e.Chat.Sent)}
	}
	return c
}

// The window's exact boundary, for every policy: an id seen at t is a
// duplicate when retried at t + dedup_window, and forgotten at 1 ms later:
// a version-less row applies it again, a versioned one calls it stale.
func TestDedupWindowBoundary(t *testing.T) {
	const t0 = 1_700_000_000_000
	window := 7 * 24 * time.Hour
	cases := []struct {
		name   string
		stream string
		change func(s *config.Stream)
		// setup are delivered first, at t0; retried is delivered at t0,
		// then again at the boundary and after it.
		setup   []string
		retried string
		after   record.Result
	}{
		{"latest with versions", "presence", nil, nil,
			`{"event_id":"a","user_id":"k","presence":"BUSY","sequence_number":1,"timestamp":1700000000}`, record.Stale},
		{"latest without versions", "workflow", func(s *config.Stream) { s.Policy, s.Version, s.Terminal = config.PolicyLatest, "", config.Terminal{} }, nil,
			`{"event_id":"a","operation_id":"k","sequence":1,"status":"running","occurred_at":"2026-01-01T00:00:00Z"}`, record.Applied},
		{"device row", "presence", nil, nil,
			`{"event_id":"a","user_id":"k","presence":"BUSY","sequence_number":1,"timestamp":1700000000,"device_id":"phone"}`, record.Stale},
		{"gapless", "workflow", nil, nil,
			`{"event_id":"a","operation_id":"k","sequence":1,"status":"running","occurred_at":"2026-01-01T00:00:00Z"}`, record.Stale},
		{"assign membership", "chat", nil, nil,
			`{"event_id":"a","type":"member.added","conversation_id":"k","user_id":"ann"}`, record.Applied},
		{"assign receipt", "chat", nil, []string{
			`{"event_id":"m","type":"member.added","conversation_id":"k","user_id":"ann"}`,
			`{"event_id":"s","type":"message.send","conversation_id":"k","sender_id":"ann","sender_device_id":"d","client_message_id":"c","body":"hi","client_sent_at":"2026-01-01T00:00:00Z"}`},
			`{"event_id":"a","type":"receipt.read","conversation_id":"k","user_id":"ann","device_id":"d","conversation_seq":1}`, record.Stale},
		{"parent", "orders", nil, nil,
			`{"event_id":"a","event_type":"order.created","order_id":"k","payload":{}}`, record.Applied},
		{"child after its parent", "orders", nil, []string{`{"event_id":"p","event_type":"order.created","order_id":"k","payload":{}}`},
			`{"event_id":"a","event_type":"order.shipped","parent_id":"k","payload":{}}`, record.Applied},
	}
	for _, tc := range cases {
		s := testenv.Shipped(t, tc.stream)
		if tc.change != nil {
			tc.change(s)
		}
		s.Limits.DedupWindow = window
		rules := For(s)
		for _, retryAt := range []int64{window.Milliseconds(), window.Milliseconds() + 1} {
			var e Entity
			for _, b := range tc.setup {
				rules.Decide(&e, read(t, rules, []byte(b), t0))
			}
			if d := rules.Decide(&e, read(t, rules, []byte(tc.retried), t0)).Decisions[0]; d.Outcome != record.Applied {
				t.Fatalf("%s: first delivery %s", tc.name, d.Outcome)
			}
			want := record.Duplicate
			if retryAt > window.Milliseconds() {
				want = tc.after
			}
			effects := rules.Decide(&e, read(t, rules, []byte(tc.retried), t0+retryAt))
			if d := effects.Decisions[0]; d.Outcome != want || effects.Evicted != 0 {
				t.Errorf("%s: retried at t + %d ms: %s, %d evicted; want %s", tc.name, retryAt, d.Outcome, effects.Evicted, want)
			}
		}
	}
}

// A child waiting for its parent is never stored twice, even once the
// count has pushed its id out of the memory: the quarantine is checked by
// id too, and the parent reconciles it once.
func TestWaitingChildIsNeverStoredTwice(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	s.Limits.DedupIDs = 1
	rules := For(s)
	child := func(id string) []byte {
		return fmt.Appendf(nil, `{"event_id":%q,"event_type":"order.payment_received","parent_id":"k","payload":{}}`, id)
	}
	var e Entity
	var got []string
	for _, b := range [][]byte{child("a"), child("b"), child("a"), []byte(`{"event_id":"p","event_type":"order.created","order_id":"k","payload":{}}`)} {
		effects := rules.Decide(&e, read(t, rules, b, 1_700_000_000_000))
		for _, d := range effects.Decisions {
			got = append(got, fmt.Sprintf("%s:%s/%d", d.Event.EventID, d.Outcome, effects.Evicted))
		}
	}
	want := []string{"a:quarantined/0", "b:quarantined/1", "a:duplicate/1", "p:applied/1", "a:reconciled/1", "b:reconciled/1"}
	if !slices.Equal(got, want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
}
