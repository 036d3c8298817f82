package realtime

import (
	"slices"
	"sync"
)

// keyLog indexes the store's log by key, for the clients that follow one
// key (`events?key=`, a chat member following a conversation). Without
// it, each such client was woken by every change of the stream and read
// through all of them for the few of its key: with C conversations, C
// wake-ups and C-1 changes passed over for every change delivered. With
// it, a client is woken only by a change of its key and takes only those.
type keyLog struct {
	// changes are, per key, the sequence numbers of its changes the log
	// holds, oldest first.
	changes map[string]*keyChanges
	// mu guards waiting, which clients add to under the store's read
	// lock; apply closes and removes them under the write lock.
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

// keyChanges are one key's changes in the log.
type keyChanges struct {
	seqs []uint64
	// evictedTo is one past the sequence number of the last change of the
	// key the log evicted, 0 for none; kept only while the key has changes
	// in the log: once it has none, its entity's seq says the same.
	evictedTo uint64
}

func newKeyLog() keyLog {
	return keyLog{changes: map[string]*keyChanges{}, waiting: map[string]chan struct{}{}}
}

// added indexes change c, appended to the log; old is the entity it
// replaced, nil for a new key (the store's write lock held).
func (kl *keyLog) added(c *change, old *entity) {
	kc := kl.changes[c.ent.key]
	if kc == nil {
		kc = &keyChanges{}
		if old != nil {
			// Every change of the key before c has left the log.
			kc.evictedTo = old.seq + 1
		}
		kl.changes[c.ent.key] = kc
	}
	kc.seqs = append(kc.seqs, c.seq)
}

// evicted forgets change c, the log's oldest, once dropped (the store's
// write lock held).
func (kl *keyLog) evicted(c *change) {
	kc := kl.changes[c.ent.key]
	if kc == nil || len(kc.seqs) == 0 || kc.seqs[0] != c.seq {
		return // replaced by a key's entry made anew; nothing of c is held
	}
	kc.evictedTo = c.seq + 1
	if kc.seqs = kc.seqs[1:]; len(kc.seqs) == 0 {
		delete(kl.changes, c.ent.key)
	}
}

// wakeAll closes the channels of the clients waiting for the keys of
// changes (the store's write lock held).
func (kl *keyLog) wakeAll(changes []*change) {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	if len(kl.waiting) == 0 {
		return
	}
	for _, c := range changes {
		if w, ok := kl.waiting[c.ent.key]; ok {
			close(w)
			delete(kl.waiting, c.ent.key)
		}
	}
}

// wake is the channel closed on the next change of key (the store's read
// lock held, so that no change comes between a client's look at the log
// and its wait). Every client of the key shares it.
func (kl *keyLog) wake(key string) <-chan struct{} {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	w, ok := kl.waiting[key]
	if !ok {
		w = make(chan struct{})
		kl.waiting[key] = w
	}
	return w
}

// from returns up to n of key's changes at or after sequence number seq,
// oldest first (the store's read lock held).
func (s *store) keyChangesFrom(key string, seq uint64, n int) []*change {
	kc := s.keys.changes[key]
	if kc == nil {
		return nil
	}
	i, _ := slices.BinarySearch(kc.seqs, seq)
	batch := make([]*change, 0, min(n, len(kc.seqs)-i))
	for _, q := range kc.seqs[i:] {
		if len(batch) == n {
			break
		}
		batch = append(batch, s.at(q))
	}
	return batch
}

// keyEvictedSince reports whether the log evicted a change of key at or
// after sequence number seq (the store's read lock held).
func (s *store) keyEvictedSince(key string, seq uint64) bool {
	if kc := s.keys.changes[key]; kc != nil {
		return kc.evictedTo > seq
	}
	// No change of the key is left in the log: its entity is its last.
	e, ok := s.entities.Get(&entity{key: key})
	return ok && e.seq >= seq
}
