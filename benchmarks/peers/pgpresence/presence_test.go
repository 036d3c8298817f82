package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/benchmarks/peers/peer"
	"github.com/driftguard/driftguard/benchmarks/peers/peertest"
	"github.com/driftguard/driftguard/internal/config"
)

func TestMain(m *testing.M) { peertest.Main(m) }

var modes = []string{ModeStatement, ModeTransaction}

// schemaDSN returns a DSN whose tables live in a schema of their own,
// dropped after the test, on the shared server.
func schemaDSN(t testing.TB) string {
	t.Helper()
	dsn := peertest.Postgres(t)
	name := fmt.Sprintf("peer_%d", time.Now().UnixNano())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", peertest.EnvPostgres, err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// newPeer serves the peer over HTTP on a schema of its own and returns a
// client signing as the catalogue's presence scheme does, and the store.
func newPeer(t *testing.T, mode, scheme string) (*peertest.Client, *Store) {
	t.Helper()
	store, err := Open(context.Background(), Options{DSN: schemaDSN(t), MaxConns: 8, Mode: mode}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return serve(t, store, scheme), store
}

func serve(t testing.TB, store *Store, scheme string) *peertest.Client {
	t.Helper()
	edge, c := peertest.Edge(t, "presence", scheme)
	return peertest.Serve(t, edge, store.Handler(edge), c)
}

type presence struct {
	EventID        string `json:"event_id"`
	UserID         string `json:"user_id"`
	Presence       string `json:"presence"`
	SequenceNumber int64  `json:"sequence_number"`
	Timestamp      int64  `json:"timestamp"`
}

func event(id, user, p string, seq int64) presence {
	return presence{EventID: id, UserID: user, Presence: p, SequenceNumber: seq, Timestamp: 1_700_000_000 + seq}
}

func post(t *testing.T, c *peertest.Client, ev presence) peertest.Response {
	t.Helper()
	return c.Post(t, ev.EventID, ev)
}

func state(t *testing.T, s *Store) model.State {
	t.Helper()
	st, err := s.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestStaleAndDuplicatesDropped(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			c, store := newPeer(t, mode, "")
			steps := []struct {
				ev      presence
				outcome string
			}{
				{event("e2", "u1", "BUSY", 2), peer.OutcomeApplied},
				{event("e1", "u1", "ONLINE", 1), peer.OutcomeStale},
				{event("e2", "u1", "BUSY", 2), peer.OutcomeDuplicate},
				// A new id at the applied version is stale, not a second apply.
				{event("e2b", "u1", "AWAY", 2), peer.OutcomeStale},
				{event("e3", "u1", "OFFLINE", 3), peer.OutcomeApplied},
				// A retry of a stale event is a duplicate: its id was claimed.
				{event("e1", "u1", "ONLINE", 1), peer.OutcomeDuplicate},
				{event("f1", "u2", "AWAY", 7), peer.OutcomeApplied},
			}
			for i, step := range steps {
				resp := post(t, c, step.ev)
				if resp.Status != http.StatusAccepted || resp.Accepted.Outcome != step.outcome || resp.Accepted.EventID != step.ev.EventID {
					t.Fatalf("step %d (%s seq %d): got %d %+v, want 202 %s", i, step.ev.EventID, step.ev.SequenceNumber, resp.Status, resp.Accepted, step.outcome)
				}
			}
			want := map[string]model.Presence{"u1": {Presence: "OFFLINE", SequenceNumber: 3}, "u2": {Presence: "AWAY", SequenceNumber: 7}}
			if got := state(t, store).Presence; !equalPresence(got, want) {
				t.Fatalf("state %v, want %v", got, want)
			}
			var claims int
			if err := store.pool.QueryRow(context.Background(), `SELECT count(*) FROM processed_webhook_events`).Scan(&claims); err != nil || claims != 5 {
				t.Fatalf("%d claimed event ids (%v), want the 5 distinct ones", claims, err)
			}
		})
	}
}

func equalPresence(a, b map[string]model.Presence) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestRejectedRequestsChangeNothing(t *testing.T) {
	c, store := newPeer(t, ModeStatement, "")
	good, _ := json.Marshal(event("e1", "u1", "ONLINE", 1))
	c.ExpectRejected(t, append(c.BadSignatures(t, good),
		c.Signed(t, "not JSON", `{"event_id":`, http.StatusBadRequest),
		c.Signed(t, "missing fields", `{"event_id":"e1"}`, http.StatusUnprocessableEntity),
		c.Signed(t, "wrong type", `{"event_id":"e1","user_id":"u1","presence":"ONLINE","sequence_number":"1","timestamp":1}`, http.StatusUnprocessableEntity),
		c.Signed(t, "unknown presence", `{"event_id":"e1","user_id":"u1","presence":"ASLEEP","sequence_number":1,"timestamp":1}`, http.StatusUnprocessableEntity),
		c.Signed(t, "negative sequence", `{"event_id":"e1","user_id":"u1","presence":"AWAY","sequence_number":-1,"timestamp":1}`, http.StatusUnprocessableEntity),
	))
	get, err := http.Get(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	get.Body.Close()
	if get.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", get.StatusCode)
	}
	if got := state(t, store).Presence; len(got) != 0 {
		t.Fatalf("rejected requests applied %v", got)
	}
	// The same event, signed, still applies: nothing was claimed before.
	if resp := post(t, c, event("e1", "u1", "ONLINE", 1)); resp.Accepted.Outcome != peer.OutcomeApplied {
		t.Fatalf("after the rejections: %d %+v", resp.Status, resp.Accepted)
	}
}

// The presence seed signed with X-Signature: hex HMAC-SHA256 of the body.
func TestSeedSignatureScheme(t *testing.T) {
	c, store := newPeer(t, ModeStatement, config.SchemeHMACSHA256Hex)
	if resp := post(t, c, event("e1", "u1", "AWAY", 4)); resp.Accepted.Outcome != peer.OutcomeApplied {
		t.Fatalf("X-Signature webhook: %d %+v", resp.Status, resp.Accepted)
	}
	other := *c
	other.Secret = peertest.OtherBodySecret
	if resp := post(t, &other, event("e2", "u1", "BUSY", 5)); resp.Status != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %d, want 401", resp.Status)
	}
	if got := state(t, store).Presence["u1"]; got != (model.Presence{Presence: "AWAY", SequenceNumber: 4}) {
		t.Fatalf("state %+v", got)
	}
}

func TestDatabaseDownIs503(t *testing.T) {
	// A port nothing listens on: the pool connects lazily, so every
	// webhook meets the failure.
	ln := httptest.NewServer(http.NotFoundHandler())
	addr := ln.Listener.Addr().String()
	ln.Close()
	store, err := Open(context.Background(), Options{DSN: "postgres://postgres@" + addr + "/postgres?connect_timeout=2", Mode: ModeStatement}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := serve(t, store, "")
	resp := post(t, c, event("e1", "u1", "ONLINE", 1))
	if resp.Status != http.StatusServiceUnavailable || !strings.Contains(resp.Body, "unavailable") {
		t.Fatalf("got %d %s, want 503", resp.Status, resp.Body)
	}
}

// Any permutation of a user's history, with redeliveries, sent one by one
// or all at once, ends at the user's highest sequence_number.
func TestAnyOrderEndsAtHighestSequence(t *testing.T) {
	dsn := schemaDSN(t)
	clients := map[string]*peertest.Client{}
	stores := map[string]*Store{}
	for _, mode := range modes {
		store, err := Open(context.Background(), Options{DSN: dsn, MaxConns: 8, Mode: mode}, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		stores[mode], clients[mode] = store, serve(t, store, "")
	}
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		mode := rapid.SampledFrom(modes).Draw(rt, "mode")
		users := rapid.IntRange(1, 3).Draw(rt, "users")
		var history []presence
		want := map[string]model.Presence{}
		for u := range users {
			user := fmt.Sprintf("r%d-u%d", run, u)
			// Distinct sequences, so the highest one names one presence.
			seqs := rapid.SliceOfNDistinct(rapid.Int64Range(0, 50), 1, 8, rapid.ID).Draw(rt, "seqs")
			for i, seq := range seqs {
				p := rapid.SampledFrom([]string{"ONLINE", "BUSY", "AWAY", "OFFLINE"}).Draw(rt, "presence")
				history = append(history, event(fmt.Sprintf("%s-e%d", user, i), user, p, seq))
				if cur, ok := want[user]; !ok || seq > cur.SequenceNumber {
					want[user] = model.Presence{Presence: p, SequenceNumber: seq}
				}
			}
		}
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, len(history)-1), 0, 4).Draw(rt, "redelivered") {
			history = append(history, history[i])
		}
		order := rapid.Permutation(history).Draw(rt, "order")
		if err := peertest.SendAll(clients[mode], order, func(ev presence) string { return ev.EventID }, rapid.Bool().Draw(rt, "concurrent")); err != nil {
			rt.Fatal(err)
		}
		got := map[string]model.Presence{}
		for user, p := range state(t, stores[mode]).Presence {
			if strings.HasPrefix(user, fmt.Sprintf("r%d-", run)) {
				got[user] = p
			}
		}
		if !equalPresence(got, want) {
			rt.Fatalf("state %v, want %v", got, want)
		}
	})
}

// reset, then state, as the benchmark runner calls them.
func TestCommands(t *testing.T) {
	dsn := schemaDSN(t)
	run := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := peer.Main(program(), append(args, "--dsn", dsn), &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		return stdout.String()
	}
	run("reset")
	store, err := Open(context.Background(), Options{DSN: dsn, Mode: ModeStatement}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := serve(t, store, "")
	post(t, c, event("e1", "u1", "BUSY", 9))
	var st model.State
	if err := json.Unmarshal([]byte(run("state")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Presence["u1"] != (model.Presence{Presence: "BUSY", SequenceNumber: 9}) || len(st.Presence) != 1 {
		t.Fatalf("state printed %+v", st)
	}
	run("reset")
	if got := state(t, store).Presence; len(got) != 0 {
		t.Fatalf("after reset: %v", got)
	}
	var stderr bytes.Buffer
	if code := peer.Main(program(), []string{"replay"}, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), `unknown command "replay"`) {
		t.Fatalf("unknown command: exit %d, %s", code, stderr.String())
	}
}
