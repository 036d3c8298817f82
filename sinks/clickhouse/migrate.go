// Package clickhouse writes driftguard's decisions and state to ClickHouse:
// embedded, versioned migrations (`driftguard migrate`) and a sink that
// batch-inserts `<stream>.outcomes` into `events`, `<stream>.state` into
// `entity_state` and `<stream>.dlq` into `dlq` and `orphans`, exactly once
// per row: it commits Kafka offsets only after the insert and resumes from
// the positions ClickHouse holds (`sink_positions`).
//
// The DDL runs on ClickHouse 18.16 (Debian's) and on current releases: no
// DateTime64, TTL, Map or JSON; every INSERT names its columns, which
// clickhouse-go's native protocol needs on 18.16.
package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/telemetry"
	"github.com/driftguard/driftguard/schemas"
)

// Open connects to ClickHouse over the native protocol.
//
// Its connections close with a reset (SO_LINGER 0), never an orderly
// end: ClickHouse 18.16 writes the rows an INSERT has received when its
// client's connection ends in order, and the sink relies on an INSERT it
// abandons, or that its dying process leaves open, writing nothing. A
// reset makes the server fail the INSERT instead.
func Open(ctx context.Context, c config.ClickHouse) (driver.Conn, error) {
	conn, err := ch.Open(&ch.Options{
		Addr:        []string{c.Addr},
		Auth:        ch.Auth{Database: "default", Username: c.Username, Password: c.Password},
		DialTimeout: 5 * time.Second,
		DialContext: dialResetOnClose,
		// The sink holds up to two batches' INSERTs open at once (one
		// prepared, one being written; one per table each), and reads
		// positions beside them.
		MaxOpenConns: 12,
		MaxIdleConns: 10,
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse %s: %w", c.Addr, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := conn.Ping(pingCtx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("clickhouse %s: %w", c.Addr, err)
	}
	return conn, nil
}

// dialResetOnClose dials addr within ctx, which clickhouse-go bounds by its
// DialTimeout; closing the connection, or the process ending, resets it
// (see Open).
func dialResetOnClose(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := conn.(*net.TCPConn).SetLinger(0); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// Migration is one embedded DDL file.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// Migrations returns the embedded migrations in version order, with the
// database name substituted.
func Migrations(database string) ([]Migration, error) {
	entries, err := fs.ReadDir(schemas.ClickHouse, "clickhouse")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		prefix, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		version, err := strconv.Atoi(prefix)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: the name must be NNNN_description.sql", e.Name())
		}
		data, err := fs.ReadFile(schemas.ClickHouse, "clickhouse/"+e.Name())
		if err != nil {
			return nil, err
		}
		sql := strings.ReplaceAll(string(data), "{database}", database)
		out = append(out, Migration{Version: version, Name: name, Statements: splitStatements(sql)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}

// splitStatements splits a file on semicolons that end a line, after
// dropping comment lines; the DDL has no semicolons inside strings.
func splitStatements(sql string) []string {
	var lines []string
	for _, line := range strings.Split(sql, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			lines = append(lines, line)
		}
	}
	var out []string
	for _, stmt := range strings.Split(strings.Join(lines, "\n"), ";\n") {
		if stmt = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(stmt), ";")); stmt != "" {
			out = append(out, stmt)
		}
	}
	return out
}

// Migrate creates the database and applies every migration not yet recorded
// in schema_migrations. Every statement is idempotent (an ADD COLUMN that
// finds its column counts as done, see columnAdded), so two instances
// migrating at once, or a migration interrupted half way, converge.
func Migrate(ctx context.Context, conn driver.Conn, database string, log *slog.Logger) ([]Migration, error) {
	log = telemetry.OrDiscard(log)
	migrations, err := Migrations(database)
	if err != nil {
		return nil, err
	}
	bootstrap := []string{
		"CREATE DATABASE IF NOT EXISTS " + database,
		"CREATE TABLE IF NOT EXISTS " + database + ".schema_migrations (version UInt32, name String, applied_at DateTime) ENGINE = MergeTree() ORDER BY version",
	}
	for _, stmt := range bootstrap {
		if err := conn.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("migrate: %s: %w", firstLine(stmt), err)
		}
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM "+database+".schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: reading schema_migrations: %w", err)
	}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, err
		}
		applied[int(v)] = true
	}
	rows.Close()
	var done []Migration
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		for _, stmt := range m.Statements {
			if err := conn.Exec(ctx, stmt); err != nil && !columnAdded(stmt, err) {
				return done, fmt.Errorf("migration %04d_%s: %s: %w", m.Version, m.Name, firstLine(stmt), err)
			}
		}
		if err := recordMigration(ctx, conn, database, m); err != nil {
			return done, fmt.Errorf("migration %04d_%s: recording it: %w", m.Version, m.Name, err)
		}
		log.Info("migration applied", "version", m.Version, "name", m.Name, "database", database)
		done = append(done, m)
	}
	return done, nil
}

// columnAdded reports whether err says that stmt, an ALTER TABLE that adds
// columns, ran before: 18.16 has no ADD COLUMN IF NOT EXISTS, so a migration
// run again after an interruption meets its own columns. An ALTER applies
// all its commands or none, so finding the column means the whole
// statement was applied. 18.16 raises ILLEGAL_COLUMN for a column that
// exists (and an ADD COLUMN of a plain type raises it for nothing else),
// current releases DUPLICATE_COLUMN.
func columnAdded(stmt string, err error) bool {
	const duplicateColumn, illegalColumn = 15, 44
	var ex *ch.Exception
	return strings.HasPrefix(stmt, "ALTER TABLE") && strings.Contains(stmt, "ADD COLUMN") &&
		errors.As(err, &ex) && (ex.Code == duplicateColumn || ex.Code == illegalColumn)
}

// recordMigration inserts through a batch: over the native protocol an
// INSERT carries its rows as a data block, and 18.16 waits for that block
// even when the query has VALUES inline.
func recordMigration(ctx context.Context, conn driver.Conn, database string, m Migration) error {
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+database+".schema_migrations (version, name, applied_at)")
	if err != nil {
		return err
	}
	defer batch.Close()
	if err := batch.Append(uint32(m.Version), m.Name, time.Now()); err != nil {
		return err
	}
	return batch.Send()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
