package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// envScreenshots names a folder for the browser test's screenshots; without
// it they go to a temp folder that the test removes.
const envScreenshots = "DRIFTGUARD_TEST_SCREENSHOTS"

// pageSecret is the bridges' JWT key in the browser test.
const pageSecret = "page-test-bridge-secret-0123456789abcdef"

// The page in a real browser. `driftguard dev --no-sink` decides webhooks
// of all four streams; a second, standalone `driftguard bridge` reads dev's
// Kafka and serves the page to a headless Chromium. A plain client follows
// dev's own bridge, never disconnected: the page must show what it holds.
// The page's bridge is killed with SIGKILL while webhooks keep coming and
// started again on the same port: the page reconnects, resumes from its
// cursor, and shows the same rows as the client (keys, versions, statuses)
// and each chat message once, in order, brought by the sync call after
// each connect. A second tab shares the first
// one's connections and takes over when it closes. With nothing sent, a
// member's claim expires and the page turns the row gray and `unknown` by
// itself. Leaving the page and coming back resumes every stream from
// sessionStorage, and a cursor the bridge cannot resume (410) makes a new
// snapshot. A token for presence alone shows the other streams refused.
func TestPageInARealBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	start := time.Now()
	step := func(what string) { t.Logf("%5.1fs %s", time.Since(start).Seconds(), what) }
	bin := buildDriftguard(t)
	ctx := testenv.Context(t, 8*time.Minute)
	shots := screenshotsDir(t)
	banner, devBridge := startDevForPage(t, ctx, bin)
	t.Logf("dev: kafka %s, webhooks %s", strings.Join(banner.brokers, ","), banner.webhooks)

	pageAddr := freeLoopbackAddr(t)
	startBridge := func() *exec.Cmd {
		cmd := startDriftguard(t, bin, []string{"bridge"}, "DRIFTGUARD_KAFKA_BROKERS="+strings.Join(banner.brokers, ","),
			"DRIFTGUARD_BRIDGE_ADDR="+pageAddr, "DRIFTGUARD_BRIDGE_SECRET="+pageSecret,
			"DRIFTGUARD_TELEMETRY_ADDR="+bridgeOpsAddr(t, "http://"+pageAddr))
		waitReady(t, ctx, "the page's bridge", "http://"+pageAddr)
		return cmd
	}
	bridge := startBridge()

	tok, err := realtime.Sign([]byte(pageSecret), pageUser, []string{"*"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ref := newBridgeReader(ctx, "http://"+devBridge, tok)
	for _, stream := range pageStreams {
		ref.follow(t, stream)
	}

	send := newPageTraffic(banner.webhooks)
	for _, w := range send.opening() {
		if err := w.post(ctx); err != nil {
			t.Fatal(err)
		}
	}

	chrome := openBrowser(t, ctx, chromium)
	pageURL := "http://" + pageAddr + "/#token=" + tok
	b := chrome.open(pageURL)
	b.waitSame(ctx, ref, "the page to show the opening webhooks")
	if got := b.summary().Streams["chat"].keys(); !slices.Equal(got, []string{"team-room"}) {
		t.Errorf("the page shows conversations %v, want only team-room, the one %q is a member of", got, pageUser)
	}
	b.screenshot(shots, "1-live.png")
	step("the page shows the opening webhooks")

	// Webhooks keep coming while the page's bridge is down and after it is
	// back, until the page is live again on every stream.
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	traffic := make(chan error, 1)
	go func() { traffic <- send.run(trafficCtx) }()
	waitChanges := func(what string, n int) {
		t.Helper()
		want := ref.changes() + n
		if !testenv.Poll(ctx, func() bool { return ref.changes() >= want }) {
			t.Fatalf("%s: the reference client saw %d changes, want %d", what, ref.changes(), want)
		}
	}
	waitChanges("before the kill", 10)
	sigkill(t, bridge)
	step("the page's bridge killed")
	waitChanges("while the page's bridge is down", 30)
	b.waitFor(ctx, "the page to notice its bridge is gone", func(s pageSummary) bool {
		return slices.ContainsFunc(pageStreams, func(stream string) bool { return s.Streams[stream].Conn == "retrying" })
	})
	b.screenshot(shots, "2-reconnecting.png")
	bridge = startBridge()
	step("the page's bridge started again")
	waitChanges("after the restart", 10)
	b.waitFor(ctx, "the page live again on every stream", pageSummary.allLive)
	stopTraffic()
	if err := <-traffic; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d webhooks sent in all", send.sent)
	// The last messages reach the page once their transaction commits.
	b.waitFor(ctx, "every message sent on the page", func(s pageSummary) bool { return len(s.Messages) >= 3+send.msgs })
	got := b.waitSame(ctx, ref, "the page to converge with the client that never disconnected")
	for _, stream := range pageStreams {
		if s := got.Streams[stream]; s.Snapshots != 1 || s.Resumes < 1 {
			t.Errorf("%s: %d snapshots and %d resumes, want one snapshot and then resumes from the cursor", stream, s.Snapshots, s.Resumes)
		}
	}
	// The chat brought its conversations up to date with the sync call
	// after the first connect and after the reconnect.
	if s := got.Streams["chat"]; s.Syncs < 2 {
		t.Errorf("the chat applied %d sync answers, want one after each connect", s.Syncs)
	}
	// Each message once, in order, retries included: the opening's three
	// and the flow's.
	if want := 3 + send.msgs; len(got.Messages) != want {
		t.Errorf("the page shows %d messages of %s, want %d:\n%s", len(got.Messages), pageConversation, want, messagesText(got.Messages))
	}
	for i, m := range got.Messages {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d of the page has conversation_seq %d:\n%s", i, m.Seq, messagesText(got.Messages))
		}
	}
	b.screenshot(shots, "3-converged.png")
	step("the page converged with the client")

	// A second tab shares the first one's connections (browsers open six
	// per host, a tab needs four): the bridge has one client per stream.
	// Closing the first hands the feeds to the second, which resumes from
	// the cursor it was told.
	b2 := chrome.open(pageURL)
	shared := b2.waitSame(ctx, ref, "a second tab to show what the first does")
	if shared.Tab != "follows" || b.summary().Tab != "leads" {
		t.Errorf("the second tab %s, the first %s; want the second to follow the first", shared.Tab, b.summary().Tab)
	}
	waitClients(t, ctx, "http://"+pageAddr, "one client per stream for two tabs")
	b.close()
	b = b2
	b.waitFor(ctx, "the second tab to lead and resume every stream itself", func(s pageSummary) bool {
		return s.Tab == "leads" && s.allLive() && !slices.ContainsFunc(pageStreams, func(stream string) bool {
			return s.Streams[stream].Resumes <= shared.Streams[stream].Resumes
		})
	})
	waitClients(t, ctx, "http://"+pageAddr, "one client per stream once the first tab closed")
	b.waitSame(ctx, ref, "the second tab on its own")
	step("a second tab shared the first one's connections, then took over")

	// A claim that expires soon, then nothing: the page must turn the row
	// gray by itself, with no new event.
	expiring := send.expiring(time.Now().Add(20 * time.Second))
	if err := expiring.post(ctx); err != nil {
		t.Fatal(err)
	}
	var before pageSummary
	b.waitFor(ctx, "the expiring member shown online", func(s pageSummary) bool {
		before = s
		r, ok := s.Streams["presence"].row(expiringMember)
		return ok && r.Status == "ONLINE"
	})
	after := b.waitFor(ctx, "the expiring member shown unknown", func(s pageSummary) bool {
		r, _ := s.Streams["presence"].row(expiringMember)
		return r.Status == "unknown"
	})
	r0, _ := before.Streams["presence"].row(expiringMember)
	r1, _ := after.Streams["presence"].row(expiringMember)
	if r1.Version != r0.Version || after.Streams["presence"].Changes != before.Streams["presence"].Changes {
		t.Errorf("the row turned unknown with a new event: version %d → %d, presence changes %d → %d",
			r0.Version, r1.Version, before.Streams["presence"].Changes, after.Streams["presence"].Changes)
	}
	if !strings.Contains(r1.Dot, "dot-unknown") || r1.Text != "unknown" {
		t.Errorf("the expired row shows a %q dot and the text %q, want the gray dot-unknown and \"unknown\"", r1.Dot, r1.Text)
	}
	b.waitSame(ctx, ref, "the page to agree with the client once the claim expired")
	b.screenshot(shots, "4-expired.png")
	step("the expired claim shown unknown")

	// Leaving the page keeps each stream's cursor, with the state it covers,
	// in sessionStorage; coming back resumes from it. A cursor the bridge
	// cannot resume (forged here, on a page of the same origin) is 410
	// Gone: that stream takes a new snapshot.
	if err := chromedp.Do(b.ctx, chromedp.Navigate("http://"+pageAddr+"/style.css")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[chromedp.Void](forgeCursorJS)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(b.ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatal(err)
	}
	b.waitFor(ctx, "every stream live again after coming back", pageSummary.allLive)
	back := b.waitSame(ctx, ref, "the page to show the streams again after coming back")
	for _, stream := range pageStreams {
		s := back.Streams[stream]
		want := [2]int{0, 1} // no snapshot, one resume
		if stream == "workflow" {
			want = [2]int{1, 0}
		}
		if got := [2]int{s.Snapshots, s.Resumes}; got != want {
			t.Errorf("%s after coming back: %d snapshots and %d resumes, want %d and %d", stream, s.Snapshots, s.Resumes, want[0], want[1])
		}
	}
	step("the page resumed after coming back")

	// A token that names only presence: the other streams say so.
	narrow, err := realtime.Sign([]byte(pageSecret), "zoe", []string{"presence"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(b.ctx, chromedp.Navigate("about:blank"), chromedp.Navigate("http://"+pageAddr+"/#token="+narrow)); err != nil {
		t.Fatal(err)
	}
	b.waitFor(ctx, "a page for presence only", func(s pageSummary) bool {
		return s.Streams["presence"].Conn == "live" && len(s.Streams["presence"].Rows) == len(ref.rows(0)["presence"]) &&
			!slices.ContainsFunc(pageStreams[1:], func(stream string) bool { return s.Streams[stream].Conn != "refused" })
	})
	step("a page for presence only")
	b.checkClean()
	ref.checkConnected(t)
	t.Logf("screenshots in %s", shots)
}

var pageStreams = []string{"presence", "workflow", "chat", "orders"}

// screenshotsDir is where the browser tests' screenshots go:
// envScreenshots' folder, else a temp folder the test removes.
func screenshotsDir(t *testing.T) string {
	t.Helper()
	shots := os.Getenv(envScreenshots)
	if shots == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return shots
}

// startDevForPage runs `driftguard dev --no-sink` with the page tests'
// bridge key, and returns its banner and its bridge's address once the
// bridge is ready.
func startDevForPage(t *testing.T, ctx context.Context, bin string) (devBanner, string) {
	t.Helper()
	var devOut syncBuffer
	bridge, edge := freeLoopbackAddr(t), freeLoopbackAddr(t)
	// dev serves every component's operational endpoints with ingest's.
	bridgeOps.Store("http://"+bridge, "http://"+edge)
	startDriftguardTo(t, &devOut, bin, []string{"dev", "--no-sink"},
		"DRIFTGUARD_HTTP_ADDR="+edge, "DRIFTGUARD_BRIDGE_ADDR="+bridge,
		"DRIFTGUARD_BRIDGE_SECRET="+pageSecret)
	var banner devBanner
	if !testenv.Poll(ctx, func() bool { banner = parseBanner(devOut.String()); return banner.complete() }) {
		t.Fatalf("no banner from dev:\n%s", devOut.String())
	}
	waitReady(t, ctx, "dev's bridge", "http://"+bridge)
	return banner, bridge
}

// The conversation whose messages the page and the client compare.
const pageConversation = "team-room"

// expiringMember's claim expires while nothing is sent.
const expiringMember = "erin"

// bridgeOps maps a bridge's public base URL to the one of its
// operational endpoints (/metrics, /healthz, /readyz), which the bridge
// serves apart, on telemetry.addr.
var bridgeOps sync.Map

// bridgeOpsAddr is a free loopback address for the operational endpoints
// of the bridge at base, recorded for opsOf.
func bridgeOpsAddr(t testing.TB, base string) string {
	addr := freeLoopbackAddr(t)
	bridgeOps.Store(base, "http://"+addr)
	return addr
}

// bridgeOpsListener is bridgeOpsAddr as a listener, for a bridge run in
// the test's process.
func bridgeOpsListener(t testing.TB, base string) net.Listener {
	ln := listen(t)
	bridgeOps.Store(base, "http://"+ln.Addr().String())
	return ln
}

// opsOf is where the component at base serves its operational
// endpoints: a bridge's apart, any other's with its public ones.
func opsOf(base string) string {
	if ops, ok := bridgeOps.Load(base); ok {
		return ops.(string)
	}
	return base
}

func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitClients waits until the bridge at base counts one client of each
// stream's events.
func waitClients(t *testing.T, ctx context.Context, base, what string) {
	t.Helper()
	var last string
	if !testenv.Poll(ctx, func() bool {
		last = ""
		resp, err := http.Get(opsOf(base) + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		got := map[string]string{}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), `driftguard_bridge_clients{stream="`); ok {
				stream, value, _ := strings.Cut(rest, `"} `)
				got[stream] = value
				last += sc.Text() + "\n"
			}
		}
		return !slices.ContainsFunc(pageStreams, func(stream string) bool { return got[stream] != "1" })
	}) {
		t.Fatalf("timed out waiting for %s; the bridge counts:\n%s", what, last)
	}
}

// waitReady waits for a component's /readyz to answer 200.
func waitReady(t testing.TB, ctx context.Context, what, base string) {
	t.Helper()
	testenv.WaitFor(t, ctx, what+" ready", func() bool {
		resp, err := http.Get(opsOf(base) + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// forgeCursorJS replaces the workflow cursor the page keeps for the demo
// user with one the bridge cannot parse.
const forgeCursorJS = `(() => {
  const key = 'driftguard:v1:' + '` + pageUser + `' + ':workflow';
  const kept = JSON.parse(sessionStorage.getItem(key));
  kept.cursor = 'AQ';
  sessionStorage.setItem(key, JSON.stringify(kept));
})()`

// ---- what the page shows, and what it should ----

// pageRow is one row: an entity, or a device under a member.
type pageRow struct {
	Key     string    `json:"key"`
	Version int64     `json:"version"`
	Status  string    `json:"status"`
	Devices []pageRow `json:"devices"`
	// Dot and Text are the presence rows' dot class and status text.
	Dot  string `json:"dot"`
	Text string `json:"text"`
}

func (r pageRow) String() string {
	s := fmt.Sprintf("%s@%d %s", r.Key, r.Version, r.Status)
	if len(r.Devices) > 0 {
		devices := make([]string, len(r.Devices))
		for i, d := range r.Devices {
			devices[i] = d.String()
		}
		s += " [" + strings.Join(devices, ", ") + "]"
	}
	return s
}

type pageStream struct {
	Conn      string `json:"conn"`
	Snapshots int    `json:"snapshots"`
	Resumes   int    `json:"resumes"`
	Changes   int    `json:"changes"`
	// Syncs are the chat's sync answers applied.
	Syncs int       `json:"syncs"`
	Rows  []pageRow `json:"rows"`
}

func (s pageStream) row(key string) (pageRow, bool) {
	i := slices.IndexFunc(s.Rows, func(r pageRow) bool { return r.Key == key })
	if i < 0 {
		return pageRow{}, false
	}
	return s.Rows[i], true
}

func (s pageStream) keys() []string {
	keys := make([]string, len(s.Rows))
	for i, r := range s.Rows {
		keys[i] = r.Key
	}
	return keys
}

// pageMessage is one chat message as a row shows it.
type pageMessage struct {
	Seq int64  `json:"seq"`
	ID  string `json:"id"`
}

// pageSummary is the read-only summary the page's data attributes give.
type pageSummary struct {
	Streams      map[string]pageStream `json:"streams"`
	Conversation string                `json:"conversation"`
	Messages     []pageMessage         `json:"messages"`
	Status       string                `json:"status"`
	// Tab is whether the tab leads (holds the connections) or follows.
	Tab string `json:"tab"`
}

// summaryJS reads the summary out of the page's DOM.
const summaryJS = `(() => {
  const row = (li, key) => {
    const dot = li.querySelector(':scope > .row > .dot');
    const text = li.querySelector(':scope > .row > .presence-text');
    return {key, version: Number(li.dataset.version), status: li.dataset.status,
      dot: dot ? dot.className : '', text: text ? text.textContent : '',
      devices: [...li.querySelectorAll('li[data-device]')].map((d) => row(d, d.dataset.device))};
  };
  const out = {streams: {}, messages: []};
  for (const s of document.querySelectorAll('section[data-stream]')) {
    out.streams[s.dataset.stream] = {conn: s.dataset.conn, snapshots: Number(s.dataset.snapshots || 0),
      resumes: Number(s.dataset.resumes || 0), changes: Number(s.dataset.changes || 0), syncs: Number(s.dataset.syncs || 0),
      rows: [...s.querySelectorAll('li[data-key]')].map((li) => row(li, li.dataset.key))};
  }
  out.conversation = document.getElementById('conversation').hidden ? '' : document.getElementById('conversation-title').textContent;
  out.messages = [...document.querySelectorAll('#messages li[data-seq]')].map((li) => ({seq: Number(li.dataset.seq), id: li.dataset.messageId}));
  out.status = document.getElementById('status').textContent;
  out.tab = document.body.dataset.tab || '';
  return out;
})()`

// rowsText is the rows of every stream, one per line, for comparing and
// for failure messages.
func rowsText(rows map[string][]pageRow) string {
	var b strings.Builder
	for _, stream := range pageStreams {
		for _, r := range rows[stream] {
			fmt.Fprintf(&b, "%s %s\n", stream, r)
		}
	}
	return b.String()
}

func messagesText(msgs []pageMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%d %s\n", m.Seq, m.ID)
	}
	return b.String()
}

// ---- the browser ----

type browser struct {
	t *testing.T
	// ctx is the browser's; its own blank tab is never used, so that
	// closing a page's tab leaves the browser running.
	ctx context.Context
	mu  sync.Mutex
	// problems are exceptions and security errors the pages reported.
	problems []string
}

// tab is one tab of the browser.
type tab struct {
	*browser
	ctx   context.Context
	close context.CancelFunc
}

// openBrowser starts a headless Chromium with a fresh profile, closed at
// the end of the test. The flags keep it from reaching out to the network
// on its own, which this machine's closed network refuses.
func openBrowser(t *testing.T, ctx context.Context, path string) *browser {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	b := &browser{t: t}
	var cancel context.CancelFunc
	b.ctx, cancel = chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(b.ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return b
}

// open opens url in a new tab, closed at the end of the test unless the
// test closes it first.
func (b *browser) open(url string) *tab {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithListener(b.listen))
	b.t.Cleanup(cancel)
	tb := &tab{browser: b, ctx: ctx, close: cancel}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(url)); err != nil {
		b.t.Fatal(err)
	}
	return tb
}

// listen keeps what the page reports: uncaught exceptions, and errors
// other than the failed requests of a bridge that is down.
func (b *browser) listen(ev any) {
	var problem string
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		problem = "exception: " + ev.ExceptionDetails.Text
		if ex := ev.ExceptionDetails.Exception; ex != nil {
			problem += " " + ex.Description
		}
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError && ev.Entry.Source != log.EntrySourceNetwork {
			problem = fmt.Sprintf("%s error: %s", ev.Entry.Source, ev.Entry.Text)
		}
	}
	if problem != "" {
		b.mu.Lock()
		b.problems = append(b.problems, problem)
		b.mu.Unlock()
	}
}

// checkClean fails the test when the page reported a problem.
func (b *browser) checkClean() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("the page reported %s", p)
	}
}

func (b *tab) summary() pageSummary {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[pageSummary](summaryJS))
	if err != nil {
		b.t.Fatalf("reading the page: %v", err)
	}
	return s
}

// waitFor polls the page's summary until cond holds, and returns it.
func (b *tab) waitFor(ctx context.Context, what string, cond func(pageSummary) bool) pageSummary {
	b.t.Helper()
	var s pageSummary
	if !testenv.Poll(ctx, func() bool { s = b.summary(); return cond(s) }) {
		b.t.Fatalf("timed out waiting for %s; the page shows (status %q):\n%s", what, s.Status, rowsText(s.rows()))
	}
	return s
}

func (s pageSummary) allLive() bool {
	return !slices.ContainsFunc(pageStreams, func(stream string) bool { return s.Streams[stream].Conn != "live" })
}

func (s pageSummary) rows() map[string][]pageRow {
	rows := map[string][]pageRow{}
	for _, stream := range pageStreams {
		rows[stream] = s.Streams[stream].Rows
	}
	return rows
}

// waitSame waits until the page shows the rows the reference client holds
// and the conversation's messages, each once, in order.
func (b *tab) waitSame(ctx context.Context, ref *bridgeReader, what string) pageSummary {
	b.t.Helper()
	var s pageSummary
	var want, wantMsgs string
	same := testenv.Poll(ctx, func() bool {
		s = b.summary()
		want = rowsText(ref.rows(time.Now().UnixMilli()))
		msgs, err := ref.messages(ctx, pageConversation)
		if err != nil {
			return false
		}
		wantMsgs = messagesText(msgs)
		return rowsText(s.rows()) == want && s.Conversation == pageConversation && messagesText(s.Messages) == wantMsgs
	})
	if !same {
		b.t.Fatalf("timed out waiting for %s (status %q)\nthe page shows:\n%s\nthe client holds:\n%s\nthe page's messages of %q:\n%s\nthe client's:\n%s",
			what, s.Status, rowsText(s.rows()), want, s.Conversation, messagesText(s.Messages), wantMsgs)
	}
	return s
}

func (b *tab) screenshot(dir, name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// ---- a plain client of a bridge ----

// bridgeEntity is the Entity of design §6.
type bridgeEntity struct {
	Key         string          `json:"key"`
	Version     int64           `json:"version"`
	State       json.RawMessage `json:"state"`
	ExpiresAtMs int64           `json:"expires_at_ms"`
	Expired     bool            `json:"expired"`
}

// bridgeReader follows streams of one bridge as any client would: a
// snapshot, then the events from its cursor, keeping each key at the
// highest version seen. It never reconnects: a connection that ends before
// the test does is a failure.
type bridgeReader struct {
	ctx   context.Context
	url   string
	token string

	mu       sync.Mutex
	entities map[string]map[string]bridgeEntity
	applied  int
	ended    []string
}

func newBridgeReader(ctx context.Context, url, token string) *bridgeReader {
	return &bridgeReader{ctx: ctx, url: url, token: token, entities: map[string]map[string]bridgeEntity{}}
}

func (r *bridgeReader) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return resp, nil
}

func (r *bridgeReader) getJSON(ctx context.Context, path string, v any) error {
	resp, err := r.get(ctx, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// apply keeps e when its version is higher than the one held.
func (r *bridgeReader) apply(stream string, e bridgeEntity) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held, ok := r.entities[stream][e.Key]
	if ok && held.Version >= e.Version {
		return
	}
	if r.entities[stream] == nil {
		r.entities[stream] = map[string]bridgeEntity{}
	}
	r.entities[stream][e.Key] = e
	r.applied++
}

// follow takes the stream's snapshot, every page, and reads its events
// from the snapshot's cursor until the test ends.
func (r *bridgeReader) follow(t *testing.T, stream string) {
	t.Helper()
	var cursor, token string
	for {
		path := "/v1/streams/" + stream + "/snapshot?limit=2"
		if token != "" {
			path += "&page_token=" + token
		}
		var page struct {
			Cursor        string         `json:"cursor"`
			Entities      []bridgeEntity `json:"entities"`
			NextPageToken *string        `json:"next_page_token"`
		}
		if err := r.getJSON(r.ctx, path, &page); err != nil {
			t.Fatal(err)
		}
		if cursor == "" {
			cursor = page.Cursor
		}
		for _, e := range page.Entities {
			r.apply(stream, e)
		}
		if page.NextPageToken == nil {
			break
		}
		token = *page.NextPageToken
	}
	resp, err := r.get(r.ctx, "/v1/streams/"+stream+"/events?cursor="+cursor)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer resp.Body.Close()
		err := readSSE(resp.Body, func(_, event, data string) error {
			if event != "state" {
				return fmt.Errorf("event %q: %s", event, data)
			}
			var e bridgeEntity
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				return err
			}
			r.apply(stream, e)
			return nil
		})
		if r.ctx.Err() == nil {
			r.mu.Lock()
			r.ended = append(r.ended, fmt.Sprintf("%s: %v", stream, err))
			r.mu.Unlock()
		}
	}()
}

// readSSE calls each with every event of an event stream, its id, name
// and data, until it ends.
func readSSE(body io.Reader, each func(id, event, data string) error) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4<<10), 4<<20) // grown as lines need: thousands of clients read at once in the storm test
	var id, event string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) > 0 {
				if err := each(id, event, strings.Join(data, "\n")); err != nil {
					return err
				}
			}
			id, event, data = "", "", nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			id = line[len("id: "):]
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[len("data: "):])
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the stream ended")
}

func (r *bridgeReader) changes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

func (r *bridgeReader) checkConnected(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.ended {
		t.Errorf("the reference client's events ended: %s", e)
	}
}

// rows are the rows the page should show at nowMs, as the page's
// data-status defines them.
func (r *bridgeReader) rows(nowMs int64) map[string][]pageRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	rows := map[string][]pageRow{}
	for stream, ents := range r.entities {
		for _, e := range ents {
			rows[stream] = append(rows[stream], entityRow(stream, e, nowMs))
		}
		slices.SortFunc(rows[stream], func(a, b pageRow) int { return strings.Compare(a.Key, b.Key) })
	}
	return rows
}

func isPast(ms, nowMs int64) bool { return ms != 0 && nowMs >= ms }

// entityRow is what the page shows of an entity: a presence (or unknown
// once the claim expired) with its devices, a workflow's status, a
// conversation's last sequence, an order's last event type.
func entityRow(stream string, e bridgeEntity, nowMs int64) pageRow {
	var st struct {
		Presence string `json:"presence"`
		Devices  map[string]struct {
			Presence    string `json:"presence"`
			Version     int64  `json:"version"`
			ExpiresAtMs int64  `json:"expires_at_ms"`
		} `json:"devices"`
		Status    string `json:"status"`
		LastSeq   int64  `json:"last_seq"`
		EventType string `json:"event_type"`
	}
	_ = json.Unmarshal(e.State, &st)
	row := pageRow{Key: e.Key, Version: e.Version}
	switch stream {
	case "presence":
		row.Status = st.Presence
		if e.Expired || isPast(e.ExpiresAtMs, nowMs) {
			row.Status = "unknown"
		}
		for id, d := range st.Devices {
			status := d.Presence
			if isPast(d.ExpiresAtMs, nowMs) {
				status = "unknown"
			}
			row.Devices = append(row.Devices, pageRow{Key: id, Version: d.Version, Status: status})
		}
		slices.SortFunc(row.Devices, func(a, b pageRow) int { return strings.Compare(a.Key, b.Key) })
	case "workflow":
		row.Status = st.Status
	case "chat":
		row.Status = strconv.FormatInt(st.LastSeq, 10)
	case "orders":
		row.Status = st.EventType
	}
	return row
}

// messagesPage is a page of a conversation's messages.
type messagesPage struct {
	Messages []struct {
		Seq int64  `json:"conversation_seq"`
		ID  string `json:"message_id"`
	} `json:"messages"`
	NextAfterSeq int64 `json:"next_after_seq"`
	Limited      bool  `json:"limited"`
}

// messages reads every message of a conversation.
func (r *bridgeReader) messages(ctx context.Context, conversation string) ([]pageMessage, error) {
	var out []pageMessage
	var after int64
	for {
		var page messagesPage
		if err := r.getJSON(ctx, fmt.Sprintf("/v1/streams/chat/entities/%s/messages?after_seq=%d&limit=1000", conversation, after), &page); err != nil {
			return nil, err
		}
		if page.Limited {
			return nil, fmt.Errorf("the messages of %s after %d are limited", conversation, after)
		}
		for _, m := range page.Messages {
			out = append(out, pageMessage{Seq: m.Seq, ID: m.ID})
		}
		if len(page.Messages) < 1000 {
			return out, nil
		}
		after = page.NextAfterSeq
	}
}

// ---- the webhooks ----

// pageWebhook is one webhook for dev's ingest.
type pageWebhook struct {
	url, stream, id string
	body            []byte
}

func (w pageWebhook) post(ctx context.Context) error {
	return postDemoWebhook(ctx, w.url, w.stream, w.id, w.body)
}

// pageTraffic makes the webhooks of all four streams: an opening set with
// devices, a workflow gap and terminal states, a chat retry, a member
// leaving and a payment before its order; then a steady flow of more.
type pageTraffic struct {
	url  string
	run0 string
	n    int
	sent int
	// versions are the presence sequence numbers, per member or device.
	versions map[string]int64
	wfSeq    int64
	msgs     int
	orders   int
}

func newPageTraffic(url string) *pageTraffic {
	return &pageTraffic{url: url, run0: strconv.FormatInt(time.Now().UnixNano(), 36), versions: map[string]int64{}}
}

func (p *pageTraffic) webhook(stream string, body map[string]any) pageWebhook {
	p.n++
	id := fmt.Sprintf("%s-%s-%d", p.run0, stream, p.n)
	body["event_id"] = id
	data, _ := json.Marshal(body)
	return pageWebhook{url: p.url, stream: stream, id: id, body: data}
}

var presenceCycle = []string{"ONLINE", "BUSY", "AWAY", "ONLINE", "OFFLINE"}

// presence is the next claim of a member's device ("" for the member
// itself), valid an hour.
func (p *pageTraffic) presence(user, device, status string, expires time.Time) pageWebhook {
	k := user + "/" + device
	p.versions[k]++
	body := map[string]any{"user_id": user, "presence": status, "sequence_number": p.versions[k],
		"timestamp": time.Now().Unix(), "expires_at": expires.Unix()}
	if device != "" {
		body["device_id"] = device
	}
	return p.webhook("presence", body)
}

func (p *pageTraffic) workflow(op string, seq int64, status string, progress float64) pageWebhook {
	body := map[string]any{"operation_id": op, "sequence": seq, "status": status, "occurred_at": time.Now().UTC().Format(time.RFC3339)}
	if progress >= 0 {
		body["progress"] = progress
	}
	return p.webhook("workflow", body)
}

func (p *pageTraffic) chat(conversation, typ string, fields map[string]any) pageWebhook {
	fields["type"], fields["conversation_id"] = typ, conversation
	return p.webhook("chat", fields)
}

// message is a send; a retry repeats the client's message id under a new
// event id, which the conversation must show once.
func (p *pageTraffic) message(conversation, sender, clientID, text string) pageWebhook {
	return p.chat(conversation, "message.send", map[string]any{"sender_id": sender, "sender_device_id": sender + "-laptop",
		"client_message_id": clientID, "body": text})
}

func (p *pageTraffic) order(typ, id string, payload map[string]any) pageWebhook {
	body := map[string]any{"event_type": typ, "payload": payload}
	if typ == "order.created" {
		body["order_id"] = id
	} else {
		body["parent_id"] = id
	}
	return p.webhook("orders", body)
}

func (p *pageTraffic) opening() []pageWebhook {
	hour := time.Now().Add(time.Hour)
	return []pageWebhook{
		p.presence("alice", "laptop", "ONLINE", hour),
		p.presence("alice", "phone", "AWAY", hour),
		p.presence("bob", "laptop", "BUSY", hour),
		p.presence("bob", "phone", "AWAY", hour),
		p.presence("carol", "", "AWAY", hour),
		p.presence("dave", "desk", "OFFLINE", hour),

		p.workflow("wf-build", 1, "queued", -1),
		p.workflow("wf-build", 2, "running", 0),
		p.workflow("wf-build", 3, "progress", 60),
		p.workflow("wf-build", 4, "completed", 100),
		p.workflow("wf-deploy", 1, "queued", -1),
		p.workflow("wf-deploy", 3, "failed", 30), // ahead of a gap: waits for step 2
		p.workflow("wf-deploy", 2, "running", 10),
		p.workflow("wf-export", 1, "queued", -1),
		p.workflow("wf-export", 2, "cancelled", -1),
		p.workflow("wf-index", 1, "running", 0),

		p.chat(pageConversation, "member.added", map[string]any{"user_id": pageUser}),
		p.chat(pageConversation, "member.added", map[string]any{"user_id": "bob"}),
		p.chat(pageConversation, "member.added", map[string]any{"user_id": "carol"}),
		p.message(pageConversation, "bob", "bob-1", "Morning! The build is green."),
		p.message(pageConversation, "bob", "bob-1", "Morning! The build is green."), // a retry
		p.message(pageConversation, pageUser, "demo-1", "Great, deploying next."),
		p.message(pageConversation, "carol", "carol-1", "I am off for today."),
		p.chat(pageConversation, "member.removed", map[string]any{"user_id": "carol"}),
		p.chat(pageConversation, "receipt.read", map[string]any{"user_id": pageUser, "device_id": "demo-laptop", "conversation_seq": 3}),
		p.chat("ops-room", "member.added", map[string]any{"user_id": "alice"}),
		p.message("ops-room", "alice", "alice-1", "Not for demo's eyes."),

		p.order("order.payment_received", "o-2", map[string]any{"amount": 1200}), // before its order
		p.order("order.created", "o-1", map[string]any{"amount": 4200}),
		p.order("payment.captured", "o-1", map[string]any{"amount": 4200}),
		p.order("order.shipped", "o-1", map[string]any{"carrier": "post"}),
		p.order("order.created", "o-2", map[string]any{"amount": 1200}),
	}
}

// next is the next webhook of the steady flow, round the four streams.
func (p *pageTraffic) next() []pageWebhook {
	i := p.sent
	switch i % 4 {
	case 0:
		members := []struct{ user, device string }{{"alice", "laptop"}, {"alice", "phone"}, {"bob", "laptop"}, {"carol", ""}, {"dave", "desk"}}
		m := members[(i/4)%len(members)]
		return []pageWebhook{p.presence(m.user, m.device, presenceCycle[(i/4)%len(presenceCycle)], time.Now().Add(time.Hour))}
	case 1:
		p.wfSeq++
		return []pageWebhook{p.workflow("wf-index", p.wfSeq+1, "progress", float64(min(99, p.wfSeq)))}
	case 2:
		p.msgs++
		sender := []string{"bob", pageUser}[p.msgs%2]
		clientID, text := fmt.Sprintf("%s-flow-%d", sender, p.msgs), fmt.Sprintf("Update %d", p.msgs)
		w := p.message(pageConversation, sender, clientID, text)
		if p.msgs%3 == 0 {
			return []pageWebhook{w, p.message(pageConversation, sender, clientID, text)}
		}
		return []pageWebhook{w}
	default:
		p.orders++
		id := fmt.Sprintf("o-%d", 100+p.orders)
		return []pageWebhook{p.order("order.payment_received", id, map[string]any{"amount": p.orders}),
			p.order("order.created", id, map[string]any{"amount": p.orders})}
	}
}

// run sends the steady flow, one step every 100ms, until ctx ends.
func (p *pageTraffic) run(ctx context.Context) error {
	for {
		for _, w := range p.next() {
			if err := w.post(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		p.sent++
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// expiring is a claim of expiringMember that expires at the given time.
func (p *pageTraffic) expiring(at time.Time) pageWebhook {
	return p.presence(expiringMember, "", "ONLINE", at)
}
