package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/internal/webhook"
)

// syncBuffer is written by several services at once.
type syncBuffer = testenv.SyncBuffer

// `dev --demo` on the embedded broker shows outcomes and fills ClickHouse.
func TestDevDemoShowsOutcomesAndFillsClickHouse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, conn, out, done := devWithClickHouse(t, ctx)
	chAddr := cfg.ClickHouse.Addr
	// Its own loop rather than testenv.Poll: it also watches dev stop
	// early, and stopping dev on Poll's shorter period made the test's
	// teardown take about two minutes in some runs after the crash test.
	for {
		var rows uint64
		_ = conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.events WHERE outcome = 'applied'", cfg.ClickHouse.Database)).Scan(&rows)
		text := out.String()
		if rows > 0 && strings.Contains(text, "outcomes last") && strings.Contains(text, "outcome  applied") {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("dev stopped early: %v\n%s", err, text)
		case <-ctx.Done():
			t.Fatalf("no outcomes within the deadline; output:\n%s", text)
		case <-time.After(200 * time.Millisecond):
		}
	}
	text := out.String()
	for _, want := range []string{"webhooks:  POST http://127.0.0.1:", demoSecret, "ClickHouse at " + chAddr} {
		if !strings.Contains(text, want) {
			t.Errorf("banner lacks %q:\n%s", want, text)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev did not stop cleanly: %v", err)
	}
}

// devWithClickHouse starts `dev --demo` on the embedded broker with the
// test ClickHouse in a database of its own, dropped at the end; done
// receives dev's result once ctx ends.
func devWithClickHouse(t *testing.T, ctx context.Context) (*config.Config, driver.Conn, *syncBuffer, chan error) {
	t.Helper()
	chAddr := testenv.ClickHouse(t)
	cfg, err := config.Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Addr, cfg.Bridge.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.ClickHouse.Addr = chAddr
	cfg.ClickHouse.Database = testenv.UniqueName("dg_dev")
	cfg.ClickHouse.BatchPeriod = 100 * time.Millisecond
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- dev(ctx, cfg, devOptions{Demo: true, Out: out, Log: slog.New(slog.DiscardHandler), SummaryEvery: 200 * time.Millisecond})
	}()
	conn := openDroppedAtEnd(t, ctx, cfg.ClickHouse)
	return cfg, conn, out, done
}

func TestDisorderKeepsEveryDeliveryAndOnlyRepeats(t *testing.T) {
	rng := newTestRand()
	history := presenceHistory(rng, "u", 10, 50)
	got := disorder(rng, history, 0.5)
	count := map[string]int{}
	for _, d := range got {
		count[d.ID]++
	}
	for _, d := range history {
		if n := count[d.ID]; n < 1 || n > 2 {
			t.Fatalf("delivery %s appears %d times", d.ID, n)
		}
	}
	if len(count) != len(history) {
		t.Fatalf("%d distinct ids, want %d", len(count), len(history))
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// Streams that exist only in a config file, end to end through `dev` on
// the embedded broker: an assign stream in names other than chat's
// (comments on support tickets, agents as members) and a latest stream with
// a terminal state, webhooks in, outcomes out.
func TestDevDecidesStreamsOfAConfigFile(t *testing.T) {
	cfg, err := config.Load(testenv.CustomStreams(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Addr, cfg.Bridge.Addr = "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- dev(ctx, cfg, devOptions{NoSink: true, Out: &out, Log: testenv.Logger(t), SummaryEvery: time.Hour})
	}()
	banner := waitBanner(t, ctx, &out)
	if !strings.Contains(out.String(), "ClickHouse: off (--no-sink)") {
		t.Errorf("banner does not say the sink is off:\n%s", out.String())
	}
	brokers := banner.brokers
	post := func(stream, id, body string) {
		t.Helper()
		if err := postDemoWebhook(ctx, banner.webhooks, stream, id, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	tickets := []struct{ id, body, want string }{
		{"a1", `{"id":"a1","kind":"agent.assigned","ticket_id":"T-1","agent_id":"ana"}`, "applied/ v0"},
		{"c1", `{"id":"c1","kind":"comment.posted","ticket_id":"T-1","author_id":"ana","author_session":"s1","client_comment_id":"x1","text":"hello"}`, "applied/ v1 T-1/comment/1"},
		{"c1-retry", `{"id":"c1-retry","kind":"comment.posted","ticket_id":"T-1","author_id":"ana","author_session":"s1","client_comment_id":"x1","text":"hello"}`, "duplicate/ v1 T-1/comment/1"},
		{"c2", `{"id":"c2","kind":"comment.posted","ticket_id":"T-1","author_id":"bo","author_session":"s2","client_comment_id":"x2","text":"me too"}`, "rejected/not_member v1"},
		{"r1", `{"id":"r1","kind":"comment.seen","ticket_id":"T-1","agent_id":"ana","comment_seq":1}`, "applied/ v1"},
		{"r2", `{"id":"r2","kind":"comment.notified","ticket_id":"T-1","agent_id":"ana","comment_seq":2}`, "rejected/ahead_of_conversation v2"},
		{"u1", `{"id":"u1","kind":"agent.unassigned","ticket_id":"T-1","agent_id":"ana"}`, "applied/ v1"},
		{"c3", `{"id":"c3","kind":"comment.posted","ticket_id":"T-1","author_id":"ana","author_session":"s1","client_comment_id":"x3","text":"bye"}`, "rejected/not_member v1"},
	}
	subscriptions := []struct{ id, body, want string }{
		{"s1", `{"id":"s1","subscription_id":"sub-9","revision":1,"status":"trialing"}`, "applied/ v1"},
		{"s3", `{"id":"s3","subscription_id":"sub-9","revision":3,"status":"active"}`, "applied/ v3"},
		{"s2", `{"id":"s2","subscription_id":"sub-9","revision":2,"status":"past_due"}`, "stale/ v2"},
		{"s4", `{"id":"s4","subscription_id":"sub-9","revision":4,"status":"cancelled"}`, "applied/ v4"},
		{"s5", `{"id":"s5","subscription_id":"sub-9","revision":5,"status":"active"}`, "rejected/terminal v5"},
		{"s4", `{"id":"s4","subscription_id":"sub-9","revision":4,"status":"cancelled"}`, "duplicate/ v4"},
	}
	for stream, events := range map[string][]struct{ id, body, want string }{"tickets": tickets, "subscriptions": subscriptions} {
		for _, ev := range events {
			post(stream, ev.id, ev.body)
		}
		var want []string
		for _, ev := range events {
			want = append(want, ev.id+" "+ev.want)
		}
		if got := readOutcomes(t, ctx, brokers, naming.Prefixes{}.For(stream).Outcomes, len(want)); !slices.Equal(got, want) {
			t.Errorf("%s outcomes\n%s\nwant\n%s", stream, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev did not stop cleanly: %v", err)
	}
}

// waitBanner waits for dev's whole banner in out.
func waitBanner(t *testing.T, ctx context.Context, out *syncBuffer) devBanner {
	t.Helper()
	var banner devBanner
	testenv.WaitFor(t, ctx, "the banner", func() bool {
		banner = parseBanner(out.String())
		return banner.complete()
	})
	return banner
}

// `dev --demo` on the embedded broker, at a test's pace: within a deadline
// each shipped stream's outcomes show what its demo traffic is there to
// show, and ingest accepts every demo webhook.
func TestDevDemoShowsEveryPolicyOnTheEmbeddedBroker(t *testing.T) {
	cfg, err := config.Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Addr, cfg.Bridge.Addr = "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- dev(ctx, cfg, devOptions{Demo: true, DemoPace: 5 * time.Millisecond, NoSink: true, Out: &out,
			Log: slog.New(slog.NewTextHandler(&logs, nil)), SummaryEvery: time.Hour})
	}()
	brokers := waitBanner(t, ctx, &out).brokers
	streams := []string{"presence", "workflow", "chat", "orders"}
	var outcomeTopics []string
	for _, s := range streams {
		outcomeTopics = append(outcomeTopics, naming.Prefixes{}.For(s).Outcomes)
		if !strings.Contains(out.String(), "\n               "+s+" ") {
			t.Errorf("the banner's demo line does not name %s:\n%s", s, out.String())
		}
	}
	cl, err := kafka.NewClient(kafka.Conn{Brokers: brokers}, kgo.ConsumeTopics(outcomeTopics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// What each stream must show, and what has been seen on the way.
	shown := map[string]bool{}
	want := []string{
		"presence applied", "presence stale or duplicate",
		"workflow buffered, then applied", "workflow terminal step applied",
		"chat send applied", "chat retried send duplicate, with its message id", "chat send rejected not_member",
		"orders quarantined, then reconciled",
	}
	waiting := map[string]bool{}  // stream + event id: buffered or quarantined
	messages := map[string]bool{} // message ids of applied sends
	terminal := map[string]bool{"completed": true, "failed": true, "cancelled": true}
	missing := func() []string {
		return slices.DeleteFunc(slices.Clone(want), func(w string) bool { return shown[w] })
	}
	refused := func() {
		if text := logs.String(); strings.Contains(text, "demo webhook not accepted") {
			t.Fatalf("ingest refused demo webhooks:\n%s", lastLines(text, 20))
		}
	}
	seeing, stopSeeing := context.WithTimeout(ctx, time.Minute)
	defer stopSeeing()
	for len(missing()) > 0 {
		fetches := cl.PollFetches(seeing)
		refused()
		if seeing.Err() != nil {
			t.Fatalf("not seen within a minute: %v\nlogs:\n%s", missing(), lastLines(logs.String(), 20))
		}
		fetches.EachRecord(func(r *kgo.Record) {
			var o record.Outcome
			if err := json.Unmarshal(r.Value, &o); err != nil {
				t.Fatal(err)
			}
			id := o.Stream + " " + o.EventID
			switch s := o.Stream + " " + string(o.Outcome); s {
			case "presence applied":
				shown[s] = true
			case "presence stale", "presence duplicate":
				shown["presence stale or duplicate"] = true
			case "workflow buffered", "orders quarantined":
				waiting[id] = true
			case "workflow applied":
				var step workflowEvent
				_ = json.Unmarshal(o.Payload, &step)
				shown["workflow buffered, then applied"] = shown["workflow buffered, then applied"] || waiting[id]
				shown["workflow terminal step applied"] = shown["workflow terminal step applied"] || terminal[step.Status]
			case "orders reconciled":
				shown["orders quarantined, then reconciled"] = shown["orders quarantined, then reconciled"] || waiting[id]
			case "chat applied":
				if o.EventType == "message.send" && o.MessageID != "" {
					messages[o.MessageID] = true
					shown["chat send applied"] = true
				}
			case "chat duplicate":
				shown["chat retried send duplicate, with its message id"] = shown["chat retried send duplicate, with its message id"] || messages[o.MessageID]
			case "chat rejected":
				shown["chat send rejected not_member"] = shown["chat send rejected not_member"] || o.EventType == "message.send" && o.Reason == record.ReasonNotMember
			}
		})
	}
	refused()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("dev did not stop cleanly: %v", err)
	}
}

// lastLines is the end of text, n lines at most.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// devBanner is what tests read from dev's banner.
type devBanner struct {
	brokers []string
	// webhooks is the ingest URL a stream's name completes.
	webhooks string
	// page is the bridge's page with its demo token.
	page string
}

// parseBanner reads the banner out of dev's output so far.
func parseBanner(out string) devBanner {
	var b devBanner
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "kafka:"); ok {
			b.brokers = strings.Split(strings.TrimSpace(v), ",")
		}
		if v, ok := strings.CutPrefix(line, "webhooks:  POST "); ok {
			b.webhooks, _, _ = strings.Cut(v, "{stream}")
		}
		if v, ok := strings.CutPrefix(line, "page:"); ok {
			b.page, _, _ = strings.Cut(strings.TrimSpace(v), " ")
		}
	}
	return b
}

func (b devBanner) complete() bool { return len(b.brokers) > 0 && b.webhooks != "" && b.page != "" }

// postDemoWebhook signs body with dev's demo secret and posts it to the
// stream, waiting out the 503 of an edge that is still starting; anything
// but 202 is an error.
func postDemoWebhook(ctx context.Context, webhooks, stream, id string, body []byte) error {
	pub := &webhook.Publisher{URL: webhooks + stream, Secret: demoSecret}
	for {
		resp, err := pub.Post(ctx, id, body)
		switch {
		case err == nil && resp.Status == http.StatusAccepted:
			return nil
		case err == nil && resp.Status != http.StatusServiceUnavailable:
			return fmt.Errorf("%s %s: %d %s", stream, id, resp.Status, resp.Body)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s not accepted before the deadline (last: %v, %d %s)", stream, id, err, resp.Status, resp.Body)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readOutcomes reads n outcome records of topic from its start, each as
// "event_id outcome/reason vVERSION[ message_id]".
func readOutcomes(t *testing.T, ctx context.Context, brokers []string, topic string, n int) []string {
	t.Helper()
	var got []string
	for _, o := range testenv.ReadOutcomes(t, ctx, brokers, topic, n) {
		s := fmt.Sprintf("%s %s/%s v%d", o.EventID, o.Outcome, o.Reason, o.Version)
		if o.MessageID != "" {
			s += " " + o.MessageID
		}
		got = append(got, s)
	}
	return got
}
