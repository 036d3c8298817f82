// Package clickhouse writes driftguard's decisions and state to ClickHouse:
// embedded, versioned migrations (`driftguard migrate`) and a sink that
// batch-inserts `<stream>.outcomes` into `events`, `<stream>.state` into
// `entity_state` and `<stream>.dlq` into `dlq` and `orphans`, exactly once
// per row: it commits Kafka offsets only after the insert and resumes from
// the positions ClickHouse holds (`sink_positions`). A rebuild empties
// both for the sink to refill the tables from Kafka (rebuild.go), and the
// retention drops old rows (retention.go).
//
// The DDL runs on ClickHouse 18.16 (Debian's) and on current releases: no
// DateTime64, TTL, Map or JSON; every INSERT names its columns, which
// clickhouse-go's native protocol needs on 18.16.
package clickhouse

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

// Open connects to ClickHouse over the native protocol, with the options
// of c (see options), and checks the connection with a ping. Its errors
// name the setting a refused password or an unknown CA points to.
func Open(ctx context.Context, c config.ClickHouse) (driver.Conn, error) {
	opts, err := options(c)
	if err != nil {
		return nil, err
	}
	where := "clickhouse " + strings.Join(opts.Addr, ",")
	conn, err := ch.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, opts.DialTimeout+addrDialTimeout)
	defer cancel()
	if err := conn.Ping(pingCtx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", where, explainConnect(c, err))
	}
	return conn, nil
}

// options are the clickhouse-go options of c, the only place they are
// made: the sink, `migrate` and `dev` connect alike.
//
// Connections close with a reset (SO_LINGER 0), never an orderly end:
// ClickHouse 18.16 writes the rows an INSERT has received when its
// client's connection ends in order, and the sink relies on an INSERT it
// abandons, or that its dying process leaves open, writing nothing. A
// reset makes the server fail the INSERT instead. Over TLS that holds
// too: closing sends no close_notify (see resetConn).
//
// Several addresses are tried in order (clickhouse-go's default,
// ConnOpenInOrder): every connection goes to the first server that
// answers, so the sink reads its positions from the replica it writes to
// for as long as that replica is up. clickhouse-go bounds a connection's
// whole try of every address by DialTimeout, so each address gets
// addrDialTimeout of it: a server that swallows packets delays the next
// one, rather than leave it untried.
func options(c config.ClickHouse) (*ch.Options, error) {
	tlsConfig, err := c.TLS.Config("clickhouse.tls")
	if err != nil {
		return nil, err
	}
	addrs := c.Addrs()
	return &ch.Options{
		Addr:        addrs,
		Auth:        ch.Auth{Database: "default", Username: c.Username, Password: c.Password},
		DialTimeout: time.Duration(len(addrs)) * addrDialTimeout,
		DialContext: func(ctx context.Context, addr string) (net.Conn, error) {
			return dialResetOnClose(ctx, addr, tlsConfig)
		},
		// The sink holds up to two batches' INSERTs open at once (one
		// prepared, one being written; one per table each), and reads
		// positions beside them.
		MaxOpenConns: 12,
		MaxIdleConns: 10,
	}, nil
}

// addrDialTimeout bounds the TCP connect and the TLS handshake to one
// address.
const addrDialTimeout = 5 * time.Second

// dialResetOnClose dials addr within addrDialTimeout, with TLS when
// tlsConfig is not nil; closing the connection, or the process ending,
// resets it (see options).
func dialResetOnClose(ctx context.Context, addr string, tlsConfig *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, addrDialTimeout)
	defer cancel()
	d := net.Dialer{KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := conn.(*net.TCPConn).SetLinger(0); err != nil {
		conn.Close()
		return nil, err
	}
	if tlsConfig == nil {
		return conn, nil
	}
	cfg := tlsConfig
	if cfg.ServerName == "" {
		cfg = tlsConfig.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return resetConn{tc}, nil
}

// resetConn is a TLS connection whose Close resets the TCP connection
// without a close_notify alert: to the server, close_notify is an orderly
// end, on which 18.16 would write a half-sent INSERT (see options).
type resetConn struct{ *tls.Conn }

func (c resetConn) Close() error { return c.NetConn().Close() }

// explainConnect names the setting behind a refused connection: a wrong
// user or password, a server certificate the configured CAs do not sign,
// or TLS spoken to a plaintext port.
func explainConnect(c config.ClickHouse, err error) error {
	const unknownUser, wrongPassword, requiredPassword, authenticationFailed = 192, 193, 194, 516
	var ex *ch.Exception
	if errors.As(err, &ex) {
		switch ex.Code {
		case unknownUser, wrongPassword, requiredPassword, authenticationFailed:
			return fmt.Errorf("user %q was refused: check clickhouse.username and clickhouse.password (DRIFTGUARD_CLICKHOUSE_PASSWORD, or clickhouse.password_file): %w", c.Username, err)
		}
	}
	var unknownCA x509.UnknownAuthorityError
	if errors.As(err, &unknownCA) {
		if c.TLS.CAFile != "" {
			return fmt.Errorf("the server's certificate is not signed by a CA in clickhouse.tls.ca_file (%s): %w", c.TLS.CAFile, err)
		}
		return fmt.Errorf("the server's certificate is not signed by a CA the system trusts: set clickhouse.tls.ca_file to the CA that signed it: %w", err)
	}
	var hostname x509.HostnameError
	if errors.As(err, &hostname) {
		return fmt.Errorf("the server's certificate is not for this host: set clickhouse.tls.server_name to a name it carries: %w", err)
	}
	var notTLS tls.RecordHeaderError
	if errors.As(err, &notTLS) {
		return fmt.Errorf("the server does not speak TLS on this port: give clickhouse.addr its secure native port (tcp_port_secure, 9440 by default), or turn clickhouse.tls off: %w", err)
	}
	return err
}

// Migration is one embedded DDL file.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// Migrations returns the embedded migrations in version order, with the
// database name of c substituted and, when c names a cluster, rendered
// for it (see onCluster).
func Migrations(c config.ClickHouse) ([]Migration, error) {
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
		sql := strings.ReplaceAll(string(data), "{database}", c.Database)
		stmts, err := render(c.Cluster, splitStatements(sql))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		out = append(out, Migration{Version: version, Name: name, Statements: stmts})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}

// Bootstrap returns what Migrate runs before the migrations: the database
// and the table recording the migrations applied, rendered as they are.
func Bootstrap(c config.ClickHouse) ([]string, error) {
	return render(c.Cluster, []string{
		"CREATE DATABASE IF NOT EXISTS " + c.Database,
		"CREATE TABLE IF NOT EXISTS " + c.Database + ".schema_migrations (version UInt32, name String, applied_at DateTime) ENGINE = MergeTree() ORDER BY version",
	})
}

// render returns stmts as they run: unchanged on one server, each through
// onCluster on a cluster.
func render(cluster string, stmts []string) ([]string, error) {
	if cluster == "" {
		return stmts, nil
	}
	out := make([]string, len(stmts))
	for i, stmt := range stmts {
		var err error
		if out[i], err = onCluster(stmt, cluster); err != nil {
			return nil, err
		}
	}
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
func Migrate(ctx context.Context, conn driver.Conn, c config.ClickHouse, log *slog.Logger) ([]Migration, error) {
	log = telemetry.OrDiscard(log)
	database := c.Database
	migrations, err := Migrations(c)
	if err != nil {
		return nil, err
	}
	bootstrap, err := Bootstrap(c)
	if err != nil {
		return nil, err
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
