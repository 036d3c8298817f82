package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/sinks/realtime"
)

// The chat's composer in a real browser, against `driftguard dev
// --no-sink`: the page shows the ticks of the user's message as another
// member's receipts come (sent, delivered, read); shows that member's
// typing, sent through the bridge, until its expires_at_ms and not after,
// and their typing sent as a webhook through ingest;
// sends the user's typing while they write; sends a message through the
// bridge with a client_message_id kept in localStorage until acknowledged,
// and shows it once, with the conversation_seq of the acknowledgement; and
// posts its own receipts, delivered and read, for what it shows.
func TestPageChatComposer(t *testing.T) {
	chromium := testenv.Chromium(t)
	bin := buildDriftguard(t)
	ctx := testenv.Context(t, 5*time.Minute)
	shots := screenshotsDir(t)
	banner, bridgeAddr := startDevForPage(t, ctx, bin)
	base := "http://" + bridgeAddr

	send := newPageTraffic(banner.webhooks)
	for _, w := range []pageWebhook{
		send.chat(pageConversation, "member.added", map[string]any{"user_id": pageUser}),
		send.chat(pageConversation, "member.added", map[string]any{"user_id": "bob"}),
		send.message(pageConversation, "bob", "bob-1", "Morning! The build is green."),
		send.message(pageConversation, pageUser, "demo-1", "Great, deploying next."),
	} {
		if err := w.post(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sign := func(user string) string {
		tok, err := realtime.Sign([]byte(pageSecret), user, []string{"*"}, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	demo, bob := sign(pageUser), sign("bob")
	chrome := openBrowser(t, ctx, chromium)
	b := chrome.open(base + "/#token=" + demo)
	// Each step waits a minute at most: what the page shows then says why.
	chatNow := func(what string, cond func(pageChat) bool) pageChat {
		t.Helper()
		var c pageChat
		stepCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if !testenv.Poll(stepCtx, func() bool { c = readPageChat(t, b); return cond(c) }) {
			t.Fatalf("timed out waiting for %s; the chat shows %+v", what, c)
		}
		return c
	}
	chatNow("the two messages", func(c pageChat) bool { return len(c.Messages) == 2 })

	// Ticks of demo's message (2) as bob's receipts come.
	for _, step := range []struct{ receipt, tick string }{{"", "sent"}, {"receipt.delivered", "delivered"}, {"receipt.read", "read"}} {
		if step.receipt != "" {
			w := send.chat(pageConversation, step.receipt, map[string]any{"user_id": "bob", "device_id": "bob-phone", "conversation_seq": 2})
			if err := w.post(ctx); err != nil {
				t.Fatal(err)
			}
		}
		chatNow("demo's message "+step.tick, func(c pageChat) bool { return c.Messages[1].Seq == 2 && c.Messages[1].Tick == step.tick })
	}

	// Bob's typing, through the bridge: shown, then gone at its expiry
	// and not before.
	status, answer := postBridge(t, ctx, base, bob, "typing", map[string]any{})
	if status != http.StatusAccepted {
		t.Fatalf("bob's typing: %d %v", status, answer)
	}
	expires := int64(answer["expires_at_ms"].(float64))
	chatNow("bob typing", func(c pageChat) bool { return c.Typing == "bob" && strings.Contains(c.TypingText, "bob is typing") })
	b.screenshot(shots, "5-chat.png")
	gone := chatNow("bob's typing gone", func(c pageChat) bool { return c.Typing == "" })
	if gone.NowMs < expires {
		t.Errorf("bob's typing gone at %d, before its expiry at %d", gone.NowMs, expires)
	}
	// Typing from a backend, a signed webhook through ingest, shows alike.
	if err := send.chat(pageConversation, "typing", map[string]any{"user_id": "bob"}).post(ctx); err != nil {
		t.Fatal(err)
	}
	chatNow("bob typing through ingest", func(c pageChat) bool { return c.Typing == "bob" })
	chatNow("bob's typing through ingest gone", func(c pageChat) bool { return c.Typing == "" })

	// Demo writes and sends: their typing reaches the bridge while they
	// write; the message is acknowledged with the next sequence, shown
	// once, and leaves the outbox.
	typedBefore := bridgeMetric(t, base, `driftguard_bridge_typing_posts_total{outcome="produced",stream="chat"}`)
	if err := chromedp.Do(b.ctx, chromedp.SendKeys(chromedp.CSS("#composer-text"), "Shipping at noon.")); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, ctx, "demo's typing produced", func() bool {
		return bridgeMetric(t, base, `driftguard_bridge_typing_posts_total{outcome="produced",stream="chat"}`) > typedBefore
	})
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS("#composer button"))); err != nil {
		t.Fatal(err)
	}
	// Needs the bridge's POST …/messages.
	sent := chatNow("the message acknowledged as 3", func(c pageChat) bool {
		return len(c.Messages) == 3 && c.Messages[2].Body == "Shipping at noon." && c.Pending == 0
	})
	if m := sent.Messages[2]; m.Seq != 3 || m.ClientMessageID == "" || m.Tick != "sent" || sent.Outbox != 0 {
		t.Errorf("the sent message %+v with %d in the outbox, want sequence 3, its client_message_id, ticked sent, and an empty outbox", m, sent.Outbox)
	}
	ref := newBridgeReader(ctx, base, demo)
	msgs, err := ref.messages(ctx, pageConversation)
	if err != nil || len(msgs) != 3 || msgs[2].Seq != 3 {
		t.Errorf("the conversation holds %v (%v), want the page's message as 3", msgs, err)
	}

	// Bob answers; the page posts demo's receipts for it: delivered when
	// shown, read while visible. Needs the bridge's POST …/receipts.
	if err := send.message(pageConversation, "bob", "bob-2", "Noon works.").post(ctx); err != nil {
		t.Fatal(err)
	}
	chatNow("bob's answer", func(c pageChat) bool { return len(c.Messages) == 4 })
	testenv.WaitFor(t, ctx, "demo's receipts of 4", func() bool {
		var e struct {
			State struct {
				Cursors map[string]struct{ Read, Delivered int64 } `json:"cursors"`
			} `json:"state"`
		}
		if err := ref.getJSON(ctx, "/v1/streams/chat/entities/"+pageConversation, &e); err != nil {
			return false
		}
		c := e.State.Cursors[pageUser]
		return c.Read >= 4 && c.Delivered >= 4
	})
	// Bob reads the page's message and types again: the whole picture.
	w := send.chat(pageConversation, "receipt.read", map[string]any{"user_id": "bob", "device_id": "bob-phone", "conversation_seq": 3})
	if err := w.post(ctx); err != nil {
		t.Fatal(err)
	}
	chatNow("the page's message read", func(c pageChat) bool { return c.Messages[2].Tick == "read" })
	if status, _ := postBridge(t, ctx, base, bob, "typing", map[string]any{}); status != http.StatusAccepted {
		t.Fatalf("bob's typing again: %d", status)
	}
	chatNow("bob typing again", func(c pageChat) bool { return c.Typing == "bob" })
	b.screenshot(shots, "6-chat-sent.png")
	b.checkClean()
}

// pageChat is what the conversation shown holds, read from the page.
type pageChat struct {
	Messages []struct {
		Seq             int64  `json:"seq"`
		ClientMessageID string `json:"clientMessageId"`
		Tick            string `json:"tick"`
		Body            string `json:"body"`
	} `json:"messages"`
	Pending int `json:"pending"`
	// PendingText is what the pending messages say (sending…, or why not).
	PendingText string `json:"pendingText"`
	Outbox      int    `json:"outbox"`
	Typing      string `json:"typing"`
	TypingText  string `json:"typingText"`
	NowMs       int64  `json:"nowMs"`
}

const pageChatJS = `(() => {
  const outbox = JSON.parse(localStorage.getItem('driftguard:outbox:' + '` + pageUser + `') || '[]');
  const typing = document.getElementById('typing');
  return {
    messages: [...document.querySelectorAll('#messages li[data-seq]')].map((li) => ({
      seq: Number(li.dataset.seq), clientMessageId: li.dataset.clientMessageId || '', tick: li.dataset.tick || '',
      body: li.querySelector('.body').textContent})),
    pending: document.querySelectorAll('#messages li[data-pending]').length,
    pendingText: [...document.querySelectorAll('#messages li[data-pending] .tick')].map((e) => e.textContent).join('; '),
    outbox: outbox.length,
    typing: typing.dataset.users || '', typingText: typing.textContent,
    nowMs: Date.now(),
  };
})()`

func readPageChat(t *testing.T, b *tab) pageChat {
	t.Helper()
	c, err := chromedp.Run(b.ctx, chromedp.Evaluate[pageChat](pageChatJS))
	if err != nil {
		t.Fatalf("reading the chat: %v", err)
	}
	return c
}

// postBridge POSTs body to what (typing, messages, receipts) of the page's
// conversation with tok, and returns the status and the answer.
func postBridge(t *testing.T, ctx context.Context, base, tok, what string, body any) (int, map[string]any) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/v1/streams/chat/entities/%s/%s", base, pageConversation, what), strings.NewReader(string(data)))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	return resp.StatusCode, answer
}

// bridgeMetric is one series of the bridge's /metrics, 0 when absent.
func bridgeMetric(t *testing.T, base, series string) float64 {
	t.Helper()
	body, err := readMetrics(opsOf(base) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
