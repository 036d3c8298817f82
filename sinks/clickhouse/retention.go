package clickhouse

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/telemetry"
)

// retentionColumns is the time column each table's retention counts from:
// the DateTime its month partition is made of (schemas/clickhouse).
var retentionColumns = map[string]string{
	"events":          "processed_at",
	"dlq":             "dead_at",
	"orphans":         "expired_at",
	"ordering_minute": "minute",
	"replay_requests": "requested_at",
}

// ttlSince is the first release with table TTLs (19.6).
var ttlSince = [2]int{19, 6}

// RetentionAction is one thing the retention did, or would do with
// dry-run, to one table.
type RetentionAction struct {
	Table string
	// What is "ttl" (the table's TTL set to the retention), "drop" (a
	// month's partition dropped), or "kept-ttl" (the table has no
	// retention but keeps a TTL set before: said, never removed).
	What string
	// Partition and Rows name the dropped partition (YYYYMM) and how many
	// rows it held.
	Partition string
	Rows      uint64
	// Statement is what ran, or would run.
	Statement string
}

func (a RetentionAction) String() string {
	switch a.What {
	case "drop":
		return fmt.Sprintf("%s: drop partition %s (%d rows): %s", a.Table, a.Partition, a.Rows, a.Statement)
	case "kept-ttl":
		return fmt.Sprintf("%s: no retention configured, but the table has a TTL from before; remove it with ALTER TABLE ... REMOVE TTL if rows should be kept", a.Table)
	default:
		return fmt.Sprintf("%s: set TTL: %s", a.Table, a.Statement)
	}
}

// ApplyRetention applies clickhouse.retention to the tables of c's
// database as of now: on a server with table TTLs it sets each table's TTL
// (once: a TTL already equal is left alone, since changing it rewrites
// the table's parts), elsewhere it drops each month partition that ended
// a day (the server's time zone) more than the retention before now.
// With dryRun it only returns what it would do.
func ApplyRetention(ctx context.Context, conn driver.Conn, c config.ClickHouse, now time.Time, dryRun bool) ([]RetentionAction, error) {
	ttl, err := supportsTTL(ctx, conn)
	if err != nil {
		return nil, err
	}
	var out []RetentionAction
	byTable := c.Retention.ByTable()
	tables := make([]string, 0, len(byTable))
	for table := range byTable {
		tables = append(tables, table)
	}
	slices.Sort(tables)
	for _, table := range tables {
		keep := byTable[table]
		var actions []RetentionAction
		if ttl {
			actions, err = retentionByTTL(ctx, conn, c, table, keep)
		} else if keep > 0 {
			actions, err = retentionByPartitions(ctx, conn, c, table, keep, now)
		}
		if err != nil {
			return out, fmt.Errorf("retention of %s: %w", table, err)
		}
		for _, a := range actions {
			if !dryRun && a.Statement != "" {
				if err := conn.Exec(ctx, a.Statement); err != nil {
					return out, fmt.Errorf("retention of %s: %s: %w", table, a.Statement, err)
				}
			}
			out = append(out, a)
		}
	}
	return out, nil
}

// supportsTTL reports whether the server has table TTLs.
func supportsTTL(ctx context.Context, conn driver.Conn) (bool, error) {
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return false, fmt.Errorf("reading the server's version: %w", err)
	}
	return versionAtLeast(version, ttlSince), nil
}

// versionAtLeast reports whether a ClickHouse version ("18.16.1",
// "24.8.4.13") is at least min (major, minor).
func versionAtLeast(version string, min [2]int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > min[0] || major == min[0] && minor >= min[1]
}

// alterTable starts an ALTER of table, ON CLUSTER when c names one.
func alterTable(c config.ClickHouse, table string) string {
	stmt := "ALTER TABLE " + c.Database + "." + table
	if c.Cluster != "" {
		stmt += " ON CLUSTER " + c.Cluster
	}
	return stmt
}

// ttlStatement sets the TTL of a table kept for keep.
func ttlStatement(c config.ClickHouse, table string, keep time.Duration) string {
	return fmt.Sprintf("%s MODIFY TTL %s + INTERVAL %d SECOND", alterTable(c, table), retentionColumns[table], int64(keep/time.Second))
}

// TTLStatements are the statements that set the TTL of every table with
// a retention in c, as ApplyRetention runs them on a server with TTLs:
// for review, and for the check on a current ClickHouse
// (scripts/chdb-ddl.sh).
func TTLStatements(c config.ClickHouse) []string {
	var out []string
	for table, keep := range c.Retention.ByTable() {
		if keep > 0 {
			out = append(out, ttlStatement(c, table, keep))
		}
	}
	slices.Sort(out)
	return out
}

func retentionByTTL(ctx context.Context, conn driver.Conn, c config.ClickHouse, table string, keep time.Duration) ([]RetentionAction, error) {
	var engine string
	if err := conn.QueryRow(ctx, "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?", c.Database, table).Scan(&engine); err != nil {
		return nil, fmt.Errorf("reading its engine: %w", err)
	}
	_, current, hasTTL := strings.Cut(engine, " TTL ")
	if keep == 0 {
		if hasTTL {
			return []RetentionAction{{Table: table, What: "kept-ttl"}}, nil
		}
		return nil, nil
	}
	// The server shows INTERVAL n SECOND as toIntervalSecond(n).
	want := fmt.Sprintf("%s + toIntervalSecond(%d)", retentionColumns[table], int64(keep/time.Second))
	if hasTTL && strings.HasPrefix(current, want) {
		return nil, nil
	}
	return []RetentionAction{{Table: table, What: "ttl", Statement: ttlStatement(c, table, keep)}}, nil
}

func retentionByPartitions(ctx context.Context, conn driver.Conn, c config.ClickHouse, table string, keep time.Duration, now time.Time) ([]RetentionAction, error) {
	rows, err := conn.Query(ctx, "SELECT partition, sum(rows) FROM system.parts WHERE database = ? AND table = ? AND active GROUP BY partition ORDER BY partition",
		c.Database, table)
	if err != nil {
		return nil, fmt.Errorf("listing its partitions: %w", err)
	}
	defer rows.Close()
	// A month is dropped once its last row is older than the retention:
	// its end, a day later for the server's time zone, before the cutoff.
	cutoff := now.Add(-keep - 24*time.Hour)
	var out []RetentionAction
	for rows.Next() {
		var partition string
		var n uint64
		if err := rows.Scan(&partition, &n); err != nil {
			return nil, err
		}
		month, err := time.Parse("200601", partition)
		if err != nil {
			return nil, fmt.Errorf("partition %q is not a month (YYYYMM): the table is not partitioned as the migrations made it", partition)
		}
		if end := month.AddDate(0, 1, 0); !end.After(cutoff) {
			out = append(out, RetentionAction{Table: table, What: "drop", Partition: partition, Rows: n,
				Statement: alterTable(c, table) + " DROP PARTITION " + partition})
		}
	}
	return out, rows.Err()
}

// retainEvery applies the retention at start and then every
// clickhouse.retention.every until ctx ends; a failure is logged, and
// tried again at the next turn.
func retainEvery(ctx context.Context, conn driver.Conn, c config.ClickHouse, log *slog.Logger) {
	log = telemetry.OrDiscard(log)
	tick := time.NewTicker(c.Retention.Every)
	defer tick.Stop()
	for {
		actions, err := ApplyRetention(ctx, conn, c, time.Now(), false)
		for _, a := range actions {
			log.Info("clickhouse retention", "table", a.Table, "action", a.What, "partition", a.Partition, "rows", a.Rows)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("clickhouse retention failed; tried again later", "every", c.Retention.Every, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
