package realtime

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/google/btree"

	"github.com/driftguard/driftguard/internal/record"
)

// entity is one key's latest state as the bridge holds it. A stored entity
// never changes: a newer state replaces the pointer, so readers may keep
// one without a lock.
type entity struct {
	key       string
	version   int64
	state     json.RawMessage
	updatedAt int64 // unix ms
	expiresAt int64 // unix ms, 0 for never
	partition int32
	// access is an assign stream's entity's (a conversation's) membership:
	// who may read it, and which of its messages; nil on other streams.
	access *access
	// seq is the sequence number of the change that stored it in the
	// store's log (keyEvictedSince).
	seq uint64
}

// change is one state record the bridge applied, in the order it applied
// them. A change is shared by every client that sends it.
type change struct {
	partition int32
	offset    int64
	// seq is the change's sequence number in the store's log; 0 for a
	// change read from Kafka for one client's catch-up.
	seq uint64
	ent *entity
	// before is the membership of the entity the change replaced, on an
	// assign stream; nil for a new key. A sync tells from the first change
	// after a client's token what the client held then (sync.go); only the
	// parsed membership is kept, not the state it came from.
	before *access
	// after is the stream's position once the change was applied, encoded:
	// the id of the change for a client that was at the position before it.
	after string
	// block holds the change's SSE message with `expired` false, at
	// start:end once built; expiredFrame the one with `expired` true,
	// built when first sent. Only the log's changes are sent live and
	// have a block, not those read from Kafka for one client's catch-up.
	block        *frameBlock
	start, end   int
	expiredOnce  sync.Once
	expiredFrame []byte
}

// expired is the change's SSE message with id after and `expired` true,
// for every live client that sends it once the entity's claim has lapsed.
func (c *change) expired() []byte {
	c.expiredOnce.Do(func() { c.expiredFrame = appendFrame(nil, c.after, c.ent, true) })
	return c.expiredFrame
}

// frameBlock holds the SSE messages of the changes one apply added, end to
// end, built once when a live client first sends one of them: a live
// client writes the messages of consecutive changes in one write rather
// than one a message.
type frameBlock struct {
	changes []*change
	once    sync.Once
	b       []byte
}

func (fb *frameBlock) build() {
	fb.once.Do(func() {
		for _, c := range fb.changes {
			c.start = len(fb.b)
			fb.b = appendFrame(fb.b, c.after, c.ent, false)
			c.end = len(fb.b)
		}
		fb.changes = nil // an evicted change is not kept for its block
	})
}

// follows reports whether change c's message, not expired, comes right
// after the bytes of fb up to end.
func (c *change) follows(fb *frameBlock, end int) bool {
	return c.block == fb && c.start == end
}

// store is what the bridge holds of one stream: the latest entity per key,
// the log of recent changes, and the position it has read the state topic
// to. Readers take the read lock; the stream's reader alone writes.
type store struct {
	mu       sync.RWMutex
	epoch    [16]byte
	next     []int64 // per partition, the offset after the last record read
	floor    []int64 // per partition, every change at or after it is in the log
	entities *btree.BTreeG[*entity]
	// log is a ring of the latest changes; head is the sequence number of
	// the next change, and the ring holds head-len(log)… (or from 0).
	log     []*change
	head    uint64
	logSize int
	// headNow is head, for a client to see how far behind it is between
	// two writes without the lock.
	headNow atomic.Uint64
	// wake is closed, and replaced, whenever changes are appended.
	wake chan struct{}
	// retired is closed when the store stops being read (a new epoch, or a
	// reading that failed and starts over): its clients take a snapshot of
	// the next one.
	retired chan struct{}
	// maxEntities bounds entities; dropped counts new keys refused.
	maxEntities int
	dropped     int64
	// assign streams keep each conversation's members, and which
	// conversations each user has or had intervals in (a current or former
	// member), so a sync finds a user's conversations without a scan of
	// every entity; it holds a key for every user of its membership, no
	// more than the entities' own membership holds.
	assign        bool
	conversations map[string]map[string]struct{}
	// keys indexes the log by key, for the clients following one.
	keys keyLog
}

func newStore(epoch [16]byte, partitions, logSize, maxEntities int, assign bool) *store {
	return &store{
		epoch: epoch, next: make([]int64, partitions), floor: make([]int64, partitions),
		entities: btree.NewG(32, func(a, b *entity) bool { return a.key < b.key }),
		log:      make([]*change, 0, min(logSize, 1024)), logSize: logSize,
		wake: make(chan struct{}), retired: make(chan struct{}), maxEntities: maxEntities, assign: assign,
		conversations: map[string]map[string]struct{}{}, keys: newKeyLog(),
	}
}

// tail is the sequence number of the oldest change in the log.
func (s *store) tail() uint64 { return s.head - uint64(len(s.log)) }

// at is the change of sequence number seq, which must be in the log.
func (s *store) at(seq uint64) *change {
	if len(s.log) < s.logSize {
		return s.log[seq]
	}
	return s.log[seq%uint64(s.logSize)]
}

// apply adds state records of one partition, read in offset order. A
// record whose version is not above the entity's is read (the position
// moves past it) but stored nowhere: a client holding the newer version
// would ignore it. It reports how many new keys the entity bound refused.
func (s *store) apply(partition int32, recs []stateRecord) (dropped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	block := &frameBlock{}
	for _, r := range recs {
		s.next[partition] = r.offset + 1
		if r.st.Key == "" {
			continue // undecodable: read, never stored
		}
		old, had := s.entities.Get(&entity{key: r.st.Key})
		if had && old.version >= r.st.Version {
			continue
		}
		if !had && s.entities.Len() >= s.maxEntities {
			s.dropped++
			dropped++
			continue
		}
		var prev *access
		if had {
			prev = old.access
		}
		e, sameMembers := newEntityAfter(partition, r, s.assign, prev)
		e.seq = s.head
		s.entities.ReplaceOrInsert(e)
		c := &change{partition: partition, offset: r.offset, seq: s.head, ent: e,
			after: Cursor{Epoch: s.epoch, Offsets: s.next}.String(), block: block}
		if s.assign {
			if had {
				c.before = old.access
			}
			if !sameMembers {
				s.index(c.before, e)
			}
		}
		block.changes = append(block.changes, c)
		s.append(c)
		s.keys.added(c, old) // old is nil for a new key
	}
	s.keys.wakeAll(block.changes)
	close(s.wake)
	s.wake = make(chan struct{})
	return dropped
}

// append adds a change to the log, evicting the oldest when it is full.
func (s *store) append(c *change) {
	if len(s.log) < s.logSize {
		s.log = append(s.log, c)
	} else {
		i := s.head % uint64(s.logSize)
		evicted := s.log[i]
		s.floor[evicted.partition] = evicted.offset + 1
		s.keys.evicted(evicted)
		s.log[i] = c
	}
	s.head++
	s.headNow.Store(s.head)
}

// index keeps conversations up to date for conversation e, whose
// membership was before (nil for a new conversation).
func (s *store) index(before *access, e *entity) {
	var was []string
	if before != nil {
		was = before.users()
	}
	now := e.access.users()
	for _, u := range was {
		if _, still := slices.BinarySearch(now, u); !still {
			delete(s.conversations[u], e.key)
			if len(s.conversations[u]) == 0 {
				delete(s.conversations, u)
			}
		}
	}
	for _, u := range now {
		if _, found := slices.BinarySearch(was, u); found {
			continue
		}
		keys := s.conversations[u]
		if keys == nil {
			keys = map[string]struct{}{}
			s.conversations[u] = keys
		}
		keys[e.key] = struct{}{}
	}
}

// conversationsOf are the keys of the conversations user is or was a
// member of, sorted (the store's lock held).
func (s *store) conversationsOf(user string) []string {
	keys := make([]string, 0, len(s.conversations[user]))
	for k := range s.conversations[user] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// holdsFrom reports whether the log holds every change at or after the
// offsets, one a partition (the store's lock held).
func (s *store) holdsFrom(offsets []int64) bool {
	for p, o := range offsets {
		if o < s.floor[p] {
			return false
		}
	}
	return true
}

// newEntity is the entity of a state record of partition.
func newEntity(partition int32, r stateRecord, assign bool) *entity {
	e, _ := newEntityAfter(partition, r, assign, nil)
	return e
}

// newEntityAfter is newEntity for a key whose membership was prev (nil
// for none): sameMembers reports that the state's membership is prev's,
// whose parsed form it then shares (accessAfter).
func newEntityAfter(partition int32, r stateRecord, assign bool, prev *access) (e *entity, sameMembers bool) {
	e = &entity{key: r.st.Key, version: r.st.Version, state: json.RawMessage(r.state),
		updatedAt: r.st.UpdatedAtMs, expiresAt: r.st.ExpiresAtMs, partition: partition}
	if assign {
		a, same := accessAfter(prev, e.state)
		e.access, sameMembers = &a, same
	}
	return e, sameMembers
}

// stateRecord is one record of the state topic, decoded.
type stateRecord struct {
	offset int64
	st     record.State
	state  string
}

// position is a copy of where the store has read to.
func (s *store) position() Cursor {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Cursor{Epoch: s.epoch, Offsets: slices.Clone(s.next)}
}

// isExpired reports whether the entity's claim has gone stale at nowMs: a
// reader then shows unknown, never the last state.
func isExpired(e *entity, nowMs int64) bool { return e.expiresAt != 0 && nowMs >= e.expiresAt }

// entityJSON is the Entity of design §6.
type entityJSON struct {
	Key         string          `json:"key"`
	Version     int64           `json:"version"`
	State       json.RawMessage `json:"state"`
	UpdatedAtMs int64           `json:"updated_at_ms"`
	ExpiresAtMs int64           `json:"expires_at_ms"`
	Expired     bool            `json:"expired"`
}

func (e *entity) json(nowMs int64) entityJSON { return e.jsonExpired(isExpired(e, nowMs)) }

func (e *entity) jsonExpired(expired bool) entityJSON {
	return entityJSON{Key: e.key, Version: e.version, State: e.state, UpdatedAtMs: e.updatedAt,
		ExpiresAtMs: e.expiresAt, Expired: expired}
}

// appendFrame appends the SSE message of an entity's change: its id, the
// event name and the Entity as data.
func appendFrame(b []byte, id string, e *entity, expired bool) []byte {
	b = append(b, "id: "...)
	b = append(b, id...)
	b = append(b, "\nevent: state\ndata: "...)
	b = appendEntity(b, e, expired)
	return append(b, "\n\n"...)
}

// appendEntity appends the Entity's JSON. It is written by hand rather
// than by json.Marshal, which validates and compacts the state, a scan of
// the whole state per change that was a seventh of the bridge's CPU under
// chat: the state was validated when its record was decoded
// (record.DecodeState), so only a state with a line break, which would
// end the SSE data line, still goes through compaction.
func appendEntity(b []byte, e *entity, expired bool) []byte {
	if bytes.ContainsAny(e.state, "\r\n") {
		data, _ := json.Marshal(e.jsonExpired(expired))
		return append(b, data...)
	}
	b = append(b, `{"key":`...)
	b = record.AppendJSONString(b, e.key, true)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, e.version, 10)
	b = append(b, `,"state":`...)
	if len(e.state) == 0 {
		b = append(b, "null"...) // as json.Marshal writes an empty RawMessage
	} else {
		b = append(b, e.state...)
	}
	b = append(b, `,"updated_at_ms":`...)
	b = strconv.AppendInt(b, e.updatedAt, 10)
	b = append(b, `,"expires_at_ms":`...)
	b = strconv.AppendInt(b, e.expiresAt, 10)
	b = append(b, `,"expired":`...)
	b = strconv.AppendBool(b, expired)
	return append(b, '}')
}
