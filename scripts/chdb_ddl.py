"""Apply driftguard's ClickHouse migrations to a current ClickHouse engine.

chdb runs a current ClickHouse in this process. The statements come from
`driftguard migrate --print` (split exactly as Migrate splits them); this
script applies them in a fresh chdb session with a few rows in events
before ordering_minute and a few after, checks that the backfill and the
view counted each row once, then runs every named query of
docs/analyst-queries.md so none uses a feature the current engine lacks.
The integration tests run the same queries on 18.16 and check their
numbers.

With CLUSTER_DDL_FILE, the statements `migrate --print` renders for
clickhouse.cluster CLUSTER are parsed too (EXPLAIN AST: chdb has no
cluster to run them on), and each, as the engine formats it back, must be
ON CLUSTER, every CREATE TABLE with a Replicated engine.

With TTL_DDL_FILE in the environment, the statements `driftguard retention
--print` renders are applied after everything else: each table must then
show the TTL as the sink reads it back (sinks/clickhouse/retention.go,
retentionByTTL), and a merge must drop the rows older than it and keep a
recent one.

    python chdb_ddl.py DDL_FILE ANALYST_QUERIES_MD [CLUSTER_DDL_FILE CLUSTER]
"""

import os
import re
import sys
import tempfile
import time

import chdb
from chdb import session

DATABASE = "driftguard"
ORDERING_MINUTE = 3  # the migration that creates ordering_minute

# (stream, entity_key, event_id, outcome, gap, occurred_at_ms,
# received_at_ms, processed_at_ms): one minute, four decisions.
ROWS = [
    ("presence", "alice", "a-1", "applied", 0, 1_700_000_000_000, 1_700_000_001_000, 1_700_000_001_010),
    ("presence", "alice", "a-3", "applied", 1, 1_700_000_002_000, 1_700_000_005_000, 1_700_000_005_030),
    ("presence", "alice", "a-2", "stale", 0, 1_700_000_001_000, 1_700_000_006_000, 1_700_000_006_020),
    ("presence", "alice", "a-2", "duplicate", 0, 1_700_000_001_000, 1_700_000_007_000, 1_700_000_007_040),
]


def quantile(values, level):
    """ClickHouse's exact quantile: linear interpolation between ranks."""
    v = sorted(values)
    pos = level * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    q = v[lo] + (v[hi] - v[lo]) * (pos - lo)
    return f"{q:g}"


def expected_ordering_minute(rows):
    """What the ordering_minute query below must return for rows."""
    lines = []
    for outcome in sorted({r[3] for r in rows}):
        rs = [r for r in rows if r[3] == outcome]
        gaps = [r[4] for r in rs]
        lateness = [r[6] - r[5] for r in rs]
        latency = [r[7] - r[6] for r in rs]
        cells = [
            outcome, len(rs), sum(1 for g in gaps if g > 0), sum(gaps), max(gaps),
            f"[{quantile(lateness, 0.5)},{quantile(lateness, 0.99)}]", f"[{quantile(latency, 0.5)}]",
        ]
        lines.append("\t".join(str(c) for c in cells) + "\n")
    return "".join(lines)


def migrations(path):
    """(version, statements) of `driftguard migrate --print`: a "-- NNNN_name"
    line starts each migration; each statement ends in ";" and a blank line."""
    out = []
    for part in open(path).read().split(";\n\n"):
        lines = []
        for line in part.split("\n"):
            m = re.match(r"-- (\d{4})_", line)
            if m:
                out.append((int(m.group(1)), []))
            elif not line.startswith("-- "):
                lines.append(line)
        stmt = "\n".join(lines).strip()
        if stmt:
            out[-1][1].append(stmt)
    return out


def apply(s, stmt):
    """Run stmt as Migrate does: an ADD COLUMN that finds its column
    (DUPLICATE_COLUMN here, ILLEGAL_COLUMN on 18.16) ran before, since 18.16
    has no ADD COLUMN IF NOT EXISTS (sinks/clickhouse/migrate.go,
    columnAdded)."""
    try:
        s.query(stmt)
    except Exception as e:  # noqa: BLE001 - re-raised unless it is that case
        if not (stmt.startswith("ALTER TABLE") and "ADD COLUMN" in stmt and "Code: 15" in str(e)):
            raise


def insert_events(s, rows, first_offset):
    values = ", ".join(
        f"('{st}', '{key}', '{eid}', 'presence.changed', 0, '{outcome}', '', {gap}, 0, "
        f"{occ}, {rec}, {proc}, toDateTime(intDiv({proc}, 1000)), 'presence.outcomes', 0, {first_offset + i}, 0, "
        f"{first_offset + i}, '{{}}')"
        for i, (st, key, eid, outcome, gap, occ, rec, proc) in enumerate(rows)
    )
    s.query(
        f"INSERT INTO {DATABASE}.events (stream, entity_key, event_id, event_type, version, outcome, reason, gap, "
        "buffer_depth, occurred_at_ms, received_at_ms, processed_at_ms, processed_at, `topic`, `partition`, "
        f"`offset`, input_partition, input_offset, payload) VALUES {values}"
    )


def named_queries(path):
    """Every ```sql block of the doc that starts with `-- name: NAME`."""
    text = open(path).read()
    out = {}
    for block in re.findall(r"```sql\n(.*?)```", text, re.S):
        m = re.match(r"-- name: (\S+)\n", block)
        if m:
            out[m.group(1)] = block.strip().rstrip(";")
    return out


def check_cluster(s, path, cluster, single):
    """Parse every statement of the cluster rendering at path, which has
    as many as single, the one-server rendering. Returns how many."""
    stmts = [stmt for _, part in migrations(path) for stmt in part]
    if len(stmts) != len(single):
        sys.exit(f"{path}: {len(stmts)} statements for the cluster, {len(single)} for one server")
    for stmt in stmts:
        try:
            ast = s.query(f"EXPLAIN AST {stmt}", "TSV").bytes().decode()
            literal = stmt.replace("\\", "\\\\").replace("'", "\\'")
            formatted = s.query(f"SELECT formatQuerySingleLine('{literal}')", "TSV").bytes().decode()
        except Exception as e:  # noqa: BLE001 - any engine error fails the check
            sys.exit(f"cluster DDL does not parse on chdb: {e}\n{stmt}")
        if stmt.startswith("INSERT INTO"):
            continue
        if f" ON CLUSTER {cluster} " not in formatted.strip() + " ":
            sys.exit(f"cluster DDL without ON CLUSTER {cluster}, as chdb reads it:\n{formatted}")
        if stmt.startswith("CREATE TABLE") and not re.search(r"^\s*Function Replicated\w*MergeTree ", ast, re.M):
            sys.exit(f"cluster DDL: a table without a Replicated engine, as chdb reads it:\n{ast}")
    return len(stmts)


def check_ttl(s, path):
    """Apply the TTL statements at path; each table must then carry the TTL
    as `TTL <column> + toIntervalSecond(<n>)` (how the sink finds it set),
    and OPTIMIZE FINAL must drop events' rows older than it (ROWS are from
    2023) and keep one of now. Returns how many statements."""
    stmts = [p.strip() for p in open(path).read().split(";\n\n") if p.strip()]
    if not stmts:
        sys.exit(f"{path}: no TTL statements")
    for stmt in stmts:
        m = re.match(r"ALTER TABLE (\w+)\.(\w+) MODIFY TTL (\w+) \+ INTERVAL (\d+) SECOND$", stmt)
        if not m:
            sys.exit(f"TTL statement of an unexpected shape:\n{stmt}")
        s.query(stmt)
        engine = s.query(
            f"SELECT engine_full FROM system.tables WHERE database = '{m.group(1)}' AND name = '{m.group(2)}'", "TSV"
        ).bytes().decode()
        if f" TTL {m.group(3)} + toIntervalSecond({m.group(4)})" not in engine:
            sys.exit(f"{m.group(2)}: the TTL does not read back as the sink expects:\n{engine}")
    insert_events(s, [("presence", "bob", "b-1", "applied", 0, 0, 0, int(time.time() * 1000))], 100)
    s.query(f"OPTIMIZE TABLE {DATABASE}.events FINAL")
    left = s.query(f"SELECT event_id FROM {DATABASE}.events", "TSV").bytes().decode().split()
    if left != ["b-1"]:
        sys.exit(f"events after its TTL and a merge: {left}, want only the recent b-1")
    return len(stmts)


def main(ddl_path, doc_path, cluster_ddl_path=None, cluster=None):
    with tempfile.TemporaryDirectory() as data:
        s = session.Session(data)
        s.query(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        ms = migrations(ddl_path)
        stmts = [stmt for _, part in ms for stmt in part]
        # Events from before ordering_minute (version 3) are backfilled;
        # later ones pass through its view. Then everything again, as a
        # migration interrupted and run again would: nothing counts twice.
        for version, part in ms:
            if version < ORDERING_MINUTE:
                for stmt in part:
                    apply(s, stmt)
        insert_events(s, ROWS[:2], 0)
        for stmt in stmts:
            apply(s, stmt)
        insert_events(s, ROWS[2:], 2)
        for stmt in stmts:
            apply(s, stmt)
        got = s.query(
            f"SELECT outcome, sum(events), sum(gaps), sum(gap_sum), maxMerge(gap_max), "
            f"quantilesMerge(0.5, 0.99)(lateness_ms), quantilesMerge(0.5)(latency_ms) "
            f"FROM {DATABASE}.ordering_minute GROUP BY outcome ORDER BY outcome",
            "TSV",
        ).bytes().decode()
        want = expected_ordering_minute(ROWS)
        if got != want:
            sys.exit(f"ordering_minute on chdb:\n{got}\nwant:\n{want}")
        queries = named_queries(doc_path)
        if not queries:
            sys.exit(f"no named queries in {doc_path}")
        for name, sql in queries.items():
            try:
                s.query(sql)
            except Exception as e:  # noqa: BLE001 - any engine error fails the check
                sys.exit(f"analyst query {name} fails on chdb: {e}")
        clustered = ""
        if cluster_ddl_path:
            n = check_cluster(s, cluster_ddl_path, cluster, stmts)
            clustered = f", {n} statements rendered for cluster {cluster} parsed (ON CLUSTER, Replicated engines)"
        if os.environ.get("TTL_DDL_FILE"):
            n = check_ttl(s, os.environ["TTL_DDL_FILE"])
            clustered += f", {n} retention TTLs set and read back, events' expired rows dropped by a merge"
        version = s.query("SELECT version()", "TSV").bytes().decode().strip()
        print(
            f"chdb {chdb.__version__} (ClickHouse {version}): {len(stmts)} migration statements applied twice, "
            f"ordering_minute backfilled and fed by its view as expected, {len(queries)} analyst queries run"
            f"{clustered}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
