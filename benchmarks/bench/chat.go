package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/driftguard/driftguard/internal/procstat"
)

// runChat is `go run ./bench chat`: chat clients through the bridge, on a
// broker of its own with ingest, process and bridge as processes of their
// own (docs/bridge.md, "Chat at scale"):
//
//	go run ./bench chat                                   # both loads via ingest, 10,000 idle connections
//	go run ./bench chat --via ingest,bridge --loads 100x20@1000
//	go run ./bench chat --smoke                           # tiny counts, one load, no timing assertions
func runChat(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench chat", flag.ContinueOnError)
	loads := fs.String("loads", "50x10@200,100x20@1000", "loads, comma-separated: conversations x members @ messages a second")
	via := fs.String("via", viaIngest, "how messages are sent, comma-separated: ingest (signed webhooks), bridge (members' sends)")
	seconds := fs.Float64("seconds", 30, "measured seconds of each load")
	warmup := fs.Float64("warmup", 5, "seconds sent before each measured window")
	idle := fs.Int("idle", 10_000, "idle SSE connections for the bridge's memory per connection; 0 skips it")
	out := fs.String("out", "results", "folder for the results (relative to benchmarks/)")
	work := fs.String("work", "", "work folder (default: a new temp folder, removed unless --keep or a smoke run fails)")
	keep := fs.Bool("keep", false, "keep the work folder")
	binary := fs.String("driftguard", "", "a driftguard binary to run instead of one built from this checkout (another revision's, to compare)")
	smoke := fs.Bool("smoke", false, "3 conversations × 3 members, 20 msg/s for 3 s, via ingest, 50 idle connections; results in the work folder; exit 1 on any failed check")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *smoke {
		*loads, *seconds, *warmup, *idle = "3x3@20", 3, 1, 50
	}
	var plan []chatLoad
	for _, spec := range strings.Split(*loads, ",") {
		for _, v := range strings.Split(*via, ",") {
			l, err := parseChatLoad(strings.TrimSpace(spec), strings.TrimSpace(v), *seconds, *warmup)
			if err != nil {
				return err
			}
			plan = append(plan, l)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ws, cleanup, err := newWorkspace(options{work: *work, keep: *keep, smoke: *smoke}, log)
	if err != nil {
		return err
	}
	failed := false
	defer func() { cleanup(failed) }()
	if *binary != "" {
		ws.Bin["driftguard"] = *binary
	} else if err := ws.build(ctx, ws.Root, "./cmd/driftguard", "driftguard"); err != nil {
		return err
	}
	most := *idle
	for _, l := range plan {
		most = max(most, l.Conversations*l.Members)
	}
	// Each connection takes a descriptor in this process (its other end
	// is the bridge's).
	if err := raiseOpenFiles(most + 1024); err != nil {
		return err
	}
	res := &chatResults{Date: time.Now().UTC().Format("2006-01-02"), Command: "go run ./bench chat " + strings.Join(args, " "),
		Revision: revision(ws.Root), Machine: machine()}
	if *binary != "" {
		res.Notes = append(res.Notes, fmt.Sprintf("driftguard: %s, not built from this checkout.", *binary))
	}
	for _, l := range plan {
		r, err := ws.runChatLoad(ctx, l)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failed = true
			res.Notes = append(res.Notes, fmt.Sprintf("%s: did not complete: %v", l, err))
			log.Error("chat load failed", "load", l.String(), "err", err)
			continue
		}
		failed = failed || !r.Passed
		res.Loads = append(res.Loads, r)
	}
	if *idle > 0 {
		if res.Idle, err = ws.measureIdle(ctx, *idle); err != nil {
			failed = true
			res.Notes = append(res.Notes, fmt.Sprintf("idle connections: did not complete: %v", err))
		}
	}
	dir := *out
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(ws.Bench, dir)
	}
	if *smoke {
		dir = filepath.Join(ws.Dir, "results")
	}
	path, err := res.write(dir)
	if err != nil {
		return err
	}
	log.Info("results written", "file", path)
	if failed {
		return fmt.Errorf("a chat load failed its check or did not complete (see %s)", path)
	}
	return nil
}

// parseChatLoad reads "CxM@R".
func parseChatLoad(spec, via string, seconds, warmup float64) (chatLoad, error) {
	l := chatLoad{Seconds: seconds, Warmup: warmup, Via: via}
	size, rate, ok := strings.Cut(spec, "@")
	c, m, ok2 := strings.Cut(size, "x")
	var err1, err2, err3 error
	l.Conversations, err1 = strconv.Atoi(c)
	l.Members, err2 = strconv.Atoi(m)
	l.Rate, err3 = strconv.ParseFloat(rate, 64)
	if !ok || !ok2 || errors.Join(err1, err2, err3) != nil || l.Conversations < 1 || l.Members < 1 || l.Rate <= 0 {
		return l, fmt.Errorf("--loads: %q is not conversations x members @ rate (e.g. 50x10@200)", spec)
	}
	if via != viaIngest && via != viaBridge {
		return l, fmt.Errorf("--via: %q is neither %s nor %s", via, viaIngest, viaBridge)
	}
	return l, nil
}

// idleResult is the bridge's memory per idle SSE connection.
type idleResult struct {
	Connections        int     `json:"connections"`
	RSSBefore          int64   `json:"rss_before"`
	RSSAfter           int64   `json:"rss_after"`
	BytesPerConnection float64 `json:"bytes_per_connection"`
}

// idleSettle is how long the bridge is left with its connections before
// its memory is read: long enough for the connections' first heartbeat.
const idleSettle = 20 * time.Second

// measureIdle opens n SSE connections to a fresh bridge, each a user of
// its own following the chat stream, sends nothing, and reads the
// bridge's resident memory before and after.
func (ws *Workspace) measureIdle(ctx context.Context, n int) (*idleResult, error) {
	st, err := ws.startChatStack(ctx)
	if err != nil {
		return nil, err
	}
	defer st.stop(context.WithoutCancel(ctx))
	send, err := newChatSender(st, setupConcurrency)
	if err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second) // the bridge's start-up allocations settle
	before, _, err := procstat.Memory(st.bridge.pid())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var following sync.WaitGroup
	defer func() { cancel(); following.Wait() }()
	tr := sseTransport()
	ws.Log.Info("chat: idle connections", "n", n)
	err = parallel(ctx, n, func(i int) error {
		tok, err := st.token(fmt.Sprintf("idle-%d", i))
		if err != nil {
			return err
		}
		cursor, err := snapshotCursor(ctx, send.client, st.bridgeURL, tok)
		if err != nil {
			return err
		}
		f := &follower{token: tok}
		answered := make(chan error, 1)
		following.Go(func() { f.follow(ctx, tr, st.bridgeURL, "", cursor, func(err error) { answered <- err }) })
		return <-answered
	})
	if err != nil {
		return nil, err
	}
	time.Sleep(idleSettle)
	after, _, err := procstat.Memory(st.bridge.pid())
	if err != nil {
		return nil, err
	}
	r := &idleResult{Connections: n, RSSBefore: before, RSSAfter: after, BytesPerConnection: float64(after-before) / float64(n)}
	ws.Log.Info("chat: idle connections held", "n", n, "bytes_per_connection", int(r.BytesPerConnection))
	return r, nil
}

// raiseOpenFiles lifts this process's open-files limit to at least need,
// within the hard limit.
func raiseOpenFiles(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= uint64(need) {
		return nil
	}
	lim.Cur = min(uint64(need), lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < uint64(need) {
		return fmt.Errorf("%d open files are needed, the limit is %d (hard %d): %v", need, lim.Cur, lim.Max, err)
	}
	return nil
}
