package processors

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb"
	ldberrors "github.com/syndtr/goleveldb/leveldb/errors"
	ldbiter "github.com/syndtr/goleveldb/leveldb/iterator"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// tableStorage is a goka table partition's local storage: LevelDB, as with
// goka's default, with the writes batched. goka writes the table value on
// every event and the changelog offset on every acknowledgement; with
// goka's storage each is a LevelDB write with its own journal record and
// system call. Here they collect in a bounded map (limits below) and reach
// LevelDB as one batch. Reads see the pending writes first.
//
// Losing the pending writes in a crash is safe: the storage holds only
// values of committed transactions (the runtime applies a transaction's
// values once Kafka has committed it), and the offset is written in the
// same batch as the values set before it, so after any stop, clean or
// not, the runtime reads the changelog after the stored offset and lands
// where the changelog stands. A batch may hold values past its offset
// (a flush in the middle of a transaction's values); reading the
// changelog after the offset writes them again, the same.
// The layout (one directory per topic and partition, goka's offset key) is
// goka's.
type tableStorage struct {
	db *leveldb.DB

	mu      sync.Mutex
	pending map[string][]byte // a nil value is a pending delete
	bytes   int
	offset  int64
	// offsetPending is set when offset has not been written yet.
	offsetPending bool
	flushedAt     time.Time
	// maxKeys and maxBytes bound the pending writes (pendingKeys,
	// pendingBytes; tests lower them).
	maxKeys, maxBytes int
}

// Bounds of the pending writes of one table partition: memory stays
// bounded whatever the key count, and LevelDB is never far behind.
const (
	pendingKeys  = 1024
	pendingBytes = 1 << 20
	pendingAge   = time.Second
)

// offsetKey is where goka's LevelDB storage keeps the table offset.
const offsetKey = "__offset"

// tableStorageBuilder opens table storage under dir. A partition is kept
// across restarts, a crash included (see tableStorage): after a SIGKILL
// the restore reads only the changelog written since the last flush, not
// the whole table. A journal LevelDB cannot read (a machine that lost
// power mid-write) is repaired with LevelDB's recovery, and a partition
// even that cannot open is wiped and rebuilt from the changelog, which
// holds only what Kafka accepted.
func tableStorageBuilder(dir string) storage.Builder {
	return func(topic string, partition int32) (storage.Storage, error) {
		path := filepath.Join(dir, fmt.Sprintf("%s.%d", topic, partition))
		// The marker that earlier releases wrote on a clean close; nothing
		// reads it any more.
		_ = os.Remove(path + ".clean")
		db, err := openLevelDB(path)
		if err != nil {
			return nil, fmt.Errorf("opening table storage: %w", err)
		}
		return &tableStorage{db: db, pending: map[string][]byte{}, flushedAt: time.Now(), maxKeys: pendingKeys, maxBytes: pendingBytes}, nil
	}
}

// openLevelDB opens the LevelDB at path, repairing it when its files are
// corrupted and wiping it when they cannot be repaired.
func openLevelDB(path string) (*leveldb.DB, error) {
	db, err := leveldb.OpenFile(path, nil)
	if !ldberrors.IsCorrupted(err) {
		return db, err
	}
	if db, err = leveldb.RecoverFile(path, nil); err == nil {
		return db, nil
	}
	if err := os.RemoveAll(path); err != nil {
		return nil, fmt.Errorf("wiping table storage that cannot be repaired: %w", err)
	}
	return leveldb.OpenFile(path, nil)
}

func (s *tableStorage) Open() error { return nil }

// Close writes what is pending.
func (s *tableStorage) Close() error {
	s.mu.Lock()
	err := s.flush()
	s.mu.Unlock()
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *tableStorage) Has(key string) (bool, error) {
	s.mu.Lock()
	v, ok := s.pending[key]
	s.mu.Unlock()
	if ok {
		return v != nil, nil
	}
	return s.db.Has([]byte(key), nil)
}

// Get returns the value; the caller must not modify it (goka decodes it
// right away).
func (s *tableStorage) Get(key string) ([]byte, error) {
	s.mu.Lock()
	v, ok := s.pending[key]
	s.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := s.db.Get([]byte(key), nil)
	if err == leveldb.ErrNotFound {
		return nil, nil
	}
	return v, err
}

// Set keeps value until the next flush; goka hands over a value it no
// longer touches.
func (s *tableStorage) Set(key string, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return s.put(key, value)
}

func (s *tableStorage) Delete(key string) error { return s.put(key, nil) }

func (s *tableStorage) put(key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.pending[key]
	if !ok {
		s.bytes += len(key)
	}
	s.bytes += len(value) - len(old)
	s.pending[key] = value
	return s.flushIfDue()
}

func (s *tableStorage) SetOffset(offset int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset, s.offsetPending = offset, true
	return s.flushIfDue()
}

func (s *tableStorage) GetOffset(def int64) (int64, error) {
	s.mu.Lock()
	offset, pending := s.offset, s.offsetPending
	s.mu.Unlock()
	if pending {
		return offset, nil
	}
	data, err := s.db.Get([]byte(offsetKey), nil)
	switch {
	case err == leveldb.ErrNotFound:
		return def, nil
	case err != nil:
		return 0, err
	}
	return strconv.ParseInt(string(data), 10, 64)
}

// MarkRecovered writes what recovery collected.
func (s *tableStorage) MarkRecovered() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flush()
}

func (s *tableStorage) Iterator() (storage.Iterator, error) {
	return s.iterator(nil)
}

func (s *tableStorage) IteratorWithRange(start, limit []byte) (storage.Iterator, error) {
	if len(limit) == 0 {
		return s.iterator(util.BytesPrefix(start))
	}
	return s.iterator(&util.Range{Start: start, Limit: limit})
}

// iterator flushes first, so it sees every write.
func (s *tableStorage) iterator(r *util.Range) (storage.Iterator, error) {
	s.mu.Lock()
	err := s.flush()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &tableIterator{s.db.NewIterator(r, nil)}, nil
}

func (s *tableStorage) flushIfDue() error {
	if len(s.pending) >= s.maxKeys || s.bytes >= s.maxBytes || time.Since(s.flushedAt) >= pendingAge {
		return s.flush()
	}
	return nil
}

// flush writes the pending values and then the offset in one batch; the
// caller holds mu.
func (s *tableStorage) flush() error {
	s.flushedAt = time.Now()
	if len(s.pending) == 0 && !s.offsetPending {
		return nil
	}
	var batch leveldb.Batch
	for k, v := range s.pending {
		if v == nil {
			batch.Delete([]byte(k))
		} else {
			batch.Put([]byte(k), v)
		}
	}
	if s.offsetPending {
		batch.Put([]byte(offsetKey), strconv.AppendInt(nil, s.offset, 10))
	}
	if err := s.db.Write(&batch, nil); err != nil {
		return fmt.Errorf("writing table storage: %w", err)
	}
	clear(s.pending)
	s.bytes, s.offsetPending = 0, false
	return nil
}

// tableIterator walks LevelDB without the offset key.
type tableIterator struct{ ldbiter.Iterator }

func (i *tableIterator) Next() bool {
	for i.Iterator.Next() {
		if string(i.Key()) != offsetKey {
			return true
		}
	}
	return false
}

func (i *tableIterator) Err() error { return i.Error() }

func (i *tableIterator) Value() ([]byte, error) { return i.Iterator.Value(), nil }
