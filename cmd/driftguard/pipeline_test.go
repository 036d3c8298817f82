package main

// The whole pipeline in one process against real services: signed webhooks
// through ingest, the presence processor, and the ClickHouse sink, checked
// in ClickHouse.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
	"github.com/driftguard/driftguard/processors"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// On the embedded broker and on the real one: only the address changes.
func TestPresenceEndToEnd(t *testing.T) {
	testenv.OnBothBrokers(t, runPresence)
}

// pipeline is ingest, processors and the ClickHouse sink for one uniquely
// named copy of the presence stream, in one process.
type pipeline struct {
	cfg    *config.Config
	stream string
	url    string
	ch     driver.Conn
}

func startPipeline(t *testing.T, brokers []string) *pipeline {
	t.Helper()
	chAddr := testenv.ClickHouse(t)
	ctx := testenv.Context(t, 5*time.Minute)
	// A fresh stream name per test keeps topics apart on a shared broker; it
	// also proves that a stream is a catalogue entry, not code.
	stream := testenv.UniqueName("presence")
	s := testenv.Shipped(t, "presence")
	s.Name = stream
	s.Signature.Secrets = []string{testSecret}
	s.Limits.Partitions = 3
	cfg := testenv.OnlyStream(t, s)
	cfg.Kafka.Brokers = brokers
	cfg.ClickHouse.Addr = chAddr
	cfg.ClickHouse.Database = testenv.UniqueName("dg_test")
	cfg.ClickHouse.BatchPeriod = 100 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	conn, cl := prepare(t, ctx, cfg, brokers)
	cl.Close()
	return runPipeline(t, ctx, cfg, conn)
}

// runPipeline runs ingest, the processors and the sink of cfg's one stream
// into conn's database until the test ends, and waits until they are
// ready.
func runPipeline(t *testing.T, ctx context.Context, cfg *config.Config, conn driver.Conn) *pipeline {
	t.Helper()
	brokers := cfg.Kafka.Brokers
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := testenv.Logger(t)
	ops := telemetry.NewOps()
	runServices(t, ctx, "pipeline",
		ingest.NewService(ingest.ServiceOptions{Config: cfg, Brokers: brokers, Logger: log, Ops: ops, Listener: ln, OpsOnListener: true}),
		processors.NewService(processors.ServiceOptions{Config: cfg, Brokers: brokers, Logger: log, Ops: ops, InMemoryTables: true}),
		sinkch.New(sinkch.Options{Config: cfg, Brokers: brokers, Conn: conn, Logger: log, Ops: ops}))
	p := &pipeline{cfg: cfg, stream: cfg.StreamNames()[0], url: "http://" + ln.Addr().String(), ch: conn}
	p.waitReady(t, ctx)
	return p
}

// runServices runs svcs until the test ends, and fails the test if they
// stopped with an error.
func runServices(t testing.TB, ctx context.Context, what string, svcs ...service.Service) {
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- service.RunAll(runCtx, svcs...) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}

// openDroppedAtEnd connects to the test's ClickHouse database, and drops
// the database when the test ends.
func openDroppedAtEnd(t testing.TB, ctx context.Context, ch config.ClickHouse) driver.Conn {
	t.Helper()
	conn, err := sinkch.Open(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+ch.Database)
		conn.Close()
	})
	return conn
}

// prepare gives the test a migrated ClickHouse database of its own, dropped
// at the end, and the configured streams' topics.
func prepare(t testing.TB, ctx context.Context, cfg *config.Config, brokers []string) (driver.Conn, *kgo.Client) {
	t.Helper()
	conn := openDroppedAtEnd(t, ctx, cfg.ClickHouse)
	if _, err := sinkch.Migrate(ctx, conn, cfg.ClickHouse, nil); err != nil {
		t.Fatal(err)
	}
	return conn, testenv.Topics(t, ctx, cfg, brokers)
}

func (p *pipeline) waitReady(t *testing.T, ctx context.Context) {
	t.Helper()
	var err error
	if !testenv.Poll(ctx, func() bool {
		var resp *http.Response
		if resp, err = http.Get(p.url + "/readyz"); err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("pipeline not ready: %v", err)
	}
}

// send posts deliveries in order and fails on anything but 202.
func (p *pipeline) send(t *testing.T, ctx context.Context, ds []delivery) {
	pub := &webhook.Publisher{URL: p.url + "/v1/webhooks/" + p.stream, Secret: testSecret}
	for _, d := range ds {
		resp, err := pub.Post(ctx, d.ID, d.Body)
		if err != nil || resp.Status != http.StatusAccepted {
			t.Errorf("delivery %s: status %d err %v body %s", d.ID, resp.Status, err, resp.Body)
			return
		}
	}
}

// expectedOutcomes is an independent model of the latest policy over one
// key's deliveries in arrival order.
func expectedOutcomes(ds []delivery) []record.Result {
	seen := map[string]bool{}
	var last int64 = -1
	out := make([]record.Result, len(ds))
	for i, d := range ds {
		switch {
		case seen[d.ID]:
			out[i] = record.Duplicate
		case d.Version <= last:
			out[i] = record.Stale
		default:
			out[i] = record.Applied
			last = d.Version
		}
		seen[d.ID] = true
	}
	return out
}

func runPresence(t *testing.T, brokers []string) {
	p := startPipeline(t, brokers)
	ctx := testenv.Context(t, 3*time.Minute)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))

	// The seed scenario for one user: 841, 843, 842, 843 (new id), 843
	// (same id), 844.
	mk := func(id string, v int64) delivery {
		return delivery{ID: id, Key: "alice", Version: v, Body: testenv.Presence{EventID: id, User: "alice", Version: v, Timestamp: 1_700_000_000 + v}.Body()}
	}
	first843 := mk("alice-843", 843)
	byUser := map[string][]delivery{
		"alice": {mk("alice-841", 841), first843, mk("alice-842", 842), mk("alice-843-retry", 843), first843, mk("alice-844", 844)},
	}
	// 200 more users: a version history each, shuffled and partly duplicated.
	for u := range 200 {
		user := fmt.Sprintf("user-%03d", u)
		history := presenceHistory(rng, user, rng.Int64N(1000), 1+rng.IntN(8))
		byUser[user] = disorder(rng, history, 0.4)
	}
	total := 0
	var wg sync.WaitGroup
	users := make(chan string)
	for range 8 {
		wg.Go(func() {
			for user := range users {
				p.send(t, ctx, byUser[user]) // one user's deliveries in order
			}
		})
	}
	for user, ds := range byUser {
		total += len(ds)
		users <- user
	}
	close(users)
	wg.Wait()
	if t.Failed() {
		return
	}

	db := p.cfg.ClickHouse.Database
	testenv.WaitFor(t, ctx, fmt.Sprintf("%d events rows", total), func() bool {
		var n uint64
		_ = p.ch.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.events WHERE stream = '%s'", db, p.stream)).Scan(&n)
		return n >= uint64(total)
	})

	// One outcome per delivery, in arrival order per key, as the model says.
	rows, err := p.ch.Query(ctx, fmt.Sprintf(
		"SELECT entity_key, event_id, outcome, version FROM %s.events WHERE stream = '%s' ORDER BY entity_key, input_offset", db, p.stream))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	rowCount := 0
	for rows.Next() {
		var key, id, outcome string
		var version int64
		if err := rows.Scan(&key, &id, &outcome, &version); err != nil {
			t.Fatal(err)
		}
		got[key] = append(got[key], id+":"+outcome)
		rowCount++
	}
	rows.Close()
	if rowCount != total {
		t.Fatalf("events holds %d rows for %d deliveries", rowCount, total)
	}
	for user, ds := range byUser {
		want := expectedOutcomes(ds)
		if len(got[user]) != len(ds) {
			t.Errorf("%s: %d outcomes for %d deliveries", user, len(got[user]), len(ds))
			continue
		}
		for i, d := range ds {
			if w := d.ID + ":" + string(want[i]); got[user][i] != w {
				t.Errorf("%s delivery %d: got %s, want %s (all: %v)", user, i, got[user][i], w, got[user])
				break
			}
		}
	}
	// goka's producer (sarama with partition.GokaHasher) put every outcome
	// on the partition where franz-go's ingest put its webhook.
	var misplaced uint64
	if err := p.ch.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.events WHERE stream = '%s' AND `partition` != input_partition", db, p.stream)).Scan(&misplaced); err != nil {
		t.Fatal(err)
	}
	if misplaced != 0 {
		t.Errorf("%d outcomes landed on another partition than their input", misplaced)
	}
	if got["alice"][2] != "alice-842:stale" || got["alice"][4] != "alice-843:duplicate" {
		t.Errorf("seed scenario outcomes: %v", got["alice"])
	}

	// entity_state FINAL equals the clean ordered replay: the highest version.
	// The state topic reaches ClickHouse in batches of its own, after the
	// outcomes perhaps: wait for every user's final version, not a count.
	finals := map[string]delivery{}
	for user, ds := range byUser {
		final := ds[0]
		for _, d := range ds {
			if d.Version > final.Version {
				final = d
			}
		}
		finals[user] = final
	}
	states := map[string]string{}
	versions := map[string]uint64{}
	testenv.WaitFor(t, ctx, "entity_state at every user's highest version", func() bool {
		rows, err := p.ch.Query(ctx, fmt.Sprintf("SELECT entity_key, version, state FROM %s.entity_state FINAL WHERE stream = '%s'", db, p.stream))
		if err != nil {
			return false
		}
		defer rows.Close()
		for rows.Next() {
			var key, state string
			var version uint64
			if err := rows.Scan(&key, &version, &state); err != nil {
				t.Fatal(err)
			}
			states[key], versions[key] = state, version
		}
		for user, final := range finals {
			if versions[user] != uint64(final.Version) {
				return false
			}
		}
		return true
	})
	for user, final := range finals {
		if versions[user] != uint64(final.Version) || !testenv.SameJSON([]byte(states[user]), final.Body) {
			t.Errorf("%s: entity_state version %d state %s; ordered replay gives %d %s", user, versions[user], states[user], final.Version, final.Body)
		}
	}
	if versions["alice"] != 844 {
		t.Errorf("alice ends at version %d, want 844", versions["alice"])
	}
}
