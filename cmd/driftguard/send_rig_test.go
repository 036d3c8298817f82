package main

// The rig of the tests of clients' writes through the bridge: a uniquely
// named chat stream on a broker, decided by the transactional runtime
// (processors.NewService), which a test stops and starts again, and a
// bridge serving it; members are added by events written to
// `<stream>.in` as ingest writes them.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/service"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// sendRigSecret is the bridge's token key.
const sendRigSecret = "send-test-secret-0123456789abcdef0123"

type sendRig struct {
	t       testing.TB
	ctx     context.Context
	cfg     *config.Config
	s       *config.Stream
	brokers []string
	cl      *kgo.Client
	// bridge is the bridge's base URL.
	bridge string
	// stopProcessor stops the running processor; nil when none runs.
	stopProcessor func()
	events        int
}

// startSendRig starts the stream's processor and a bridge; change tunes
// the configuration first.
func startSendRig(t testing.TB, brokers []string, change func(*config.Config)) *sendRig {
	t.Helper()
	ctx := testenv.Context(t, 5*time.Minute)
	s := testenv.Shipped(t, "chat")
	s.Name = testenv.UniqueName("send")
	s.Limits.Partitions = 3
	cfg := testenv.OnlyStream(t, s)
	cfg.Kafka.Brokers = brokers
	cfg.Processing.CommitInterval = 10 * time.Millisecond
	cfg.Processing.FetchMinBytes = 1
	cfg.Bridge.Secret = sendRigSecret
	if change != nil {
		change(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &sendRig{t: t, ctx: ctx, cfg: cfg, s: s, brokers: brokers, cl: testenv.Topics(t, ctx, cfg, brokers)}
	t.Cleanup(r.cl.Close)
	ln := listen(t)
	r.bridge = "http://" + ln.Addr().String()
	b, err := realtime.New(realtime.Options{Config: cfg, Brokers: brokers, Logger: testenv.Logger(t), Listener: ln, OpsListener: bridgeOpsListener(t, r.bridge)})
	if err != nil {
		t.Fatal(err)
	}
	runServices(t, ctx, "bridge", b)
	r.startProcessor()
	t.Cleanup(func() {
		if r.stopProcessor != nil {
			r.stopProcessor()
		}
	})
	waitReady(t, ctx, "the bridge", r.bridge)
	return r
}

// startProcessor runs a processor of the stream until stopProcessor.
func (r *sendRig) startProcessor() {
	runCtx, cancel := context.WithCancel(r.ctx)
	done := make(chan error, 1)
	svc := processors.NewService(processors.ServiceOptions{Config: r.cfg, Brokers: r.brokers, Logger: testenv.Logger(r.t), InMemoryTables: true})
	go func() { done <- service.RunAll(runCtx, svc) }()
	r.stopProcessor = func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("processor: %v", err)
		}
		r.stopProcessor = nil
	}
}

// token is a token of user on device (no device claim when empty).
func (r *sendRig) token(user, device string) string {
	r.t.Helper()
	tok, err := realtime.SignDevice([]byte(sendRigSecret), user, device, []string{r.s.Name}, time.Now().Add(time.Hour))
	if err != nil {
		r.t.Fatal(err)
	}
	return tok
}

// addMembers adds users to conversation conv by events written to
// `<stream>.in` as ingest writes them, and waits until the bridge shows
// the conversation to each.
func (r *sendRig) addMembers(t testenv.Fataler, conv string, users ...string) {
	in := naming.Prefixes{}.For(r.s.Name).In
	var recs []*kgo.Record
	for _, u := range users {
		r.events++
		id := fmt.Sprintf("member-%d", r.events)
		body, _ := json.Marshal(map[string]string{"event_id": id, "type": "member.added", "conversation_id": conv, "user_id": u})
		rec := kafka.NewInput(in, []byte(r.s.Name), []byte(config.SchemeStandardWebhooks), body,
			kafka.InputFields{Key: conv, EventID: id, Type: "member.added"}, time.Now())
		recs = append(recs, &rec.Record)
	}
	if err := r.cl.ProduceSync(r.ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		tok := r.token(u, "")
		if !testenv.Poll(r.ctx, func() bool {
			var e struct {
				State struct {
					Members []string `json:"members"`
				} `json:"state"`
			}
			return r.get("/entities/"+conv, tok, &e) == http.StatusOK && slices.Contains(e.State.Members, u)
		}) {
			t.Fatalf("%s never shown as a member of %s", u, conv)
		}
	}
}

// get GETs a path of the stream and decodes a 200 into v.
func (r *sendRig) get(path, tok string, v any) int {
	req, _ := http.NewRequestWithContext(r.ctx, http.MethodGet, r.bridge+"/v1/streams/"+r.s.Name+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && v != nil {
		_ = json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}

// answer is a write's answer: status, headers and body, decoded as a
// send's or receipt's result, or a problem.
type answer struct {
	status int
	header http.Header
	body   []byte
	// The fields of the answers.
	Status          string `json:"status"`
	ConversationSeq int64  `json:"conversation_seq"`
	MessageID       string `json:"message_id"`
	ClientMessageID string `json:"client_message_id"`
	AcceptedAtMs    int64  `json:"accepted_at_ms"`
	EventID         string `json:"event_id"`
	Type            string `json:"type"`
	Errors          []struct {
		Pointer string `json:"pointer"`
	} `json:"errors"`
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.status, bytes.TrimSpace(a.body)) }

// problemIs reports whether the answer is a problem of kind.
func (a answer) problemIs(kind string) bool { return strings.HasSuffix(a.Type, "/"+kind) }

// post POSTs body (JSON, or raw bytes) to path of conversation conv
// (messages, receipts) with the token and headers (name, value pairs).
func (r *sendRig) post(ctx context.Context, conv, path, tok string, body any, headers ...string) (answer, error) {
	raw, ok := body.([]byte)
	if !ok {
		raw, _ = json.Marshal(body)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.bridge+"/v1/streams/"+r.s.Name+"/entities/"+conv+"/"+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	if a.body, err = io.ReadAll(resp.Body); err != nil {
		return answer{}, err
	}
	_ = json.Unmarshal(a.body, &a)
	return a, nil
}

// send is post of a message, failing the test on a transport error.
func (r *sendRig) send(t testenv.Fataler, conv, tok string, body any, headers ...string) answer {
	a, err := r.post(r.ctx, conv, "messages", tok, body, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// sendUntilDecided sends message clientID until the answer is not 202
// pending, as a client does.
func (r *sendRig) sendUntilDecided(t testenv.Fataler, conv, tok, clientID string) answer {
	for {
		a := r.send(t, conv, tok, map[string]string{"client_message_id": clientID, "body": "text of " + clientID})
		if a.status != http.StatusAccepted {
			return a
		}
		if r.ctx.Err() != nil {
			t.Fatalf("%s never decided", clientID)
		}
	}
}

// metric is the value of the bridge's series named by its text (name and
// labels as /metrics prints them), -1 when absent.
func (r *sendRig) metric(series string) float64 {
	resp, err := http.Get(opsOf(r.bridge) + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(text), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}
