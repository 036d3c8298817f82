package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/driftguard/driftguard/benchmarks/workload"
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/webhook"
)

// The ways a chat message enters driftguard.
const (
	viaIngest = "ingest" // a signed webhook to ingest, answered 202 once durable
	viaBridge = "bridge" // a member's send through the bridge, answered 201 with its sequence once applied
)

// ack is a message's durable acceptance: its conversation_seq and when
// the sender had the answer.
type ack struct {
	seq int64
	at  time.Time
	// sent is when the sender first sent it.
	sent time.Time
}

// chatSender sends chat events through ingest or the bridge.
type chatSender struct {
	st     *chatStack
	client *http.Client
	sign   *webhook.Signer
}

func newChatSender(st *chatStack, connections int) (*chatSender, error) {
	sign, err := webhook.NewSigner(config.SchemeStandardWebhooks, st.secret)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        connections,
		MaxIdleConnsPerHost: connections,
		DisableCompression:  true,
	}
	return &chatSender{st: st, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, sign: sign}, nil
}

// sendAttempts bounds the tries of one event: a 5xx, a 429 or no answer
// is tried again (the same event id, or the same client message id, so a
// retry is never a second message).
const sendAttempts = 20

// webhook posts a chat event to ingest until it is accepted (202).
func (s *chatSender) webhook(ctx context.Context, body workload.ChatBody) (time.Time, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return time.Time{}, err
	}
	status, _, at, err := s.try(ctx, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.st.ingestURL+"/v1/webhooks/chat", bytes.NewReader(b))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			s.sign.Sign(req.Header, body.EventID, b, time.Now())
		}
		return req, err
	})
	if err == nil && status != http.StatusAccepted {
		err = fmt.Errorf("ingest answered %d to %s", status, body.EventID)
	}
	return at, err
}

// sendMessage is a member's send through the bridge, from device: the conversation_seq
// of a 201 (applied) or 200 (a retry of one applied); a 202 (the decision
// not in yet) is asked again with the same client message id.
func (s *chatSender) sendMessage(ctx context.Context, token, device, conv, clientMessageID, text string) (ack, error) {
	b, _ := json.Marshal(map[string]string{"client_message_id": clientMessageID, "body": text})
	sent := time.Now()
	for {
		status, answer, at, err := s.try(ctx, func() (*http.Request, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost,
				s.st.bridgeURL+"/v1/streams/chat/entities/"+url.PathEscape(conv)+"/messages", bytes.NewReader(b))
			if err == nil {
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+token)
				// A send names its device: the token's claim, or this header.
				req.Header.Set("X-Driftguard-Device", device)
			}
			return req, err
		})
		if err != nil {
			return ack{}, err
		}
		switch status {
		case http.StatusCreated, http.StatusOK:
			var r struct {
				Seq int64 `json:"conversation_seq"`
			}
			if err := json.Unmarshal(answer, &r); err != nil || r.Seq <= 0 {
				return ack{}, fmt.Errorf("the bridge's %d to a send has no conversation_seq: %s", status, answer)
			}
			return ack{seq: r.Seq, at: at, sent: sent}, nil
		case http.StatusAccepted:
			// Pending: the same client message id again is answered with
			// the original result once decided.
		default:
			return ack{}, fmt.Errorf("the bridge answered %d to a send: %s", status, answer)
		}
	}
}

// try sends the request newReq makes until the answer is not one to try
// again, and returns its status, body and when it came.
func (s *chatSender) try(ctx context.Context, newReq func() (*http.Request, error)) (int, []byte, time.Time, error) {
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		req, err := newReq()
		if err != nil {
			return 0, nil, time.Time{}, err
		}
		status, body, wait := 0, []byte(nil), backoff
		resp, err := s.client.Do(req)
		at := time.Now()
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
			if secs, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && status == http.StatusTooManyRequests {
				wait = time.Duration(secs) * time.Second
			}
		}
		if status != 0 && status != http.StatusTooManyRequests && status < 500 {
			return status, body, at, nil
		}
		if attempt == sendAttempts || ctx.Err() != nil {
			return status, body, at, fmt.Errorf("no answer to keep after %d attempts (last: %d %v)", attempt, status, err)
		}
		select {
		case <-ctx.Done():
			return 0, nil, at, ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, time.Second)
	}
}
