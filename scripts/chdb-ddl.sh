#!/usr/bin/env bash
# Check the ClickHouse DDL and the analyst queries on a current ClickHouse
# engine, as well as the 18.16 server the integration tests use:
#
#   scripts/chdb-ddl.sh
#
# Installs chdb (a current ClickHouse in a Python process) from PyPI into a
# virtualenv under ~/.cache/driftguard once, then applies every migration
# as `driftguard migrate --print` prints it and runs scripts/chdb_ddl.py,
# which also parses the statements `migrate --print` renders for a
# cluster (clickhouse.cluster), and applies the TTLs `retention --print`
# renders (clickhouse.retention on servers with TTL).
set -euo pipefail

CHDB_VERSION="${CHDB_VERSION:-4.4.0}"
# The engine chdb 4.4.0 wraps; pinned with it.
CHDB_CORE_VERSION="${CHDB_CORE_VERSION:-26.9.0}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/driftguard/chdb-$CHDB_VERSION"

log() { echo "chdb-ddl.sh: $*" >&2; }

if ! "$venv/bin/python" -c "import chdb" 2>/dev/null; then
  log "installing chdb $CHDB_VERSION into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # Without pandas and pyarrow (600 MB): they serve DataFrame results only.
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    "chdb==$CHDB_VERSION" "chdb-core==$CHDB_CORE_VERSION"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/driftguard-ddl.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$ROOT"
go build -o "$work/driftguard" ./cmd/driftguard
# Only the database name (and the cluster's) matter to --print; no config
# file, no server.
cluster=driftguard_cluster
env -u DRIFTGUARD_CONFIG -u DRIFTGUARD_CLICKHOUSE_CLUSTER DRIFTGUARD_CLICKHOUSE_DATABASE=driftguard \
  "$work/driftguard" migrate --print >"$work/ddl.sql"
env -u DRIFTGUARD_CONFIG DRIFTGUARD_CLICKHOUSE_DATABASE=driftguard DRIFTGUARD_CLICKHOUSE_CLUSTER="$cluster" \
  "$work/driftguard" migrate --print >"$work/cluster.sql"
# The TTLs `driftguard retention` sets on servers that have them, for a
# retention of 90 days on every table that takes one.
cat >"$work/retention.yaml" <<'YAML'
clickhouse:
  retention: {events: 2160h, dlq: 2160h, orphans: 2160h, ordering_minute: 2160h, replay_requests: 2160h}
YAML
env -u DRIFTGUARD_CLICKHOUSE_CLUSTER DRIFTGUARD_CLICKHOUSE_DATABASE=driftguard \
  "$work/driftguard" retention --print --config "$work/retention.yaml" >"$work/ttl.sql"
TTL_DDL_FILE="$work/ttl.sql" \
  "$venv/bin/python" scripts/chdb_ddl.py "$work/ddl.sql" docs/analyst-queries.md "$work/cluster.sql" "$cluster"
