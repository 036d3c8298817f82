package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/driftguard/driftguard/benchmarks/model"
	"github.com/driftguard/driftguard/benchmarks/peers/peer"
)

//go:embed schema.sql
var schema string

// How a webhook is applied; both are one transaction with the same
// outcome, and differ in round trips.
const (
	// ModeStatement claims the event id and upserts in one statement (a
	// data-modifying CTE, its own transaction): one round trip.
	ModeStatement = "statement"
	// ModeTransaction is the seed's code as written: BEGIN, INSERT the
	// claim (no row: a duplicate, roll back), the conditional upsert (no
	// row: stale), COMMIT; four round trips.
	ModeTransaction = "tx"
)

// defaultMaxConns lets commits of concurrent webhooks share a WAL flush
// (PostgreSQL's group commit) on a 2-core machine without queueing behind
// a handful of connections.
const defaultMaxConns = 16

// Options configure the store.
type Options struct {
	DSN      string
	MaxConns int
	Mode     string
}

// The seed's statements. pgx prepares each on every connection at first
// use and reuses it (its default statement cache), so a webhook pays for
// Bind/Execute only.
const (
	claimEvent = `INSERT INTO processed_webhook_events (event_id) VALUES ($1) ON CONFLICT (event_id) DO NOTHING`
	// Applies only a greater sequence_number: no row affected means stale.
	upsertPresence = `INSERT INTO user_presence (user_id, presence, sequence_number, updated_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (user_id) DO UPDATE
SET presence = excluded.presence, sequence_number = excluded.sequence_number, updated_at = excluded.updated_at
WHERE user_presence.sequence_number < excluded.sequence_number`
	// Both in one statement: the upsert runs only when the claim inserted
	// a row; the two flags say which happened.
	claimAndUpsert = `WITH claimed AS (
  INSERT INTO processed_webhook_events (event_id) VALUES ($1) ON CONFLICT (event_id) DO NOTHING RETURNING 1
), applied AS (
  INSERT INTO user_presence (user_id, presence, sequence_number, updated_at)
  SELECT $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM claimed)
  ON CONFLICT (user_id) DO UPDATE
  SET presence = excluded.presence, sequence_number = excluded.sequence_number, updated_at = excluded.updated_at
  WHERE user_presence.sequence_number < excluded.sequence_number
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM claimed), EXISTS (SELECT 1 FROM applied)`
)

// Store is the peer's PostgreSQL side.
type Store struct {
	pool  *pgxpool.Pool
	apply func(ctx context.Context, ev *presenceEvent) (string, error)
}

// Open connects a pool to opts.DSN; with migrate it creates the tables if
// they are missing.
func Open(ctx context.Context, opts Options, migrate bool) (*Store, error) {
	if opts.DSN == "" {
		return nil, errors.New("no --dsn (benchmarks/scripts/postgres.sh start prints one)")
	}
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = int32(opts.MaxConns)
	}
	s := &Store{}
	switch opts.Mode {
	case ModeStatement, "":
		s.apply = s.applyStatement
	case ModeTransaction:
		s.apply = s.applyTransaction
	default:
		return nil, fmt.Errorf("--mode %q: one of %s, %s", opts.Mode, ModeStatement, ModeTransaction)
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	if migrate {
		if _, err := s.pool.Exec(ctx, schema); err != nil {
			s.pool.Close()
			return nil, fmt.Errorf("creating the tables: %w", err)
		}
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }

// Reset creates the tables if missing and empties them.
func (s *Store) Reset(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, schema); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `TRUNCATE processed_webhook_events, user_presence`)
	return err
}

// State is every user's applied presence.
func (s *Store) State(ctx context.Context) (model.State, error) {
	rows, err := s.pool.Query(ctx, `SELECT user_id, presence, sequence_number FROM user_presence`)
	if err != nil {
		return model.State{}, err
	}
	st := model.State{Presence: map[string]model.Presence{}}
	var user string
	var p model.Presence
	_, err = pgx.ForEachRow(rows, []any{&user, &p.Presence, &p.SequenceNumber}, func() error {
		st.Presence[user] = p
		return nil
	})
	return st, err
}

func (s *Store) applyStatement(ctx context.Context, ev *presenceEvent) (string, error) {
	var claimed, applied bool
	err := s.pool.QueryRow(ctx, claimAndUpsert, ev.ID, ev.UserID, ev.Presence, *ev.SequenceNumber, ev.updatedAt()).
		Scan(&claimed, &applied)
	return outcome(claimed, applied), err
}

func (s *Store) applyTransaction(ctx context.Context, ev *presenceEvent) (string, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	// After a commit this is a no-op.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	tag, err := tx.Exec(ctx, claimEvent, ev.ID)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return outcome(false, false), nil
	}
	tag, err = tx.Exec(ctx, upsertPresence, ev.UserID, ev.Presence, *ev.SequenceNumber, ev.updatedAt())
	if err != nil {
		return "", err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", err
	}
	return outcome(true, tag.RowsAffected() == 1), nil
}

func outcome(claimed, applied bool) string {
	switch {
	case !claimed:
		return peer.OutcomeDuplicate
	case !applied:
		return peer.OutcomeStale
	default:
		return peer.OutcomeApplied
	}
}

func (ev *presenceEvent) updatedAt() time.Time { return time.Unix(*ev.Timestamp, 0) }
