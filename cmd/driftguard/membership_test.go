package main

// The membership model of assign streams (decidetest.Membership) held
// against the shipped pieces: random histories of joins, leaves, re-joins,
// sends and receipts are decided by the transactional runtime
// (processors.NewService) and read back through the real bridge, one
// bridge per history policy, as every user the history spoke of. The
// outcome records must be the model's decisions and the last state its
// state; each user must page out of the messages endpoint exactly the
// sequences the model says they may read (in order, each once, with
// their intervals), see the conversation in their snapshot and at its
// entity only while a member (its last message only when they may read
// it), and a former member is told where their reading ends.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/ingest"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/internal/webhook"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/processors/decide/decidetest"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// On the embedded broker, events written to `<stream>.in` as ingest
// writes them: 10 checks (`-rapid.checks=N` for more) of two to six
// conversations each (a check costs about one commit of the processor,
// however many conversations it decides).
func TestMembershipModelThroughRuntimeAndBridge(t *testing.T) {
	testenv.FewerChecks(t, 10)
	r := startChatRig(t, testenv.Fake(t), false)
	rapid.Check(t, r.checkHistories)
}

// On the real broker, through signed webhooks, ingest, the processor and
// the bridges: three drawn checks of two to six conversations; and a
// member following the conversation who is removed is told where their
// reading ends, then their connection ends.
func TestMembershipEndToEnd(t *testing.T) {
	brokers := testenv.Kafka(t)
	testenv.FewerChecks(t, 3)
	r := startChatRig(t, brokers, true)
	rapid.Check(t, r.checkHistories)
	r.checkLeft(t)
}

// chatRigSecret is the bridges' token key.
const chatRigSecret = "membership-test-secret-0123456789abcdef"

// chatRig is a uniquely named copy of the chat stream decided by the
// processors, and a bridge per history policy reading it.
type chatRig struct {
	ctx context.Context
	s   *config.Stream
	// bridges are the bridges' base URLs by history policy.
	bridges map[string]string
	// webhooks is ingest's URL of the stream; empty, events are written
	// to `<stream>.in` as ingest writes them.
	webhooks string
	cl       *kgo.Client
	out      *chatOutput
	cases    int
}

func startChatRig(t *testing.T, brokers []string, viaIngest bool) *chatRig {
	t.Helper()
	ctx := testenv.Context(t, 5*time.Minute)
	s := testenv.Shipped(t, "chat")
	s.Name = testenv.UniqueName("chat")
	s.Signature.Secrets = []string{testSecret}
	s.Limits.Partitions = 3
	cfg := testenv.OnlyStream(t, s)
	cfg.Kafka.Brokers = brokers
	cfg.Processing.CommitInterval = 10 * time.Millisecond
	// A check's events are few: the processor takes them as they come.
	cfg.Processing.FetchMinBytes = 1
	cfg.Bridge.Secret = chatRigSecret
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &chatRig{ctx: ctx, s: s, bridges: map[string]string{}, cl: testenv.Topics(t, ctx, cfg, brokers)}
	t.Cleanup(r.cl.Close)
	log := testenv.Logger(t)
	svcs := []service.Service{processors.NewService(processors.ServiceOptions{Config: cfg, Brokers: brokers, Logger: log, InMemoryTables: true})}
	var ready []string
	if viaIngest {
		ln := listen(t)
		svcs = append(svcs, ingest.NewService(ingest.ServiceOptions{Config: cfg, Brokers: brokers, Logger: log, Listener: ln, OpsOnListener: true}))
		ready = append(ready, "http://"+ln.Addr().String())
		r.webhooks = ready[0] + "/v1/webhooks/" + s.Name
	}
	for _, history := range []string{config.HistoryJoined, config.HistoryShared} {
		bs, bcfg := *s, *cfg
		bs.Assign.History = history
		bcfg.Streams = map[string]*config.Stream{s.Name: &bs}
		ln := listen(t)
		base := "http://" + ln.Addr().String()
		b, err := realtime.New(realtime.Options{Config: &bcfg, Brokers: brokers, Logger: log, Listener: ln, OpsListener: bridgeOpsListener(t, base)})
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, b)
		r.bridges[history] = base
		ready = append(ready, r.bridges[history])
	}
	runServices(t, ctx, "chat pipeline", svcs...)
	for _, base := range ready {
		waitReady(t, ctx, base, base)
	}
	r.out = newChatOutput(t, brokers, naming.Prefixes{}.For(s.Name))
	return r
}

// checkHistories is one check: two to six conversations, each a
// Membership history of its own, decided side by side and read back.
func (r *chatRig) checkHistories(t *rapid.T) {
	r.cases++
	var hs []decidetest.History
	var chats []*decidetest.Chat
	for i := range rapid.IntRange(2, 6).Draw(t, "conversations") {
		h, chat := decidetest.Membership(t, r.s, fmt.Sprintf("m%d-%d", r.cases, i))
		hs, chats = append(hs, h), append(chats, chat)
	}
	r.decide(t, hs...)
	for i, h := range hs {
		r.check(t, h, chats[i])
	}
}

// decide sends the histories' events, each conversation's in order, and
// waits until each has every decision and every bridge has read the state
// they left.
func (r *chatRig) decide(t testenv.Fataler, hs ...decidetest.History) {
	want := map[string]int{}
	for _, h := range hs {
		want[h.Key] = len(r.out.decided[h.Key]) + len(h.Steps)
	}
	if r.webhooks != "" {
		r.post(t, hs)
	} else {
		r.produce(t, hs)
	}
	r.out.await(t, r.ctx, want)
	r.awaitBridges(t)
}

// produce writes the events to `<stream>.in` as ingest does: keyed by
// conversation, with ingest's headers, received at the step's time.
func (r *chatRig) produce(t testenv.Fataler, hs []decidetest.History) {
	in := naming.Prefixes{}.For(r.s.Name).In
	var recs []*kgo.Record
	for _, h := range hs {
		for _, st := range h.Steps {
			var ev struct {
				EventID string `json:"event_id"`
				Type    string `json:"type"`
			}
			if err := json.Unmarshal(st.Body, &ev); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Topic: in, Key: []byte(h.Key), Value: st.Body, Headers: []kgo.RecordHeader{
				{Key: record.HeaderStream, Value: []byte(r.s.Name)},
				{Key: record.HeaderEventID, Value: []byte(ev.EventID)},
				{Key: record.HeaderType, Value: []byte(ev.Type)},
				{Key: record.HeaderReceivedAt, Value: []byte(strconv.FormatInt(st.AtMs, 10))},
				{Key: record.HeaderScheme, Value: []byte(config.SchemeStandardWebhooks)},
			}})
		}
	}
	if err := r.cl.ProduceSync(r.ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// post sends the events as signed webhooks, one after the other.
func (r *chatRig) post(t testenv.Fataler, hs []decidetest.History) {
	pub := &webhook.Publisher{URL: r.webhooks, Secret: testSecret}
	for _, h := range hs {
		for _, st := range h.Steps {
			var ev struct {
				EventID string `json:"event_id"`
			}
			if err := json.Unmarshal(st.Body, &ev); err != nil {
				t.Fatal(err)
			}
			if resp, err := pub.Post(r.ctx, ev.EventID, st.Body); err != nil || resp.Status != http.StatusAccepted {
				t.Fatalf("webhook %s: %d %v %s", ev.EventID, resp.Status, err, resp.Body)
			}
		}
	}
}

// awaitBridges waits until every bridge's snapshot cursor covers the state
// topic's committed end.
func (r *chatRig) awaitBridges(t testenv.Fataler) {
	topic := naming.Prefixes{}.For(r.s.Name).State
	ends, err := kadm.NewClient(r.cl).ListCommittedOffsets(r.ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	tok := r.token(t, "watcher")
	for history, base := range r.bridges {
		deadline := time.Now().Add(time.Minute)
		for {
			var page struct {
				Cursor string `json:"cursor"`
			}
			if status := getJSON(t, r.ctx, base+"/v1/streams/"+r.s.Name+"/snapshot?limit=1", tok, &page, nil); status != http.StatusOK {
				t.Fatalf("the %s bridge's snapshot: %d", history, status)
			}
			c, err := realtime.ParseCursor(page.Cursor)
			if err != nil {
				t.Fatal(err)
			}
			caught := true
			ends.Each(func(o kadm.ListedOffset) {
				caught = caught && int(o.Partition) < len(c.Offsets) && c.Offsets[o.Partition] >= o.Offset
			})
			if caught {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the %s bridge has read the state topic to %v, its end is %v", history, c.Offsets, ends)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func (r *chatRig) token(t testenv.Fataler, user string) string {
	tok, err := realtime.Sign([]byte(chatRigSecret), user, []string{r.s.Name}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// bridgeProblem is a problem answer's body.
type bridgeProblem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// getJSON GETs url with the token and decodes a 200's body into v, any
// other's into p when not nil; it returns the status.
func getJSON(t testenv.Fataler, ctx context.Context, url, tok string, v any, p *bridgeProblem) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	into := v
	if resp.StatusCode != http.StatusOK {
		if into = p; p == nil {
			return resp.StatusCode
		}
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, body)
		}
	}
	return resp.StatusCode
}

// check holds one conversation's decisions and last state to the model,
// then reads it through each bridge as each user, a drawn number of
// messages a page.
func (r *chatRig) check(t *rapid.T, h decidetest.History, chat *decidetest.Chat) {
	outs := r.out.decided[h.Key]
	h.Check(t, outs, r.out.last[h.Key])
	sends := sendsOf(t, r.s, h, outs)
	for _, history := range []string{config.HistoryJoined, config.HistoryShared} {
		for _, user := range chat.Users {
			r.checkReader(t, h.Key, chat, sends, history, user, rapid.IntRange(1, 5).Draw(t, "messages a page"))
		}
	}
}

// sendsOf is what each applied send of a history was, by sequence: its
// event's fields.
func sendsOf(t testenv.Fataler, s *config.Stream, h decidetest.History, outs []decidetest.Outcome) map[int64]map[string]any {
	bodies := map[string]map[string]any{}
	for _, st := range h.Steps {
		var fields map[string]any
		if err := json.Unmarshal(st.Body, &fields); err != nil {
			t.Fatal(err)
		}
		id, _ := fields[strings.TrimPrefix(s.EventID, "/")].(string)
		bodies[id] = fields
	}
	sends := map[int64]map[string]any{}
	for _, o := range outs {
		if o.Outcome == record.Applied && o.MessageID != "" {
			sends[o.Version] = bodies[o.EventID]
		}
	}
	return sends
}

// bridgeMessages is one page of the messages endpoint.
type bridgeMessages struct {
	Messages []struct {
		Seq             int64  `json:"conversation_seq"`
		MessageID       string `json:"message_id"`
		SenderID        string `json:"sender_id"`
		ClientMessageID string `json:"client_message_id"`
		Body            string `json:"body"`
	} `json:"messages"`
	NextAfterSeq int64                 `json:"next_after_seq"`
	Limited      bool                  `json:"limited"`
	Intervals    []decidetest.Interval `json:"intervals"`
}

// checkReader reads conversation key through the bridge of the history
// policy as user: their messages, limit a page, the conversation's entity
// and their snapshot.
func (r *chatRig) checkReader(t testenv.Fataler, key string, chat *decidetest.Chat, sends map[int64]map[string]any, history, user string, limit int) {
	base, tok := r.bridges[history]+"/v1/streams/"+r.s.Name, r.token(t, user)
	who := fmt.Sprintf("%s (%s, intervals %v, members %v, last_seq %d)", user, history, chat.Intervals[user], chat.Members, chat.LastSeq)
	ivs, member := chat.Intervals[user], slices.Contains(chat.Members, user)
	may := chat.MayRead(user, history)

	if len(ivs) == 0 {
		if status := getJSON(t, r.ctx, base+"/entities/"+key+"/messages?after_seq=0", tok, nil, nil); status != http.StatusForbidden {
			t.Fatalf("%s, never a member or no longer able to read anything: messages %d, want 403", who, status)
		}
	} else if got := r.readMessages(t, base+"/entities/"+key+"/messages", tok, key, sends, ivs, history, who, limit, may); !slices.Equal(got, may) {
		t.Fatalf("%s read %v, the model says %v", who, got, may)
	}

	// The entity: a member's, without the last message unless they may
	// read it; a former member is told the last message they may read.
	var ent bridgeEntity
	var p bridgeProblem
	status := getJSON(t, r.ctx, base+"/entities/"+key, tok, &ent, &p)
	switch {
	case member:
		if status != http.StatusOK {
			t.Fatalf("%s, a member: entity %d %s", who, status, p.Detail)
		}
		r.checkLastMessage(t, ent.State, chat, may, who+" at the entity")
	case len(ivs) > 0:
		boundary := fmt.Sprintf("after message %d", ivs[len(ivs)-1].To)
		if status != http.StatusForbidden || !strings.Contains(p.Detail, boundary) {
			t.Fatalf("%s, a former member: entity %d %q, want 403 saying %q", who, status, p.Detail, boundary)
		}
	case status != http.StatusForbidden:
		t.Fatalf("%s, not a member: entity %d, want 403", who, status)
	}

	// The snapshot holds the conversation for a member only.
	var snap struct {
		Entities      []bridgeEntity `json:"entities"`
		NextPageToken *string        `json:"next_page_token"`
	}
	if status := getJSON(t, r.ctx, base+"/snapshot?limit=10000", tok, &snap, nil); status != http.StatusOK || snap.NextPageToken != nil {
		t.Fatalf("%s: snapshot %d, more pages %v", who, status, snap.NextPageToken != nil)
	}
	i := slices.IndexFunc(snap.Entities, func(e bridgeEntity) bool { return e.Key == key })
	if (i >= 0) != member {
		t.Fatalf("%s: the conversation in their snapshot %v, a member %v", who, i >= 0, member)
	}
	if i >= 0 {
		r.checkLastMessage(t, snap.Entities[i].State, chat, may, who+" in the snapshot")
	}
}

// readMessages pages through the messages as pageMessages does until
// they are what the model says, for up to half a minute, and returns the
// last read. The bridge reads the messages from the outcomes topic with a
// reader of its own: awaitBridges, which waits for the state topic's
// reader, says nothing of it, and it may be a transaction behind for a
// few milliseconds. A message missing for longer, or one too many, is
// still found.
func (r *chatRig) readMessages(t testenv.Fataler, url, tok, key string, sends map[int64]map[string]any, ivs []decidetest.Interval, history, who string, limit int, may []int64) []int64 {
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := r.pageMessages(t, url, tok, key, sends, ivs, history, who, limit)
		if slices.Equal(got, may) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pageMessages pages the messages endpoint from the start to its end,
// limit a page, checks each page's intervals and each message's fields,
// and returns the sequences read.
func (r *chatRig) pageMessages(t testenv.Fataler, url, tok, key string, sends map[int64]map[string]any, ivs []decidetest.Interval, history, who string, limit int) []int64 {
	wantIvs := ivs
	if history == config.HistoryShared {
		wantIvs = []decidetest.Interval{{From: 1, To: ivs[len(ivs)-1].To}}
	}
	a := &r.s.Assign.Send
	var got []int64
	for after, pages := int64(0), 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("%s: more than 100 pages of %d, read %v", who, limit, got)
		}
		var page bridgeMessages
		var p bridgeProblem
		if status := getJSON(t, r.ctx, fmt.Sprintf("%s?after_seq=%d&limit=%d", url, after, limit), tok, &page, &p); status != http.StatusOK {
			t.Fatalf("%s: messages after %d: %d %s", who, after, status, p.Detail)
		}
		if page.Limited || len(page.Messages) > limit || !slices.Equal(page.Intervals, wantIvs) {
			t.Fatalf("%s: messages after %d: limited %v, %d messages, intervals %v, want %v", who, after, page.Limited, len(page.Messages), page.Intervals, wantIvs)
		}
		for _, m := range page.Messages {
			sent := sends[m.Seq]
			field := func(pointer string) any { return sent[strings.TrimPrefix(pointer, "/")] }
			if sent == nil || m.MessageID != r.s.Assign.MessageIDOf(key, m.Seq) || m.SenderID != field(a.Sender) ||
				m.ClientMessageID != field(a.ClientMessageID) || m.Body != field(a.Body) {
				t.Fatalf("%s: message %+v, sent %v", who, m, sent)
			}
			got = append(got, m.Seq)
		}
		if page.NextAfterSeq < after {
			t.Fatalf("%s: messages after %d go on after %d", who, after, page.NextAfterSeq)
		}
		if len(page.Messages) == 0 && page.NextAfterSeq == after {
			return got
		}
		after = page.NextAfterSeq
	}
}

// checkLastMessage holds a member's view of the state: the last message
// only when they may read it.
func (r *chatRig) checkLastMessage(t testenv.Fataler, state json.RawMessage, chat *decidetest.Chat, may []int64, who string) {
	var doc struct {
		LastSeq     int64           `json:"last_seq"`
		LastMessage json.RawMessage `json:"last_message"`
	}
	if err := json.Unmarshal(state, &doc); err != nil {
		t.Fatal(err)
	}
	readable := chat.LastSeq > 0 && slices.Contains(may, chat.LastSeq)
	if doc.LastSeq != chat.LastSeq || (doc.LastMessage != nil) != readable {
		t.Fatalf("%s: state %s; may read the last message %v", who, state, readable)
	}
}

// chatOutput reads the stream's committed outcome and state records from
// their start: each conversation's decisions in order, and its last
// public state.
type chatOutput struct {
	cl      *kgo.Client
	topics  naming.Topics
	decided map[string][]decidetest.Outcome
	last    map[string]decidetest.State
}

func newChatOutput(t *testing.T, brokers []string, topics naming.Topics) *chatOutput {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics.Outcomes, topics.State),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &chatOutput{cl: cl, topics: topics, decided: map[string][]decidetest.Outcome{}, last: map[string]decidetest.State{}}
}

// await reads until each key has want decisions.
func (o *chatOutput) await(t testenv.Fataler, ctx context.Context, want map[string]int) {
	deadline := time.Now().Add(time.Minute)
	for key, n := range want {
		for len(o.decided[key]) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d decisions of %d events", key, len(o.decided[key]), n)
			}
			pollCtx, cancel := context.WithTimeout(ctx, time.Second)
			fetches := o.cl.PollFetches(pollCtx)
			cancel()
			fetches.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("reading %s/%d: %v", topic, p, err)
				}
			})
			fetches.EachRecord(o.add(t))
		}
	}
}

func (o *chatOutput) add(t testenv.Fataler) func(*kgo.Record) {
	return func(r *kgo.Record) {
		switch r.Topic {
		case o.topics.Outcomes:
			var out record.Outcome
			if _, err := record.DecodeOutcome(r.Value, &out); err != nil {
				t.Fatal(err)
			}
			o.decided[out.Key] = append(o.decided[out.Key], decidetest.Outcome{EventID: strings.Clone(out.EventID), Outcome: out.Outcome,
				Reason: out.Reason, Version: out.Version, BufferDepth: out.BufferDepth, MessageID: strings.Clone(out.MessageID)})
		case o.topics.State:
			if record.IsViewMark(r.Key, r.Value) {
				return // the processors' mark for goka's view
			}
			var st record.State
			state, err := record.DecodeState(r.Value, &st)
			if err != nil {
				t.Fatal(err)
			}
			o.last[string(r.Key)] = decidetest.State{JSON: json.RawMessage(state), ExpiresAtMs: st.ExpiresAtMs}
		}
	}
}

// checkLeft: a member following the conversation is removed; their
// connection gets `event: left` with the last sequence they may read, and
// ends. The history: ann joins and sends 1, ben joins and sends 2, ann
// sends 3; ben follows; ben is removed; ann sends 4. Then ben reads 2 and 3
// (joined) or 1 to 3 (shared), and ann everything.
func (r *chatRig) checkLeft(t *testing.T) {
	key := fmt.Sprintf("left-%d", time.Now().UnixNano())
	a := &r.s.Assign
	ev := func(id, typ string, fields map[string]any) decidetest.Step {
		fields["event_id"], fields["type"], fields["conversation_id"] = key+"-"+id, typ, key
		b, err := json.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		return decidetest.Step{Body: b, AtMs: time.Now().UnixMilli()}
	}
	member := func(id, typ, user string) decidetest.Step { return ev(id, typ, map[string]any{"user_id": user}) }
	send := func(id, user string) decidetest.Step {
		return ev(id, a.Send.Types[0], map[string]any{"sender_id": user, "sender_device_id": user + "-phone", "client_message_id": id, "body": "message " + id})
	}
	before := decidetest.History{Key: key, Steps: []decidetest.Step{member("1", a.Members.Added[0], "ann"), send("2", "ann"),
		member("3", a.Members.Added[0], "ben"), send("4", "ben"), send("5", "ann")}}
	after := decidetest.History{Key: key, Steps: []decidetest.Step{member("6", a.Members.Removed[0], "ben"), send("7", "ann")}}
	r.decide(t, before)

	type sseEvent struct{ event, data string }
	followers := map[string]chan sseEvent{}
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	tok := r.token(t, "ben")
	for history, base := range r.bridges {
		var snap struct {
			Cursor string `json:"cursor"`
		}
		url := base + "/v1/streams/" + r.s.Name
		if status := getJSON(t, ctx, url+"/snapshot", tok, &snap, nil); status != http.StatusOK {
			t.Fatalf("ben's snapshot of the %s bridge: %d", history, status)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/events?key="+key+"&cursor="+snap.Cursor, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("ben following %s on the %s bridge: %v %v", key, history, err, resp)
		}
		events := make(chan sseEvent, 16)
		followers[history] = events
		go func() {
			defer resp.Body.Close()
			defer close(events)
			_ = readSSE(resp.Body, func(_, event, data string) error {
				events <- sseEvent{event, data}
				return nil
			})
		}()
	}
	r.decide(t, after)
	for history, events := range followers {
		var got []sseEvent
		for e := range events {
			got = append(got, e)
		}
		want := []sseEvent{{"left", fmt.Sprintf(`{"key":%q,"readable_until_seq":3}`, key)}}
		if !slices.Equal(got, want) {
			t.Errorf("ben, removed while following on the %s bridge, got %v, want %v and the end", history, got, want)
		}
	}

	chat := &decidetest.Chat{LastSeq: 4, Members: []string{"ann"}, Users: []string{"ann", "ben", "cat"},
		Intervals: map[string][]decidetest.Interval{"ann": {{From: 1}}, "ben": {{From: 2, To: 3}}}}
	all := decidetest.History{Key: key, Steps: append(before.Steps, after.Steps...)}
	sends := sendsOf(t, r.s, all, r.out.decided[key])
	for _, history := range []string{config.HistoryJoined, config.HistoryShared} {
		for _, user := range chat.Users {
			r.checkReader(t, key, chat, sends, history, user, 2)
		}
	}
}
