package realtime_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/internal/testenv"

	"github.com/driftguard/driftguard/sinks/realtime"
)

// secret is the bridge's JWT key in the tests.
const secret = "bridge-test-secret-0123456789abcdef"

// bridgeEnv is a bridge on a broker with its streams' topics, and a
// producer of their state records.
type bridgeEnv struct {
	t       testing.TB
	ctx     context.Context
	cfg     *config.Config
	brokers []string
	cl      *kgo.Client
	url     string
	// opsURL serves the bridge's /metrics, /healthz and /readyz.
	opsURL string
	ops    *telemetry.Ops
	stop   func()
	now    func() time.Time
	// warnings are the messages the bridge logged at Warn or above.
	warnings *logRecorder
	// logged is everything the bridge logged, Debug included, as text.
	logged *testenv.SyncBuffer
}

// newBridgeEnv creates the topics of the named shipped streams (renamed
// uniquely when the broker is shared) and starts a bridge on them.
func newBridgeEnv(t testing.TB, brokers []string, change func(*config.Config), streams ...string) *bridgeEnv {
	t.Helper()
	ctx := testenv.Context(t, 3*time.Minute)
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]*config.Stream{}
	for _, name := range streams {
		s := cfg.Streams[name]
		s.Limits.Partitions = 3
		kept[name] = s
	}
	cfg.Streams = kept
	cfg.Kafka.Brokers = brokers
	cfg.Bridge.Secret = secret
	if change != nil {
		change(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e := &bridgeEnv{t: t, ctx: ctx, cfg: cfg, brokers: brokers, cl: testenv.Topics(t, ctx, cfg, brokers), now: time.Now, warnings: &logRecorder{}, logged: &testenv.SyncBuffer{}}
	t.Cleanup(e.cl.Close)
	e.start()
	return e
}

// presenceAs is a change to newBridgeEnv's configuration that renames the
// presence stream, for topics of its own on a shared broker, then applies
// change, when not nil.
func presenceAs(stream string, change func(*config.Config)) func(*config.Config) {
	return func(cfg *config.Config) {
		s := cfg.Streams["presence"]
		s.Name = stream
		cfg.Streams = map[string]*config.Stream{stream: s}
		if change != nil {
			change(cfg)
		}
	}
}

// start runs a bridge until stop or the end of the test, and waits until
// it is ready.
func (e *bridgeEnv) start() {
	e.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	opsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	e.ops = telemetry.NewOps()
	log := slog.New(slog.NewMultiHandler(testenv.Logger(e.t).Handler(), e.warnings,
		slog.NewTextHandler(e.logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	b, err := realtime.New(realtime.Options{Config: e.cfg, Logger: log, Ops: e.ops, Listener: ln, OpsListener: opsLn,
		Now: func() time.Time { return e.now() }})
	if err != nil {
		e.t.Fatal(err)
	}
	e.url = "http://" + ln.Addr().String()
	e.opsURL = "http://" + opsLn.Addr().String()
	runCtx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- service.RunAll(runCtx, b) }()
	stopped := false
	e.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("bridge: %v", err)
		}
	}
	e.t.Cleanup(e.stop)
	testenv.WaitFor(e.t, e.ctx, "the bridge ready", func() bool {
		resp, err := http.Get(e.opsURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// logRecorder is a slog handler that keeps the messages of the records
// logged at Warn or above.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// count is how many records said msg.
func (r *logRecorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// token is a token for user to read streams for an hour.
func (e *bridgeEnv) token(user string, streams ...string) string {
	e.t.Helper()
	tok, err := realtime.Sign([]byte(secret), user, streams, time.Now().Add(time.Hour))
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// publish writes a state record of key to the stream's state topic, as a
// processor does, and waits for the broker's ack.
func (e *bridgeEnv) publish(stream, key string, version int64, state string) {
	e.t.Helper()
	if err := e.cl.ProduceSync(e.ctx, stateRecord(stream, key, version, state)).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// publishAsync is publish without the wait; e.cl.Flush waits for them all.
func (e *bridgeEnv) publishAsync(stream, key string, version int64, state string) {
	e.cl.Produce(e.ctx, stateRecord(stream, key, version, state), func(_ *kgo.Record, err error) {
		if err != nil {
			e.t.Error(err)
		}
	})
}

func stateRecord(stream, key string, version int64, state string) *kgo.Record {
	st := record.State{Stream: stream, Key: key, Version: version, State: json.RawMessage(state), UpdatedAtMs: version}
	return &kgo.Record{Topic: naming.Prefixes{}.For(stream).State, Key: []byte(key), Value: record.AppendState(nil, &st)}
}

// get GETs path with the token and decodes a 200's JSON into v; it returns
// the status.
func (e *bridgeEnv) get(path, tok string, v any) int {
	e.t.Helper()
	resp, body := e.fetch(path, tok)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			e.t.Fatalf("%s: %v\n%s", path, err, body)
		}
	}
	if resp.StatusCode != http.StatusOK && v != nil {
		if p, ok := v.(*problemBody); ok {
			_ = json.Unmarshal(body, p)
		}
	}
	return resp.StatusCode
}

// fetch GETs path, with tok as a bearer token when not empty, and reads
// the whole answer.
func (e *bridgeEnv) fetch(path, tok string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, e.url+path, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// decodeProblem reads a problem body, empty for a 200.
func decodeProblem(t *testing.T, resp *http.Response) problemBody {
	t.Helper()
	var p problemBody
	if resp.StatusCode != http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatalf("%d without a problem body: %v", resp.StatusCode, err)
		}
	}
	return p
}

type problemBody struct {
	Type, Title, Detail string
	Status              int
}

type entityJSON struct {
	Key         string          `json:"key"`
	Version     int64           `json:"version"`
	State       json.RawMessage `json:"state"`
	UpdatedAtMs int64           `json:"updated_at_ms"`
	ExpiresAtMs int64           `json:"expires_at_ms"`
	Expired     bool            `json:"expired"`
}

type snapshotPage struct {
	Stream        string       `json:"stream"`
	Cursor        string       `json:"cursor"`
	Entities      []entityJSON `json:"entities"`
	NextPageToken *string      `json:"next_page_token"`
}

// snapshot takes every page of a stream's snapshot and returns the
// cursor and the entities.
func (e *bridgeEnv) snapshot(stream, tok string, limit int) (string, []entityJSON) {
	e.t.Helper()
	var all []entityJSON
	var cursor string
	path := fmt.Sprintf("/v1/streams/%s/snapshot?limit=%d", stream, limit)
	for {
		var page snapshotPage
		if status := e.get(path, tok, &page); status != http.StatusOK {
			e.t.Fatalf("snapshot %s: %d", path, status)
		}
		if cursor != "" && page.Cursor != cursor {
			e.t.Fatalf("page cursor %s, first page's %s", page.Cursor, cursor)
		}
		cursor = page.Cursor
		all = append(all, page.Entities...)
		if page.NextPageToken == nil {
			return cursor, all
		}
		path = fmt.Sprintf("/v1/streams/%s/snapshot?limit=%d&page_token=%s", stream, limit, *page.NextPageToken)
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, event string
	data      string
}

// sse is one open events connection.
type sse struct {
	resp   *http.Response
	events chan sseEvent
	done   chan error
}

// open connects to a stream's events from cursor; status is the answer's.
func (e *bridgeEnv) open(ctx context.Context, stream, tok, cursor, key string) (*sse, int) {
	e.t.Helper()
	path := fmt.Sprintf("%s/v1/streams/%s/events?cursor=%s", e.url, stream, cursor)
	if key != "" {
		path += "&key=" + key
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, resp.StatusCode
	}
	s := &sse{resp: resp, events: make(chan sseEvent, 1<<16), done: make(chan error, 1)}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
		s.done <- sc.Err()
	}()
	return s, http.StatusOK
}

func (s *sse) close() { s.resp.Body.Close() }

// next waits for the next event, failing the test after d.
func (s *sse) next(t *testing.T, d time.Duration) (sseEvent, bool) {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		return ev, ok
	case <-time.After(d):
		t.Fatalf("no event within %s", d)
		return sseEvent{}, false
	}
}
