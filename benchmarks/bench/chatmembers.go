package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// follower is one member following its conversation with one SSE
// connection (`events?key=`), with a token of its own, from the cursor of
// its own snapshot. It notes when it first held a state covering each
// conversation_seq, and what would make a delivery wrong.
type follower struct {
	conv        int
	user, token string
	// recv[s] is when the member first held a state whose last_seq
	// covers s (unix ns); 0 until then.
	mu   sync.Mutex
	recv []int64
	// clientIDs[s] is the last message's client id in the state that
	// first reached last_seq s, for the check that seq s is the message
	// sent as s.
	clientIDs map[int64]string
	lastSeq   atomic.Int64
	version   int64
	// doubled counts states whose version was not above the last one
	// (the same change twice, or an older one after a newer); backwards
	// counts states whose last_seq went down; resets counts event: reset.
	doubled, backwards, resets int
	err                        error
}

// sseTransport carries every follower's connection: each its own.
func sseTransport() *http.Transport {
	return &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 1,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
}

// snapshotCursor takes the member's snapshot of the chat stream and
// returns its cursor (a client starts from it).
func snapshotCursor(ctx context.Context, client *http.Client, base, token string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/streams/chat/snapshot?limit=100", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var page struct {
		Cursor string `json:"cursor"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &page) != nil || page.Cursor == "" {
		return "", fmt.Errorf("snapshot: %d %s", resp.StatusCode, body)
	}
	return page.Cursor, nil
}

// follow opens the member's events and reads them until ctx ends;
// connected is called once the bridge has answered.
func (f *follower) follow(ctx context.Context, tr *http.Transport, base, conv, cursor string, connected func(error)) {
	u := fmt.Sprintf("%s/v1/streams/chat/events?key=%s&cursor=%s", base, url.QueryEscape(conv), url.QueryEscape(cursor))
	var resp *http.Response
	var err error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+f.token)
		resp, err = tr.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			break
		}
		// Admission: thousands of members connect at once, beyond the
		// bridge's accept rate; as a client does, come back when told.
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		resp.Body.Close()
		select {
		case <-ctx.Done():
			connected(ctx.Err())
			return
		case <-time.After(time.Duration(max(1, wait)) * time.Second):
		}
	}
	if err == nil && resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		err = fmt.Errorf("events: %d %s", resp.StatusCode, body)
	}
	connected(err)
	if err != nil {
		f.err = err
		return
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 16<<10)
	event := ""
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if ctx.Err() == nil {
				f.err = fmt.Errorf("the events ended: %v", err)
			}
			return
		}
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			event = string(bytes.TrimSpace(line[len("event: "):]))
		case bytes.HasPrefix(line, []byte("data: ")) && event == "state":
			f.state(line[len("data: "):], time.Now().UnixNano())
		case bytes.HasPrefix(line, []byte("data: ")) && event == "reset":
			f.resets++
		}
	}
}

// state takes one state message's Entity, received at at.
func (f *follower) state(data []byte, at int64) {
	version, ok1 := intAfter(data, `"version":`)
	last, ok2 := intAfter(data, `"last_seq":`)
	if !ok1 || !ok2 {
		f.err = fmt.Errorf("a state without version or last_seq: %.200s", data)
		return
	}
	if version <= f.version {
		f.doubled++
		return
	}
	f.version = version
	prev := f.lastSeq.Load()
	switch {
	case last < prev:
		f.backwards++
		return
	case last == prev:
		return // a change that carries no new message (a member, a receipt)
	}
	f.mu.Lock()
	for int64(len(f.recv)) <= last {
		f.recv = append(f.recv, make([]int64, len(f.recv)+64)...)
	}
	for s := prev + 1; s <= last; s++ {
		f.recv[s] = at
	}
	if f.clientIDs == nil {
		f.clientIDs = map[int64]string{}
	}
	f.clientIDs[last] = lastClientMessageID(data)
	f.mu.Unlock()
	f.lastSeq.Store(last)
}

// intAfter reads the integer after the first key in b (an Entity's JSON,
// as the bridge writes it compact): a full decode of each of hundreds of
// thousands of states would cost the bench process more than the bridge.
func intAfter(b []byte, key string) (int64, bool) {
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	b = b[i+len(key):]
	j := 0
	for j < len(b) && (b[j] >= '0' && b[j] <= '9' || j == 0 && b[j] == '-') {
		j++
	}
	n, err := strconv.ParseInt(string(b[:j]), 10, 64)
	return n, err == nil
}

// lastClientMessageID is the client message id of the state's last
// message: the send's body is the last thing in the state that has one.
func lastClientMessageID(b []byte) string {
	key := []byte(`"client_message_id":"`)
	i := bytes.LastIndex(b, key)
	if i < 0 {
		return ""
	}
	b = b[i+len(key):]
	if j := bytes.IndexByte(b, '"'); j >= 0 {
		return string(b[:j])
	}
	return ""
}
