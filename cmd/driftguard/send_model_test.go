package main

// Sends through the bridge as clients make them on bad networks: random
// histories of sends, retries, answers lost on the way back (the client
// gives up on the request and sends again later), followers that
// reconnect from their last cursor, and processors stopped mid-run and
// replaced. Every client_message_id must get exactly one
// conversation_seq, which its sender learns (201 once, or 200 with the
// same sequence), the sequences must be 1..N, and every member
// following the conversation must see each message once, in order.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// maxCrashes bounds the processors replaced in one run: each takes a
// new processor's start.
const maxCrashes = 3

// Ten checks by default (`-rapid.checks=N` for more); a check is a
// conversation of two or three members and up to twelve actions.
func TestBridgeSendsThroughRetriesLostAnswersAndCrashes(t *testing.T) {
	testenv.FewerChecks(t, 10)
	r := startSendRig(t, testenv.Kafka(t), func(cfg *config.Config) { cfg.Bridge.SendWait = time.Second })
	m := &sendModel{r: r}
	rapid.Check(t, m.check)
	t.Logf("%d checks, %d sends (%d answered pending, %d lost), %d reconnects, %d processors replaced",
		m.checks, m.sends, m.pending, m.lost, m.reconnects, m.crashes)
}

type sendModel struct {
	r                                                 *sendRig
	checks, sends, pending, lost, reconnects, crashes int
	// stopped is closed once the stopped processor has stopped; nil
	// while one runs.
	stopped chan struct{}
}

// restart starts a new processor once the last one has stopped.
func (m *sendModel) restart() {
	<-m.stopped
	m.stopped = nil
	m.r.startProcessor()
}

// sendLog is what a check's clients learned.
type sendLog struct {
	// owner is each client id's sender; order, the ids in order drawn.
	owner map[string]string
	order []string
	// answers are every decided answer (not 202) of each id.
	answers map[string][]answer
}

func (m *sendModel) check(t *rapid.T) {
	r := m.r
	m.checks++
	if m.stopped != nil { // a failed check's
		m.restart()
	}
	conv := fmt.Sprintf("k%d", m.checks)
	var users []string
	for i := range rapid.IntRange(2, 3).Draw(t, "members") {
		users = append(users, fmt.Sprintf("%s-u%d", conv, i))
	}
	r.addMembers(t, conv, users...)
	toks := map[string]string{}
	var followers []*follower
	for _, u := range users {
		toks[u] = r.token(u, "dev-"+u)
		var snap struct {
			Cursor string `json:"cursor"`
		}
		if status := r.get("/snapshot", toks[u], &snap); status != http.StatusOK {
			t.Fatalf("snapshot of %s: %d", u, status)
		}
		f := &follower{r: r, conv: conv, tok: toks[u], cursor: snap.Cursor}
		f.connect()
		followers = append(followers, f)
	}
	defer func() {
		for _, f := range followers {
			f.disconnect()
		}
	}()

	log := sendLog{owner: map[string]string{}, answers: map[string][]answer{}}
	newID := func(user string) string {
		id := fmt.Sprintf("%s-m%d", conv, len(log.order)+1)
		log.owner[id] = user
		log.order = append(log.order, id)
		return id
	}
	for i := range rapid.IntRange(3, 12).Draw(t, "actions") {
		user := rapid.SampledFrom(users).Draw(t, fmt.Sprintf("user %d", i))
		switch action := rapid.SampledFrom([]string{"send", "send", "retry", "lost", "reconnect", "crash"}).Draw(t, fmt.Sprintf("action %d", i)); {
		case action == "send" || action == "retry" && len(log.order) == 0:
			m.sendOnce(t, conv, toks[user], newID(user), &log)
		case action == "retry":
			id := rapid.SampledFrom(log.order).Draw(t, fmt.Sprintf("retried %d", i))
			m.sendOnce(t, conv, toks[log.owner[id]], id, &log)
		case action == "lost":
			// The client gives up before the answer: the request may
			// never have reached the bridge, or been produced, decided
			// or not.
			m.lost++
			giveUp := time.Duration(rapid.IntRange(0, 300).Draw(t, fmt.Sprintf("gives up after ms %d", i))) * time.Millisecond
			ctx, cancel := context.WithTimeout(r.ctx, giveUp)
			id := newID(user)
			_, _ = r.post(ctx, conv, "messages", toks[user], message(id))
			cancel()
		case action == "reconnect":
			m.reconnects++
			f := rapid.SampledFrom(followers).Draw(t, fmt.Sprintf("reconnects %d", i))
			f.disconnect()
			f.connect()
		case action == "crash" && m.stopped != nil:
			m.restart()
		case action == "crash" && m.crashes < maxCrashes:
			// The processor stops in the middle of what comes next, and
			// a new one starts at the next crash or once the actions end.
			m.crashes++
			m.stopped = make(chan struct{})
			after := time.Duration(rapid.IntRange(0, 200).Draw(t, fmt.Sprintf("stops after ms %d", i))) * time.Millisecond
			go func(stopped chan struct{}) {
				time.Sleep(after)
				r.stopProcessor()
				close(stopped)
			}(m.stopped)
		}
	}
	if m.stopped != nil {
		m.restart()
	}
	// Every client retries what it has not learned, until decided.
	for _, id := range log.order {
		a := r.sendUntilDecided(t, conv, toks[log.owner[id]], id)
		log.answers[id] = append(log.answers[id], a)
	}
	seqOf := checkSendAnswers(t, &log)
	for _, f := range followers {
		f.awaitSeq(t, int64(len(log.order)))
		f.check(t, seqOf)
	}
}

func message(id string) map[string]string {
	return map[string]string{"client_message_id": id, "body": "text of " + id}
}

// sendOnce sends message id once and keeps the answer when decided.
func (m *sendModel) sendOnce(t *rapid.T, conv, tok, id string, log *sendLog) {
	m.sends++
	a := m.r.send(t, conv, tok, message(id))
	switch a.status {
	case http.StatusAccepted:
		m.pending++
	case http.StatusCreated, http.StatusOK:
		log.answers[id] = append(log.answers[id], a)
	default:
		t.Fatalf("send %s: %s", id, a)
	}
}

// checkSendAnswers checks that each id was given one sequence, told to
// its sender every time it was decided and applied at most once, and that
// the sequences are 1..N; it returns the id of each sequence.
func checkSendAnswers(t *rapid.T, log *sendLog) map[int64]string {
	idOf := map[int64]string{}
	for _, id := range log.order {
		as := log.answers[id]
		created := 0
		for _, a := range as {
			if a.status == http.StatusCreated {
				created++
			}
			if a.ConversationSeq != as[0].ConversationSeq || a.MessageID != as[0].MessageID || a.AcceptedAtMs != as[0].AcceptedAtMs || a.ClientMessageID != id {
				t.Fatalf("%s answered %s, then %s", id, as[0], a)
			}
		}
		if created > 1 {
			t.Fatalf("%s applied %d times: %v", id, created, as)
		}
		seq := as[0].ConversationSeq
		if other, taken := idOf[seq]; taken {
			t.Fatalf("sequence %d given to %s and %s", seq, other, id)
		}
		idOf[seq] = id
	}
	for seq := int64(1); seq <= int64(len(log.order)); seq++ {
		if _, ok := idOf[seq]; !ok {
			t.Fatalf("no message has sequence %d of %d: %v", seq, len(log.order), idOf)
		}
	}
	return idOf
}

// follower is a member following the conversation's events, resuming
// from its last cursor after a disconnect.
type follower struct {
	r      *sendRig
	conv   string
	tok    string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	cursor  string
	version int64
	// seqs and ids are each message seen, by the state that brought it.
	seqs []int64
	ids  []string
	err  error
}

func (f *follower) connect() {
	ctx, cancel := context.WithCancel(f.r.ctx)
	f.cancel, f.done = cancel, make(chan struct{})
	f.mu.Lock()
	cursor := f.cursor
	f.mu.Unlock()
	go func() {
		defer close(f.done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.r.bridge+"/v1/streams/"+f.r.s.Name+"/events?key="+f.conv+"&cursor="+cursor, nil)
		req.Header.Set("Authorization", "Bearer "+f.tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			f.fail(fmt.Errorf("events: %d", resp.StatusCode))
			return
		}
		_ = readSSE(resp.Body, func(id, event, data string) error {
			if event == "state" {
				f.see(id, data)
			}
			return nil
		})
	}()
}

func (f *follower) disconnect() {
	f.cancel()
	<-f.done
}

func (f *follower) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

// see takes one state of the conversation: every change once (its
// version grows), and a message in it when its last_seq moves on, by one.
func (f *follower) see(cursor, data string) {
	var e struct {
		Version int64 `json:"version"`
		State   struct {
			LastSeq     int64 `json:"last_seq"`
			LastMessage struct {
				ClientMessageID string `json:"client_message_id"`
			} `json:"last_message"`
		} `json:"state"`
	}
	err := json.Unmarshal([]byte(data), &e)
	f.mu.Lock()
	defer f.mu.Unlock()
	last := int64(len(f.seqs))
	switch {
	case err != nil:
		err = fmt.Errorf("state %s: %w", data, err)
	case e.Version <= f.version:
		err = fmt.Errorf("version %d after %d: a change seen twice or out of order", e.Version, f.version)
	case e.State.LastSeq > last:
		f.seqs, f.ids = append(f.seqs, e.State.LastSeq), append(f.ids, e.State.LastMessage.ClientMessageID)
	}
	if err != nil && f.err == nil {
		f.err = err
	}
	f.version, f.cursor = max(f.version, e.Version), cursor
}

// awaitSeq waits until the follower has seen message n.
func (f *follower) awaitSeq(t *rapid.T, n int64) {
	if !testenv.Poll(f.r.ctx, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return int64(len(f.seqs)) >= n || f.err != nil
	}) {
		t.Fatalf("a follower of %s never saw message %d", f.conv, n)
	}
}

// check: each message seen once, in order, the one its sender was told.
func (f *follower) check(t *rapid.T, idOf map[int64]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		t.Fatalf("a follower of %s: %v", f.conv, f.err)
	}
	for i, seq := range f.seqs {
		if seq != int64(i+1) || f.ids[i] != idOf[seq] {
			t.Fatalf("a follower of %s saw %v (%v); want 1..%d, ids %v", f.conv, f.seqs, f.ids, len(idOf), idOf)
		}
	}
	if !slices.IsSorted(f.seqs) || len(f.seqs) != len(idOf) {
		t.Fatalf("a follower of %s saw %v of %d", f.conv, f.seqs, len(idOf))
	}
}
