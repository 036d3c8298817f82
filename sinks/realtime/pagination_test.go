package realtime_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
)

// R2: whatever is published while a client pages through a snapshot is
// recovered by the events from the snapshot's cursor: a client that
// applies the pages and then those events, each only when its version is
// above the one it holds, ends with every key's last version.
func TestPublicationsDuringPaginationAreRecovered(t *testing.T) {
	// The property's runs page from one address faster than any one
	// client would: bridge.source_rate is raised for them.
	e := newBridgeEnv(t, testenv.Fake(t), func(c *config.Config) { c.Bridge.SourceRate.Rate = 1e6 }, "presence")
	tok := e.token("watcher", "presence")
	iteration := 0
	rapid.Check(t, func(rt *rapid.T) {
		iteration++
		prefix := fmt.Sprintf("i%03d-", iteration)
		truth := map[string]int64{}
		publish := func(key string) {
			truth[key]++
			e.publishAsync("presence", prefix+key, truth[key], fmt.Sprintf(`{"presence":"v%d"}`, truth[key]))
		}
		keys := rapid.IntRange(1, 30).Draw(rt, "keys")
		for k := range keys {
			publish(fmt.Sprint(k))
		}
		if err := e.cl.Flush(e.ctx); err != nil {
			rt.Fatal(err)
		}
		e.waitFor(rt, tok, prefix, truth)
		held := map[string]int64{}
		apply := func(ent entityJSON) {
			if strings.HasPrefix(ent.Key, prefix) && ent.Version > held[ent.Key] {
				held[ent.Key] = ent.Version
			}
		}
		limit := rapid.IntRange(1, 8).Draw(rt, "limit")
		path := fmt.Sprintf("/v1/streams/presence/snapshot?limit=%d", limit)
		var cursor string
		for {
			var page snapshotPage
			if status := e.get(path, tok, &page); status != http.StatusOK {
				rt.Fatalf("snapshot: %d", status)
			}
			if cursor == "" {
				cursor = page.Cursor
			}
			for _, ent := range page.Entities {
				apply(ent)
			}
			// Between pages: changes to keys paged already and not yet,
			// and new keys.
			for range rapid.IntRange(0, 4).Draw(rt, "published between pages") {
				publish(fmt.Sprint(rapid.IntRange(0, keys+3).Draw(rt, "key")))
			}
			if page.NextPageToken == nil {
				break
			}
			path = fmt.Sprintf("/v1/streams/presence/snapshot?limit=%d&page_token=%s", limit, *page.NextPageToken)
		}
		if err := e.cl.Flush(e.ctx); err != nil {
			rt.Fatal(err)
		}
		s, status := e.open(e.ctx, "presence", tok, cursor, "")
		if status != http.StatusOK {
			rt.Fatalf("events: %d", status)
		}
		defer s.close()
		deadline := time.After(20 * time.Second)
		for !sameVersions(held, truth, prefix) {
			select {
			case ev, ok := <-s.events:
				if !ok {
					rt.Fatal("the events ended")
				}
				if ev.event != "state" {
					rt.Fatalf("event %+v", ev)
				}
				var ent entityJSON
				if err := json.Unmarshal([]byte(ev.data), &ent); err != nil {
					rt.Fatal(err)
				}
				apply(ent)
			case <-deadline:
				rt.Fatalf("the client holds %v, the stream %v", held, truth)
			}
		}
	})
}

// sameVersions reports whether held has every key of truth (under prefix)
// at its version.
func sameVersions(held, truth map[string]int64, prefix string) bool {
	if len(held) != len(truth) {
		return false
	}
	for k, v := range truth {
		if held[prefix+k] != v {
			return false
		}
	}
	return true
}

// waitFor waits until the bridge holds every key of truth under prefix at
// its version.
func (e *bridgeEnv) waitFor(t *rapid.T, tok, prefix string, truth map[string]int64) {
	until := time.Now().Add(20 * time.Second)
	for {
		held := map[string]int64{}
		_, ents := e.snapshot("presence", tok, 10000)
		for _, ent := range ents {
			if strings.HasPrefix(ent.Key, prefix) {
				held[ent.Key] = ent.Version
			}
		}
		if sameVersions(held, truth, prefix) {
			return
		}
		if time.Now().After(until) {
			t.Fatalf("the bridge holds %v, want %v", held, truth)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
