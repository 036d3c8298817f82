package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/benchmarks/workload"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/procstat"
)

// chatLoad is one measured run: conversations × members, messages at rate
// a second for seconds after a warm-up, through via.
type chatLoad struct {
	Conversations, Members int
	Rate                   float64
	Seconds, Warmup        float64
	Via                    string
}

func (l chatLoad) String() string {
	return fmt.Sprintf("%d conversations × %d members, %.0f msg/s for %.0f s, via %s", l.Conversations, l.Members, l.Rate, l.Seconds, l.Via)
}

func convName(c int) string    { return fmt.Sprintf("conv-%d", c) }
func userName(c, m int) string { return fmt.Sprintf("u%d-%d", c, m) }
func clientID(c, k int) string { return fmt.Sprintf("cm-%d-%d", c, k) }

// bridgeIdleSample is how long the bridge's CPU is read with its clients
// connected and nothing sent.
const bridgeIdleSample = 5 * time.Second

// setupConcurrency bounds the requests of the set-up (members added,
// snapshots, connections) in flight at once.
const setupConcurrency = 32

// chatRun is one load's run on a fresh stack.
type chatRun struct {
	load      chatLoad
	st        *chatStack
	send      *chatSender
	followers []*follower
	// acks[c][k-1] is the k-th message of conversation c's acceptance;
	// measured[c][k-1] whether it was sent in the measured window.
	mu       sync.Mutex
	acks     [][]ack
	measured [][]bool
	failures atomic.Int64
	firstErr error
}

// runChatLoad runs one load on a fresh stack and returns its figures.
func (ws *Workspace) runChatLoad(ctx context.Context, load chatLoad) (*chatResult, error) {
	st, err := ws.startChatStack(ctx)
	if err != nil {
		return nil, err
	}
	defer st.stop(context.WithoutCancel(ctx))
	send, err := newChatSender(st, 512)
	if err != nil {
		return nil, err
	}
	r := &chatRun{load: load, st: st, send: send, acks: make([][]ack, load.Conversations), measured: make([][]bool, load.Conversations)}
	ws.Log.Info("chat: adding members", "load", load.String())
	if err := r.addMembers(ctx); err != nil {
		return nil, err
	}
	ws.Log.Info("chat: connecting followers", "clients", load.Conversations*load.Members)
	followCtx, stopFollowing := context.WithCancel(ctx)
	var following sync.WaitGroup
	defer func() { stopFollowing(); following.Wait() }()
	if err := r.connect(followCtx, &following); err != nil {
		return nil, err
	}
	// The bridge's CPU with every member connected and nothing sent:
	// heartbeats, and reading every stream's topics.
	idleBefore, _ := procstat.CPU(st.bridge.pid())
	time.Sleep(bridgeIdleSample)
	idleAfter, _ := procstat.CPU(st.bridge.pid())
	ws.Log.Info("chat: sending")
	res, err := r.measure(ctx)
	if err != nil {
		return nil, err
	}
	res.BridgeIdleCPU = (idleAfter - idleBefore).Seconds() / bridgeIdleSample.Seconds()
	stopFollowing()
	following.Wait()
	r.tally(res)
	ws.Log.Info("chat: done", "load", load.String(), "latency_ms", res.Latency, "missing", res.Missing, "passed", res.Passed)
	return res, nil
}

// addMembers adds every member to its conversation through ingest and
// waits until the bridge shows each conversation with all of them.
func (r *chatRun) addMembers(ctx context.Context) error {
	l := r.load
	err := parallel(ctx, l.Conversations*l.Members, func(i int) error {
		c, m := i/l.Members, i%l.Members
		_, err := r.send.webhook(ctx, workload.ChatBody{EventID: fmt.Sprintf("add-%d-%d", c, m), Type: "member.added",
			ConversationID: convName(c), UserID: userName(c, m)})
		return err
	})
	if err != nil {
		return err
	}
	return parallel(ctx, l.Conversations, func(c int) error {
		tok, err := r.st.token(userName(c, 0))
		if err != nil {
			return err
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			var ent struct {
				State struct {
					Members []string `json:"members"`
				} `json:"state"`
			}
			if status := getJSON(ctx, r.send.client, r.st.bridgeURL+"/v1/streams/chat/entities/"+convName(c), tok, &ent); status == http.StatusOK && len(ent.State.Members) == l.Members {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("conversation %s did not show its %d members at the bridge within 2 minutes", convName(c), l.Members)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

// connect takes each member's snapshot and opens its events, and returns
// once every follower's connection is answered.
func (r *chatRun) connect(ctx context.Context, following *sync.WaitGroup) error {
	l := r.load
	tr := sseTransport()
	r.followers = make([]*follower, l.Conversations*l.Members)
	return parallel(ctx, len(r.followers), func(i int) error {
		c, m := i/l.Members, i%l.Members
		tok, err := r.st.token(userName(c, m))
		if err != nil {
			return err
		}
		f := &follower{conv: c, user: userName(c, m), token: tok}
		r.followers[i] = f
		cursor, err := snapshotCursor(ctx, r.send.client, r.st.bridgeURL, tok)
		if err != nil {
			return err
		}
		answered := make(chan error, 1)
		following.Go(func() { f.follow(ctx, tr, r.st.bridgeURL, convName(c), cursor, func(err error) { answered <- err }) })
		return <-answered
	})
}

// measure sends the messages at the load's rate (the warm-up, then the
// measured window), waits until every member holds every message, and
// samples the processes' CPU time and the topics' sizes at the window's
// start and once the window's messages are all delivered.
func (r *chatRun) measure(ctx context.Context) (*chatResult, error) {
	l := r.load
	res := &chatResult{Load: l}
	procs := r.st.processes()
	total := int((l.Warmup + l.Seconds) * l.Rate)
	warm := int(l.Warmup * l.Rate)
	for c := range r.acks {
		n := total/l.Conversations + 1
		r.acks[c], r.measured[c] = make([]ack, 0, n), make([]bool, 0, n)
	}
	var sends sync.WaitGroup
	var before procstat.Sample
	var sizesBefore map[string]int64
	var bridgeSystem, brokerJIT time.Duration
	var windowStart time.Time
	queues := make([]chan func(), l.Conversations)
	if l.Via == viaIngest {
		// One message of a conversation at a time: ingest's 202 comes
		// before the decision, and a conversation's messages take their
		// sequences in the order they reach its partition, so the k-th
		// accepted is sequence k (each state's last message says so).
		for c := range queues {
			queues[c] = make(chan func(), total/l.Conversations+2)
			go func() {
				for send := range queues[c] {
					send()
				}
			}()
		}
	}
	inflight := make(chan struct{}, 512)
	start := time.Now()
	for i := range total {
		if wait := time.Until(start.Add(time.Duration(float64(i) / l.Rate * float64(time.Second)))); wait > time.Millisecond {
			time.Sleep(wait)
		}
		if i == warm {
			windowStart, before, sizesBefore = time.Now(), procstat.Take(procs), r.topicSizes(ctx)
			bridgeSystem, _ = procstat.SystemCPU(r.st.bridge.pid())
			brokerJIT, _ = procstat.ThreadCPU(procs["broker"], jvmCompiling)
		}
		c, k := i%l.Conversations, i/l.Conversations+1
		r.mu.Lock()
		r.acks[c] = append(r.acks[c], ack{})
		r.measured[c] = append(r.measured[c], i >= warm)
		r.mu.Unlock()
		sends.Add(1)
		send := func() {
			defer sends.Done()
			a, err := r.sendOne(ctx, c, k)
			r.mu.Lock()
			defer r.mu.Unlock()
			if err != nil {
				r.failures.Add(1)
				if r.firstErr == nil {
					r.firstErr = err
				}
				return
			}
			r.acks[c][k-1] = a
		}
		if l.Via == viaIngest {
			queues[c] <- send
			continue
		}
		inflight <- struct{}{}
		go func() { defer func() { <-inflight }(); send() }()
	}
	sends.Wait()
	for _, q := range queues {
		if q != nil {
			close(q)
		}
	}
	if r.firstErr != nil {
		return nil, fmt.Errorf("%d sends failed, the first: %w", r.failures.Load(), r.firstErr)
	}
	drained := r.waitDelivered(ctx, 2*time.Minute)
	after, sizesAfter := procstat.Take(procs), r.topicSizes(ctx)
	if sys, err := procstat.SystemCPU(r.st.bridge.pid()); err == nil {
		res.BridgeSystemSeconds = (sys - bridgeSystem).Seconds()
	}
	if jit, err := procstat.ThreadCPU(procs["broker"], jvmCompiling); err == nil {
		res.BrokerJITSeconds = (jit - brokerJIT).Seconds()
	}
	res.WindowSeconds = time.Since(windowStart).Seconds()
	res.Drained = drained
	res.CPUSeconds = map[string]float64{}
	for name, a := range after {
		res.CPUSeconds[name] = (a - before[name]).Seconds()
	}
	res.TopicBytes = map[string]int64{}
	for t, n := range sizesAfter {
		res.TopicBytes[t] = n - sizesBefore[t]
	}
	res.PeakRSS = map[string]int64{}
	for name, pid := range procs {
		if n, err := procstat.TreePeakRSS(pid); err == nil {
			res.PeakRSS[name] = n
		}
	}
	return res, nil
}

// jvmCompiling matches the names HotSpot gives its just-in-time compiler
// threads ("C1 CompilerThread0", "C2 CompilerThre…", cut at 15 bytes) and
// its code cache sweeper.
func jvmCompiling(name string) bool {
	return strings.HasPrefix(name, "C1 Compiler") || strings.HasPrefix(name, "C2 Compiler") || strings.HasPrefix(name, "Sweeper")
}

// sendOne sends conversation c's k-th message from one of its members
// (in turn) and returns its acceptance.
func (r *chatRun) sendOne(ctx context.Context, c, k int) (ack, error) {
	m := (k - 1) % r.load.Members
	text := fmt.Sprintf("message %d of %s, about the length people type: forty to eighty bytes", k, convName(c))
	if r.load.Via == viaBridge {
		return r.send.sendMessage(ctx, r.followers[c*r.load.Members+m].token, userName(c, m)+"-phone", convName(c), clientID(c, k), text)
	}
	sent := time.Now()
	at, err := r.send.webhook(ctx, workload.ChatBody{EventID: fmt.Sprintf("send-%d-%d", c, k), Type: "message.send",
		ConversationID: convName(c), SenderID: userName(c, m), SenderDeviceID: userName(c, m) + "-phone",
		ClientMessageID: clientID(c, k), Body: text})
	return ack{seq: int64(k), at: at, sent: sent}, err
}

// waitDelivered waits until every follower holds its conversation's last
// message, or d passes; it reports which.
func (r *chatRun) waitDelivered(ctx context.Context, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		done := true
		for _, f := range r.followers {
			if f.lastSeq.Load() < int64(len(r.acks[f.conv])) {
				done = false
				break
			}
		}
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			return done
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// topicSizes are the chat stream's topics' sizes on the broker's disk.
func (r *chatRun) topicSizes(ctx context.Context) map[string]int64 {
	t := naming.Prefixes{}.For("chat")
	out := map[string]int64{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.st.brokers))
	if err != nil {
		return out
	}
	defer cl.Close()
	dirs, err := kadm.NewClient(cl).DescribeAllLogDirs(ctx, nil)
	if err != nil {
		return out
	}
	dirs.Each(func(d kadm.DescribedLogDir) {
		d.Topics.Each(func(p kadm.DescribedLogDirPartition) {
			switch p.Topic {
			case t.In, t.Table, t.State, t.Outcomes:
				out[p.Topic] += p.Size
			}
		})
	})
	return out
}

// parallel runs fn(0…n-1), setupConcurrency at a time, and returns the
// first error.
func parallel(ctx context.Context, n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	slots := make(chan struct{}, setupConcurrency)
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := fn(i); err != nil {
				once.Do(func() { first = err })
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// getJSON GETs url with the token and decodes a 200's body into v; it
// returns the status, 0 for no answer.
func getJSON(ctx context.Context, client *http.Client, url, token string, v any) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if json.NewDecoder(resp.Body).Decode(v) != nil {
			return 0
		}
	}
	return resp.StatusCode
}
