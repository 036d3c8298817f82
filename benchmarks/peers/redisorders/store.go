package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/driftguard/driftguard/benchmarks/model"
)

var (
	//go:embed child.lua
	childSource string
	//go:embed parent.lua
	parentSource string

	// Run sends EVALSHA, and the script's source only when Redis does not
	// hold it yet: one round trip per webhook.
	childScript  = redis.NewScript(childSource)
	parentScript = redis.NewScript(parentSource)
)

// Options configure the store.
type Options struct {
	Addr         string
	Prefix       string
	PoolSize     int
	OrphanTTL    time.Duration
	OrphanBuffer int
	DedupTTL     time.Duration
}

// Store is the peer's Redis side. Every key of an order carries the order
// id as its hash tag ({id}), so an order's scripts touch one slot and the
// design runs unchanged on Redis Cluster.
type Store struct {
	rdb  *redis.Client
	opts Options
	log  *slog.Logger
	// now is the clock of orphan deadlines; tests move it.
	now func() time.Time
	// apply is applyEvent; the benchmark's baseline replaces it.
	apply func(ctx context.Context, kind role, order, eventID string, body []byte) (string, error)
}

// Open connects to Redis and checks that it answers.
func Open(ctx context.Context, opts Options, log *slog.Logger) (*Store, error) {
	if opts.Addr == "" {
		return nil, errors.New("no --redis address (benchmarks/scripts/redis.sh start prints one)")
	}
	if opts.OrphanTTL <= 0 || opts.DedupTTL <= 0 || opts.OrphanBuffer < 1 {
		return nil, fmt.Errorf("--orphan-ttl (%s), --dedup-ttl (%s) and --orphan-buffer (%d) must be positive", opts.OrphanTTL, opts.DedupTTL, opts.OrphanBuffer)
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:     opts.Addr,
		PoolSize: opts.PoolSize,
		// The webhook's deadline (peer.StoreContext) bounds each command.
		ContextTimeoutEnabled: true,
	})
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", opts.Addr, err)
	}
	return newStore(rdb, opts, log), nil
}

func newStore(rdb *redis.Client, opts Options, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{rdb: rdb, opts: opts, log: log, now: time.Now}
	s.apply = s.applyEvent
	return s
}

// Close closes the pool.
func (s *Store) Close() { _ = s.rdb.Close() }

// keys are an event's keys, in the scripts' KEYS order: its dedup claim,
// the order, the order's lost+found list and its applied children.
func (s *Store) keys(orderID, eventID string) []string {
	tag := "{" + orderID + "}"
	p := s.opts.Prefix
	return []string{p + "seen:" + tag + ":" + eventID, p + "order:" + tag, p + "orphans:" + tag, p + "children:" + tag}
}

// applyChild applies a child of order orderID, or keeps it in lost+found
// until the order exists, and returns the outcome.
func (s *Store) applyChild(ctx context.Context, orderID, eventID string, body []byte) (string, error) {
	deadline := s.now().Add(s.opts.OrphanTTL).UnixMilli()
	// What the parent script parses back: the deadline, then the id by its
	// length (ids may hold any character), then the body a real handler
	// would apply later.
	entry := make([]byte, 0, 32+len(eventID)+len(body))
	entry = strconv.AppendInt(entry, deadline, 10)
	entry = append(entry, ' ')
	entry = strconv.AppendInt(entry, int64(len(eventID)), 10)
	entry = append(entry, ' ')
	entry = append(entry, eventID...)
	entry = append(entry, body...)
	return childScript.Run(ctx, s.rdb, s.keys(orderID, eventID),
		eventID, s.opts.DedupTTL.Milliseconds(), entry, s.opts.OrphanTTL.Milliseconds(), s.opts.OrphanBuffer).Text()
}

// applyParent creates order orderID (body is its record) and applies the
// children waiting for it whose TTL has not passed.
func (s *Store) applyParent(ctx context.Context, orderID, eventID string, body []byte) (outcome string, reconciled, expired int64, err error) {
	res, err := parentScript.Run(ctx, s.rdb, s.keys(orderID, eventID),
		eventID, s.opts.DedupTTL.Milliseconds(), body, s.now().UnixMilli()).Slice()
	if err != nil {
		return "", 0, 0, err
	}
	if len(res) != 3 {
		return "", 0, 0, fmt.Errorf("parent script answered %v", res)
	}
	outcome, _ = res[0].(string)
	reconciled, _ = res[1].(int64)
	expired, _ = res[2].(int64)
	return outcome, reconciled, expired, nil
}

// Reset deletes every key under the prefix.
func (s *Store) Reset(ctx context.Context) error {
	iter := s.rdb.Scan(ctx, 0, globEscape(s.opts.Prefix)+"*", 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.rdb.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

// State is every order and the children applied to it.
func (s *Store) State(ctx context.Context) (model.State, error) {
	orderPrefix := s.opts.Prefix + "order:{"
	var ids []string
	iter := s.rdb.Scan(ctx, 0, globEscape(orderPrefix)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if id, ok := strings.CutPrefix(iter.Val(), orderPrefix); ok && strings.HasSuffix(id, "}") {
			ids = append(ids, strings.TrimSuffix(id, "}"))
		}
	}
	if err := iter.Err(); err != nil {
		return model.State{}, err
	}
	st := model.State{Orders: map[string]model.Order{}}
	for chunk := range slices.Chunk(ids, 1000) {
		pipe := s.rdb.Pipeline()
		members := make([]*redis.StringSliceCmd, len(chunk))
		for i, id := range chunk {
			members[i] = pipe.SMembers(ctx, s.keys(id, "")[3])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return model.State{}, err
		}
		for i, id := range chunk {
			children := members[i].Val()
			slices.Sort(children)
			st.Orders[id] = model.Order{Created: true, Children: append([]string{}, children...)}
		}
	}
	return st, nil
}

// globEscape quotes the characters SCAN's MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
