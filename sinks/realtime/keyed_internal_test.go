package realtime

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/record"
)

// TestKeyLogAgreesWithTheLog applies random state records to a store with
// a small log and checks the index by key against a scan of the log and
// of every change ever made: a key's changes from any sequence number are
// exactly the log's changes of that key, in order; the index says a change
// of the key was evicted since a sequence number exactly when one was; and
// a client waiting for a key is woken by a change of that key and by no
// other.
func TestKeyLogAgreesWithTheLog(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		logSize := rapid.IntRange(1, 6).Draw(t, "log size")
		keys := rapid.IntRange(1, 5).Draw(t, "keys")
		s := newStore([16]byte{}, 2, logSize, 1000, false)
		var all []string // the key of every change the store made, by sequence number
		versions := map[string]int64{}
		offsets := []int64{0, 0}
		for range rapid.IntRange(1, 12).Draw(t, "applies") {
			waitKey := fmt.Sprint("k", rapid.IntRange(0, keys-1).Draw(t, "waited key"))
			s.mu.RLock()
			wake := s.keys.wake(waitKey)
			s.mu.RUnlock()
			p := int32(rapid.IntRange(0, 1).Draw(t, "partition"))
			var recs []stateRecord
			touched := false
			for range rapid.IntRange(1, 4).Draw(t, "records") {
				key := fmt.Sprint("k", rapid.IntRange(0, keys-1).Draw(t, "key"))
				v, seen := versions[key]
				v += rapid.Int64Range(0, 2).Draw(t, "version step") // 0: not a change, but for a new key
				if v > versions[key] || !seen {
					touched = touched || key == waitKey
					all = append(all, key)
				}
				versions[key] = v
				recs = append(recs, stateRecord{offset: offsets[p], st: record.State{Key: key, Version: v}, state: "{}"})
				offsets[p]++
			}
			s.apply(p, recs)
			if s.head != uint64(len(all)) {
				t.Fatalf("%d changes, the model made %d", s.head, len(all))
			}
			select {
			case <-wake:
				if !touched {
					t.Fatalf("a client of %s was woken by changes of other keys only", waitKey)
				}
			default:
				if touched {
					t.Fatalf("a client of %s was not woken by a change of it", waitKey)
				}
			}
			checkKeyLog(t, s, all, keys)
		}
	})
}

func checkKeyLog(t *rapid.T, s *store, all []string, keys int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	tail := s.tail()
	for k := range keys {
		key := fmt.Sprint("k", k)
		for from := uint64(0); from <= s.head; from++ {
			var want []uint64
			evicted := false
			for seq := from; seq < s.head; seq++ {
				switch {
				case all[seq] != key:
				case seq < tail:
					evicted = true
				default:
					want = append(want, seq)
				}
			}
			var got []uint64
			for _, c := range s.keyChangesFrom(key, from, 1000) {
				got = append(got, c.seq)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("changes of %s from %d: %v, the log holds %v", key, from, got, want)
			}
			if e := s.keyEvictedSince(key, from); e != evicted {
				t.Fatalf("evicted changes of %s since %d: %v, want %v", key, from, e, evicted)
			}
			if n := 1; len(want) > n {
				if got := s.keyChangesFrom(key, from, n); len(got) != n || got[0].seq != want[0] {
					t.Fatalf("the first change of %s from %d, one at most: %v", key, from, got)
				}
			}
		}
	}
}
