package eos

// valueCache keeps the decoded table values that committed transactions
// wrote last, so the next transaction that touches a key does not decode
// its value again from the storage: a key that changes with every
// transaction (a conversation, one message per commit interval) would
// otherwise be decoded and encoded whole each time, and decoding was as
// much of its cost as deciding.
//
// A value is lent, not shared: take removes it, so a callback that
// changes the value it read and then does not set it cannot leave the
// change behind; a transaction that aborts has taken its values out
// already. Only values a transaction committed come back, with put, after
// the commit. The bound is on the values' encoded bytes; the oldest put
// goes first.
type valueCache struct {
	max, bytes int
	entries    map[string]cached
	// order holds the keys in the order they were put, with stale places
	// of keys put again or taken (their entry's seq no longer matches).
	order []placed
	seq   uint64
}

type cached struct {
	value any
	size  int
	seq   uint64
}

type placed struct {
	key string
	seq uint64
}

// newValueCache returns a cache of at most max encoded bytes, nil (a cache
// that keeps nothing) when max is not positive.
func newValueCache(max int) *valueCache {
	if max <= 0 {
		return nil
	}
	return &valueCache{max: max, entries: map[string]cached{}}
}

// take returns key's value and forgets it.
func (c *valueCache) take(key string) (any, bool) {
	if c == nil {
		return nil, false
	}
	e, ok := c.entries[key]
	if ok {
		delete(c.entries, key)
		c.bytes -= e.size
	}
	return e.value, ok
}

// put keeps value, size bytes encoded, as key's committed value.
func (c *valueCache) put(key string, value any, size int) {
	if c == nil {
		return
	}
	c.drop(key)
	if size > c.max {
		return
	}
	c.seq++
	c.entries[key] = cached{value: value, size: size, seq: c.seq}
	c.order = append(c.order, placed{key, c.seq})
	c.bytes += size
	for c.bytes > c.max {
		c.evictOldest()
	}
	if len(c.order) > 2*len(c.entries)+64 {
		c.compact()
	}
}

// drop forgets key's value.
func (c *valueCache) drop(key string) {
	if c == nil {
		return
	}
	if e, ok := c.entries[key]; ok {
		delete(c.entries, key)
		c.bytes -= e.size
	}
}

func (c *valueCache) evictOldest() {
	for len(c.order) > 0 {
		p := c.order[0]
		c.order = c.order[1:]
		if e, ok := c.entries[p.key]; ok && e.seq == p.seq {
			delete(c.entries, p.key)
			c.bytes -= e.size
			return
		}
	}
}

// compact drops the stale places from order, so it stays within a
// multiple of the entries.
func (c *valueCache) compact() {
	kept := c.order[:0]
	for _, p := range c.order {
		if e, ok := c.entries[p.key]; ok && e.seq == p.seq {
			kept = append(kept, p)
		}
	}
	clear(c.order[len(kept):])
	c.order = kept
}
