package realtime_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// What the bridge answers to a write before any processor decides it, on
// the embedded broker: writes to a stream that assigns no sequences are
// 404, a body that is no object 400, a device-less request 400, and a
// valid send, which no processor decides here, 202 pending once
// bridge.send_wait has passed; the decisions' answers are
// cmd/driftguard/send_test.go's, with the shipped runtime.
func TestWritesAnsweredBeforeTheDecision(t *testing.T) {
	e := newBridgeEnv(t, testenv.Fake(t), func(cfg *config.Config) { cfg.Bridge.SendWait = 100 * time.Millisecond }, "chat", "presence")
	tok, err := realtime.SignDevice([]byte(secret), "alice", "alice-phone", []string{"*"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	post := func(stream, path, tok, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(e.ctx, http.MethodPost, e.url+"/v1/streams/"+stream+"/entities/room/"+path, bytes.NewBufferString(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	for _, c := range []struct {
		stream, path, tok, body string
		status                  int
		kind                    string
	}{
		{"presence", "messages", tok, `{"client_message_id":"c1","body":"hi"}`, http.StatusNotFound, "not_chat"},
		{"chat", "messages", tok, `["c1"]`, http.StatusBadRequest, "json"},
		{"chat", "messages", e.token("alice", "chat"), `{"client_message_id":"c1","body":"hi"}`, http.StatusBadRequest, "device_required"},
		{"chat", "messages", tok, `{"client_message_id":"c1","body":"hi","conversation_id":"other"}`, http.StatusUnprocessableEntity, "schema"},
		{"chat", "messages", tok, `{"body":"hi"}`, http.StatusUnprocessableEntity, "schema"},
		{"chat", "receipts", tok, `{"type":"read"}`, http.StatusUnprocessableEntity, "schema"},
		{"chat", "messages", "", `{"client_message_id":"c1","body":"hi"}`, http.StatusUnauthorized, "unauthorized"},
	} {
		status, v := post(c.stream, c.path, c.tok, c.body)
		if status != c.status || v["type"] != "https://driftguard.dev/problems/"+c.kind {
			t.Errorf("%s %s %s: %d %v; want %d %s", c.stream, c.path, c.body, status, v, c.status, c.kind)
		}
	}
	status, v := post("chat", "messages", tok, `{"client_message_id":"c1","body":"hi"}`)
	if status != http.StatusAccepted || v["status"] != "pending" || v["event_id"] == "" || v["client_message_id"] != "c1" {
		t.Fatalf("an undecided send: %d %v", status, v)
	}
}
