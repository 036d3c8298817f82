package realtime

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// A key's bucket allows at most burst + rate × elapsed events, allows
// one again once the wait it named has passed, and is forgotten only
// when full, so sweeping changes no verdict; other keys do not count.
func TestBucketsAllowTheRateAndTheBurst(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := rapid.Float64Range(0.1, 50).Draw(t, "rate")
		burst := rapid.IntRange(1, 20).Draw(t, "burst")
		now := time.Unix(1_700_000_000, 0)
		b := newBuckets(config.TokenBucket{Rate: rate, Burst: burst}, func() time.Time { return now })
		b.sweepOver = 2 // sweep at every new key
		start := now
		taken := map[string]int{}
		for i := range rapid.IntRange(1, 200).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 300).Draw(t, fmt.Sprintf("ms %d", i))) * time.Millisecond)
			key := rapid.SampledFrom([]string{"alice", "bob", "carol"}).Draw(t, fmt.Sprintf("key %d", i))
			ok, wait := b.take(key)
			if ok {
				taken[key]++
				allowed := float64(burst) + rate*now.Sub(start).Seconds()
				if float64(taken[key]) > allowed+1e-9 {
					t.Fatalf("%s: %d events after %s, at most %.2f allowed", key, taken[key], now.Sub(start), allowed)
				}
				continue
			}
			if wait <= 0 || wait > time.Duration(float64(time.Second)/rate)+time.Millisecond {
				t.Fatalf("refused with a wait of %s at rate %.2f", wait, rate)
			}
			now = now.Add(wait + time.Microsecond)
			if ok, _ := b.take(key); !ok {
				t.Fatalf("%s refused again after the wait it was given (%s)", key, wait)
			}
			taken[key]++
		}
	})
}

// The buckets held are those not full: keys active at once are all
// held, and once quiet for burst/rate they are forgotten when the map
// next doubles.
func TestBucketsForgetQuietKeys(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBuckets(config.TokenBucket{Rate: 10, Burst: 10}, func() time.Time { return now })
	for i := range 3 * minSweep {
		b.take(fmt.Sprint(i))
	}
	if n := b.size(); n != 3*minSweep {
		t.Fatalf("%d buckets held for %d keys active at once", n, 3*minSweep)
	}
	now = now.Add(2 * time.Second)
	for i := range 2 * minSweep {
		b.take(fmt.Sprint("again-", i))
	}
	if n := b.size(); n > 2*minSweep {
		t.Fatalf("%d buckets held for %d active keys, after the first went quiet", n, 2*minSweep)
	}
	if off := newBuckets(config.TokenBucket{}, time.Now); off != nil {
		t.Fatal("a rate of 0 limits")
	} else if ok, _ := off.take("x"); !ok {
		t.Fatal("no limit refused")
	}
}

// Fields the bridge sets go where the stream's pointers say, nested and
// escaped; a client's body holding one is refused, pointer by pointer;
// the client's other fields pass through, a large integer exactly.
func TestEventBodyPointers(t *testing.T) {
	obj, err := parseObject([]byte(`{"body":"hi","meta":{"a~b":{"c/d":1}},"n":12345678901234567890}`))
	if err != nil {
		t.Fatal(err)
	}
	set := setByBridge{{"/sender", "alice"}, {"/meta/a~0b/c~1d", "x"}, {"/deep/er", "y"}, {"", "skipped"}}
	problems := obj.refuseClientValues(set)
	if len(problems) != 1 || problems[0].Pointer != "/meta/a~0b/c~1d" {
		t.Fatalf("refused %v, want /meta/a~0b/c~1d alone", problems)
	}
	body, err := obj.build(set[2:])
	if err != nil {
		t.Fatal(err)
	}
	built, err := parseObject(body)
	if err != nil {
		t.Fatal(err)
	}
	if built.text("/deep/er") != "y" || built.text("/body") != "hi" || built.has("/sender") {
		t.Fatalf("built %s", body)
	}
	if n, _ := built.lookup("/n"); fmt.Sprint(n) != "12345678901234567890" {
		t.Fatalf("a large integer became %v in %s", n, body)
	}
	if _, err := obj.build(setByBridge{{"/meta/a~0b/new", "x"}}); err == nil {
		t.Fatal("a field set inside the client's value was built")
	}
	for _, bad := range []string{`[]`, `"x"`, `null`, `{"a":1} {}`, `{"a":`} {
		if _, err := parseObject([]byte(bad)); err == nil {
			t.Errorf("%s taken as an object", bad)
		}
	}
}

// A waiter hears of its event's outcome, whatever it is; no one else's,
// and nothing once it stopped waiting.
func TestDecisionsWakeTheirWaiter(t *testing.T) {
	d := newDecisions()
	mine, done := d.await("e1")
	d.deliver(&record.Outcome{EventID: "e2", Outcome: record.Applied, Version: 9})
	d.deliver(&record.Outcome{EventID: "e1", Outcome: record.Duplicate, Version: 3, MessageID: "c:3", ReceivedAtMs: 20, AcceptedAtMs: 10})
	d.deliver(&record.Outcome{EventID: "e1", Outcome: record.Duplicate, Version: 3}) // read again
	select {
	case got := <-mine:
		if got.Outcome != record.Duplicate || got.Version != 3 || got.MessageID != "c:3" || got.acceptedAtMs() != 10 {
			t.Fatalf("decision %+v", got)
		}
	default:
		t.Fatal("the waiter was not woken")
	}
	done()
	d.deliver(&record.Outcome{EventID: "e1", Outcome: record.Applied})
	if len(mine) != 0 || d.n.Load() != 0 {
		t.Fatal("an ended wait was woken or kept")
	}
}

// A write's device: the claim, else the header; a header naming another
// device than the claim, or none at all, is refused.
func TestRequireDevice(t *testing.T) {
	for _, c := range []struct {
		claim, header, want string
		status              int
	}{
		{"phone", "", "phone", 0},
		{"phone", "phone", "phone", 0},
		{"", "tablet", "tablet", 0},
		{"phone", "tablet", "", http.StatusForbidden},
		{"", "", "", http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if c.header != "" {
			r.Header.Set(DeviceHeader, c.header)
		}
		q := &request{w: rec, r: r, user: &claims{Device: c.claim}}
		got, ok := requireDevice(q)
		if got != c.want || ok != (c.status == 0) || (c.status != 0 && rec.Code != c.status) {
			t.Errorf("claim %q header %q: %q %v %d; want %q %d", c.claim, c.header, got, ok, rec.Code, c.want, c.status)
		}
	}
}
