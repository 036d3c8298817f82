package relay

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/record"
)

// deliveredRecord is the relay's record of key's gap at from, accepted at at.
func deliveredRecord(key string, from int64, at time.Time) *kgo.Record {
	value, _ := json.Marshal(record.ReplayDelivery{Key: key, FromSequence: from, Result: record.ReplayDelivered, AtMs: at.UnixMilli()})
	return &kgo.Record{Key: []byte(key), Value: value, Headers: []kgo.RecordHeader{{Key: record.HeaderReplayDelivery}}}
}

// A relay's requests over time, each sent unless gaps holds it back, and
// each sent one remembered: no gap is sent twice within resend_after, a
// request held back has a delivery of its key within resend_after at its
// gap or a later one (nothing is lost), and once resend_after has passed
// since a key's last delivery its next request is sent. Sweeps in between
// change no verdict.
func TestGapsSendEachGapOnceWithinResendAfter(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		resendAfter := time.Duration(rapid.IntRange(1, 100).Draw(t, "resend_after_ms")) * time.Millisecond
		g := newGaps(resendAfter)
		type sent struct {
			from int64
			at   time.Time
		}
		history := map[string][]sent{}
		now := time.UnixMilli(1_700_000_000_000)
		for range rapid.IntRange(0, 60).Draw(t, "requests") {
			now = now.Add(time.Duration(rapid.IntRange(0, 40).Draw(t, "ms")) * time.Millisecond)
			if rapid.Bool().Draw(t, "sweep") {
				g.sweep(now)
			}
			key := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "key")
			from := rapid.Int64Range(1, 4).Draw(t, "from")
			verdict := g.verdict(key, from, now)
			past := history[key]
			var last *sent
			if len(past) > 0 {
				last = &past[len(past)-1]
			}
			recent := last != nil && now.Sub(last.at) < resendAfter
			switch {
			case verdict == "":
				for _, s := range past {
					if s.from == from && now.Sub(s.at) < resendAfter {
						t.Fatalf("%s from %d sent again %s after it was, within %s", key, from, now.Sub(s.at), resendAfter)
					}
				}
				history[key] = append(past, sent{from: from, at: now})
				g.observe(deliveredRecord(key, from, now))
			case !recent:
				t.Fatalf("%s from %d held back (%s) with no delivery of the key within %s", key, from, verdict, resendAfter)
			case verdict == record.ReplayDuplicate && last.from != from,
				verdict == record.ReplaySuperseded && last.from <= from:
				t.Fatalf("%s from %d: %s, but the key's last delivery was from %d", key, from, verdict, last.from)
			}
		}
	})
}

// gaps remembers each key's latest delivery, whatever the order in which
// it reads the delivery records, and reading one again changes nothing: a relay reads its own back
// after it committed them, and another's after a rebalance.
func TestGapsRememberTheLatestDeliveryInAnyOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		now := time.UnixMilli(1_700_000_000_000)
		var records []*kgo.Record
		for i := range rapid.IntRange(0, 20).Draw(t, "deliveries") {
			key := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "key")
			// Distinct times: a key's latest delivery is one record.
			records = append(records, deliveredRecord(key, rapid.Int64Range(1, 5).Draw(t, "from"), now.Add(time.Duration(i)*time.Millisecond)))
		}
		inOrder := newGaps(time.Minute)
		latest := map[string]deliveredGap{}
		for _, r := range records {
			inOrder.observe(r)
			var d record.ReplayDelivery
			_ = json.Unmarshal(r.Value, &d)
			latest[d.Key] = deliveredGap{from: d.FromSequence, at: time.UnixMilli(d.AtMs)}
		}
		if !reflect.DeepEqual(inOrder.byKey, latest) {
			t.Fatalf("remembered %+v, want each key's latest delivery %+v", inOrder.byKey, latest)
		}
		shuffled := newGaps(time.Minute)
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, max(len(records)-1, 0)), 0, 40).Draw(t, "reads") {
			if len(records) > 0 {
				shuffled.observe(records[i])
			}
		}
		for _, r := range records {
			shuffled.observe(r)
		}
		for i := range records {
			shuffled.observe(records[len(records)-1-i])
		}
		for key, want := range inOrder.byKey {
			if got := shuffled.byKey[key]; got != want {
				t.Fatalf("%s: remembered %+v read out of order, %+v in order", key, got, want)
			}
		}
		if len(shuffled.byKey) != len(inOrder.byKey) {
			t.Fatalf("%d keys remembered out of order, %d in order", len(shuffled.byKey), len(inOrder.byKey))
		}
	})
}
