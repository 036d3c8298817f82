package relay

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"
)

// Against a model of a batch: every request is either sent or superseded,
// once; exactly one per key is sent, the key's last in the log; a
// superseded one has a later request of its key; both keep log order.
func TestNewestPerKeyAgainstAModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", "c", "d"}), 0, 30).Draw(t, "keys")
		var reqs []*request
		for i, k := range keys {
			reqs = append(reqs, &request{rec: &kgo.Record{Key: []byte(k), Offset: int64(i)}, id: fmt.Sprint(i)})
		}
		send, superseded := newestPerKey(reqs)
		if len(send)+len(superseded) != len(reqs) {
			t.Fatalf("%d sent and %d superseded of %d", len(send), len(superseded), len(reqs))
		}
		lastOf := map[string]int64{}
		for i, k := range keys {
			lastOf[k] = int64(i)
		}
		sentKeys := map[string]bool{}
		for i, r := range send {
			k := string(r.rec.Key)
			if sentKeys[k] {
				t.Fatalf("key %s sent twice: at most one request per key in flight", k)
			}
			sentKeys[k] = true
			if r.rec.Offset != lastOf[k] {
				t.Fatalf("key %s: sent offset %d, its newest is %d", k, r.rec.Offset, lastOf[k])
			}
			if i > 0 && send[i-1].rec.Offset > r.rec.Offset {
				t.Fatal("sent out of log order")
			}
		}
		if len(sentKeys) != len(lastOf) {
			t.Fatalf("%d keys sent, the batch has %d", len(sentKeys), len(lastOf))
		}
		for i, r := range superseded {
			if r.rec.Offset >= lastOf[string(r.rec.Key)] {
				t.Fatalf("offset %d superseded with no later request of key %s", r.rec.Offset, r.rec.Key)
			}
			if i > 0 && superseded[i-1].rec.Offset > r.rec.Offset {
				t.Fatal("superseded out of log order")
			}
		}
	})
}
