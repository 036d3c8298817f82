package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/benchmarks/peers/peer"
	"github.com/driftguard/driftguard/benchmarks/peers/peertest"
	"github.com/driftguard/driftguard/internal/testenv"
)

func TestMain(m *testing.M) { peertest.Main(m) }

// defaults are the catalogue's: what the peer runs with unless told.
func defaults(t testing.TB) Options {
	t.Helper()
	s, err := peer.CatalogueStream("orders")
	if err != nil {
		t.Fatal(err)
	}
	return Options{Addr: peertest.Redis(t), OrphanTTL: s.Parent.TTL, OrphanBuffer: s.Parent.Buffer, DedupTTL: s.Limits.DedupWindow}
}

// newPeer serves the peer over HTTP with keys under a prefix of its own
// on the shared server, deleted after the test.
func newPeer(t testing.TB, opts Options) (*peertest.Client, *Store) {
	t.Helper()
	opts.Prefix = fmt.Sprintf("peertest-%d:", time.Now().UnixNano())
	store, err := Open(context.Background(), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Reset(context.Background()); err != nil {
			t.Error(err)
		}
		store.Close()
	})
	return serve(t, store), store
}

func serve(t testing.TB, store *Store) *peertest.Client {
	t.Helper()
	edge, c := peertest.Edge(t, "orders", "")
	return peertest.Serve(t, edge, store.Handler(edge), c)
}

type order struct {
	EventID   string         `json:"event_id"`
	EventType string         `json:"event_type"`
	OrderID   string         `json:"order_id,omitempty"`
	ParentID  string         `json:"parent_id,omitempty"`
	Payload   map[string]any `json:"payload"`
}

func created(id, orderID string) order {
	return order{EventID: id, EventType: "order.created", OrderID: orderID, Payload: map[string]any{"amount_cents": 1200}}
}

var childTypes = []string{"order.payment_received", "payment.captured", "order.shipped"}

func child(id, orderID string) order {
	return order{EventID: id, EventType: childTypes[len(id)%len(childTypes)], ParentID: orderID, Payload: map[string]any{"note": "a"}}
}

func expect(t *testing.T, c *peertest.Client, ev order, outcome string) {
	t.Helper()
	resp := c.Post(t, ev.EventID, ev)
	if resp.Status != http.StatusAccepted || resp.Accepted.Outcome != outcome {
		t.Fatalf("%s %s: got %d %+v %s, want 202 %s", ev.EventType, ev.EventID, resp.Status, resp.Accepted, resp.Body, outcome)
	}
}

func state(t *testing.T, s *Store) map[string]model.Order {
	t.Helper()
	st, err := s.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Orders
}

func wantOrder(t *testing.T, s *Store, id string, children ...string) {
	t.Helper()
	got, ok := state(t, s)[id]
	if children == nil {
		children = []string{}
	}
	if !ok || !got.Created || !slices.Equal(got.Children, children) {
		t.Fatalf("order %s: %+v (present %v), want created with children %v", id, got, ok, children)
	}
}

func TestChildrenBeforeParentReconciled(t *testing.T) {
	c, store := newPeer(t, defaults(t))
	expect(t, c, child("pay-1", "o1"), peer.OutcomeQuarantined)
	expect(t, c, child("cap-1", "o1"), peer.OutcomeQuarantined)
	expect(t, c, child("pay-1", "o1"), peer.OutcomeDuplicate)
	if got := state(t, store); len(got) != 0 {
		t.Fatalf("children applied before their order: %v", got)
	}
	expect(t, c, created("created-1", "o1"), peer.OutcomeApplied)
	wantOrder(t, store, "o1", "cap-1", "pay-1")
	expect(t, c, child("ship-1", "o1"), peer.OutcomeApplied)
	expect(t, c, created("created-1", "o1"), peer.OutcomeDuplicate)
	expect(t, c, child("cap-1", "o1"), peer.OutcomeDuplicate)
	wantOrder(t, store, "o1", "cap-1", "pay-1", "ship-1")
	// Lost+found is drained: nothing is left waiting.
	if n, err := store.rdb.Exists(context.Background(), store.keys("o1", "")[2]).Result(); err != nil || n != 0 {
		t.Fatalf("lost+found of o1 still there (%d, %v)", n, err)
	}
	// An order without children is an order all the same.
	expect(t, c, created("created-2", "o2"), peer.OutcomeApplied)
	wantOrder(t, store, "o2")
}

// A child whose TTL passed before its order arrived is not applied; one
// still within it is.
func TestExpiredOrphansNotApplied(t *testing.T) {
	c, store := newPeer(t, defaults(t))
	now := time.Now()
	store.now = func() time.Time { return now }
	expect(t, c, child("pay-1", "o1"), peer.OutcomeQuarantined)
	now = now.Add(store.opts.OrphanTTL / 2)
	expect(t, c, child("cap-1", "o1"), peer.OutcomeQuarantined)
	now = now.Add(store.opts.OrphanTTL/2 + time.Millisecond)
	expect(t, c, created("created-1", "o1"), peer.OutcomeApplied)
	wantOrder(t, store, "o1", "cap-1")
	// A retry of the expired orphan is a duplicate, never a late apply.
	expect(t, c, child("pay-1", "o1"), peer.OutcomeDuplicate)
	wantOrder(t, store, "o1", "cap-1")
}

// With a short TTL Redis itself drops the list; the order then finds
// nothing waiting.
func TestOrphanListExpiresInRedis(t *testing.T) {
	opts := defaults(t)
	opts.OrphanTTL = 200 * time.Millisecond
	c, store := newPeer(t, opts)
	expect(t, c, child("pay-1", "o1"), peer.OutcomeQuarantined)
	testenv.WaitFor(t, testenv.Context(t, 30*time.Second), "Redis to expire the lost+found list", func() bool {
		n, err := store.rdb.Exists(context.Background(), store.keys("o1", "")[2]).Result()
		return err == nil && n == 0
	})
	expect(t, c, created("created-1", "o1"), peer.OutcomeApplied)
	wantOrder(t, store, "o1")
}

func TestLostAndFoundBounded(t *testing.T) {
	opts := defaults(t)
	opts.OrphanBuffer = 2
	c, store := newPeer(t, opts)
	expect(t, c, child("pay-1", "o1"), peer.OutcomeQuarantined)
	expect(t, c, child("cap-1", "o1"), peer.OutcomeQuarantined)
	expect(t, c, child("ship-1", "o1"), peer.OutcomeRejected)
	expect(t, c, child("ship-1", "o1"), peer.OutcomeDuplicate)
	expect(t, c, created("created-1", "o1"), peer.OutcomeApplied)
	wantOrder(t, store, "o1", "cap-1", "pay-1")
}

func TestRejectedRequestsChangeNothing(t *testing.T) {
	c, store := newPeer(t, defaults(t))
	good, _ := json.Marshal(created("created-1", "o1"))
	c.ExpectRejected(t, append(c.BadSignatures(t, good),
		c.Signed(t, "not JSON", `[`, http.StatusBadRequest),
		c.Signed(t, "no parent_id", `{"event_id":"c1","event_type":"order.shipped","payload":{}}`, http.StatusUnprocessableEntity),
		c.Signed(t, "unknown type", `{"event_id":"c1","event_type":"order.lost","order_id":"o1","payload":{}}`, http.StatusUnprocessableEntity),
		c.Signed(t, "payload a string", `{"event_id":"c1","event_type":"order.created","order_id":"o1","payload":"x"}`, http.StatusUnprocessableEntity),
		c.Signed(t, "no payload", `{"event_id":"c1","event_type":"order.created","order_id":"o1"}`, http.StatusUnprocessableEntity),
		c.Signed(t, "id a number", `{"event_id":1,"event_type":"order.created","order_id":"o1","payload":{}}`, http.StatusUnprocessableEntity),
	))
	if got := state(t, store); len(got) != 0 {
		t.Fatalf("rejected requests applied %v", got)
	}
	expect(t, c, created("created-1", "o1"), peer.OutcomeApplied)
}

func TestRedisDownIs503(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	addr := closed.Listener.Addr().String()
	closed.Close()
	opts := defaults(t)
	store := newStore(redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}), opts, nil)
	defer store.Close()
	c := serve(t, store)
	for _, ev := range []order{child("pay-1", "o1"), created("created-1", "o1")} {
		resp := c.Post(t, ev.EventID, ev)
		if resp.Status != http.StatusServiceUnavailable || !strings.Contains(resp.Body, "unavailable") {
			t.Fatalf("%s: got %d %s, want 503", ev.EventType, resp.Status, resp.Body)
		}
	}
	if _, err := Open(context.Background(), Options{Addr: addr, OrphanTTL: time.Hour, DedupTTL: time.Hour, OrphanBuffer: 1}, nil); err == nil {
		t.Fatal("Open reached a closed port")
	}
}

// Any permutation of orders' events, with redeliveries, sent one by one
// or all at once, ends with each order created and each child applied
// once.
func TestAnyOrderReconcilesEveryChild(t *testing.T) {
	c, store := newPeer(t, defaults(t))
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		orders := rapid.IntRange(1, 3).Draw(rt, "orders")
		var events []order
		want := map[string]model.Order{}
		for o := range orders {
			id := fmt.Sprintf("r%d-o%d", run, o)
			events = append(events, created(id+"-created", id))
			var children []string
			for i := range rapid.IntRange(0, 4).Draw(rt, "children") {
				cid := fmt.Sprintf("%s-c%d", id, i)
				events = append(events, child(cid, id))
				children = append(children, cid)
			}
			slices.Sort(children)
			want[id] = model.Order{Created: true, Children: append([]string{}, children...)}
		}
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, len(events)-1), 0, 4).Draw(rt, "redelivered") {
			events = append(events, events[i])
		}
		shuffled, concurrent := rapid.Permutation(events).Draw(rt, "order"), rapid.Bool().Draw(rt, "concurrent")
		if err := peertest.SendAll(c, shuffled, func(ev order) string { return ev.EventID }, concurrent); err != nil {
			rt.Fatal(err)
		}
		got := map[string]model.Order{}
		for id, o := range state(t, store) {
			if strings.HasPrefix(id, fmt.Sprintf("r%d-", run)) {
				got[id] = o
			}
		}
		if len(got) != len(want) {
			rt.Fatalf("orders %v, want %v", got, want)
		}
		for id, o := range want {
			if g := got[id]; g.Created != o.Created || !slices.Equal(g.Children, o.Children) {
				rt.Fatalf("order %s: %+v, want %+v", id, g, o)
			}
		}
	})
}

// reset, then state, as the benchmark runner calls them.
func TestCommands(t *testing.T) {
	c, store := newPeer(t, defaults(t))
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		args = append(args, "--redis", store.opts.Addr, "--prefix", store.opts.Prefix)
		if code := peer.Main(program(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		return stdout.String()
	}
	expect(t, c, child("pay-1", "o1"), peer.OutcomeQuarantined)
	expect(t, c, created("created-1", "o1"), peer.OutcomeApplied)
	expect(t, c, child("pay-9", "o9"), peer.OutcomeQuarantined)
	var st model.State
	if err := json.Unmarshal([]byte(run("state")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Orders) != 1 || !st.Orders["o1"].Created || !slices.Equal(st.Orders["o1"].Children, []string{"pay-1"}) {
		t.Fatalf("state printed %+v", st)
	}
	run("reset")
	if n, err := store.rdb.Keys(context.Background(), globEscape(store.opts.Prefix)+"*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("after reset: keys %v (%v)", n, err)
	}
}
