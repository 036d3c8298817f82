#!/usr/bin/env bash
# Throwaway PostgreSQL server on loopback for the presence peer
# (benchmarks/peers/pgpresence) and its tests.
#
#   benchmarks/scripts/postgres.sh install   apt-get install postgresql if missing
#   benchmarks/scripts/postgres.sh start     fresh cluster in a temp dir; prints
#                                            DRIFTGUARD_TEST_POSTGRES=<dsn> and DRIFTGUARD_TEST_POSTGRES_PID=<pid>
#   benchmarks/scripts/postgres.sh stop      stop the server started by `start`, delete its data
#
# PostgreSQL comes from Debian's archive, like ClickHouse in scripts/. The
# packaged cluster (5432) is never used: we run our own postmaster on
# POSTGRES_PORT (default 15432) with its data, socket and log in a temp dir.
# The server keeps PostgreSQL's defaults (fsync and synchronous_commit on),
# as a team would run it; POSTGRES_SETTINGS adds `name=value` settings
# (space-separated), e.g. POSTGRES_SETTINGS="synchronous_commit=off".
#
# PostgreSQL refuses to run as root, so as root the cluster belongs to the
# postgres user the package creates.
set -euo pipefail

NAME=postgres
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

POSTGRES_PORT="${POSTGRES_PORT:-15432}"
POSTGRES_SETTINGS="${POSTGRES_SETTINGS:-}"
READY_TIMEOUT="${POSTGRES_READY_TIMEOUT:-60}"

# The newest installed major version's binaries: Debian keeps them off the
# PATH, under /usr/lib/postgresql/<major>/bin.
bin_dir() {
  local d
  d="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null | sort -V | tail -n 1)"
  [[ -n "$d" && -x "$d/postgres" && -x "$d/initdb" ]] && echo "$d"
}

install() {
  bin_dir >/dev/null && return 0
  apt_install postgresql
  bin_dir >/dev/null || { log "postgresql installed, but no /usr/lib/postgresql/*/bin/postgres"; exit 1; }
}

# owner is the prefix that runs a command as the cluster's owner: postgres
# when we are root, else ourselves. setpriv execs in place, so a
# backgrounded server's $! is the postmaster itself.
owner=()
if ((EUID == 0)); then
  owner=(setpriv --reuid=postgres --regid=postgres --init-groups --reset-env --)
fi

stop() {
  # TERM is PostgreSQL's smart shutdown, which waits for every client to
  # disconnect; INT (fast) rolls back open transactions and stops at once.
  local pid="" dir=""
  [[ -f "$PID_FILE" ]] && pid="$(cat "$PID_FILE")"
  [[ -f "$DIR_FILE" ]] && dir="$(cat "$DIR_FILE")"
  if [[ -n "$dir" ]] && pid_is "$pid" "$dir/data"; then
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  stop_recorded "@DIR@/data"
}

start() {
  install
  local bin dir
  bin="$(bin_dir)"
  dir="$(new_run_dir "$POSTGRES_PORT")"
  if ((EUID == 0)); then
    id postgres >/dev/null 2>&1 || { log "no postgres user (the postgresql package creates it)"; exit 1; }
    chown postgres: "$dir"
  fi
  # From inside the temp dir: as postgres, the caller's folder may be unreadable.
  cd "$dir"
  # trust on loopback only: a private throwaway server, no password to keep.
  # --no-sync: losing this cluster to a crash of the host costs nothing.
  if ! "${owner[@]}" "$bin/initdb" -D "$dir/data" -U postgres -E UTF8 --locale=C \
      --auth=trust --no-sync >"$dir/initdb.log" 2>&1; then
    log "initdb failed:"
    tail -n 30 "$dir/initdb.log" >&2
    stop
    exit 1
  fi
  local settings=(-c listen_addresses=127.0.0.1 -c "port=$POSTGRES_PORT"
    -c "unix_socket_directories=$dir")
  local s
  for s in $POSTGRES_SETTINGS; do settings+=(-c "$s"); done

  # setsid: the server must outlive this script and not get the caller's ^C
  # before `stop` runs. Output goes to a file so that $(postgres.sh start)
  # returns.
  setsid "${owner[@]}" "$bin/postgres" -D "$dir/data" "${settings[@]}" \
    </dev/null >>"$dir/server.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$PID_FILE"

  local deadline=$((SECONDS + READY_TIMEOUT))
  until "$bin/pg_isready" -q -h 127.0.0.1 -p "$POSTGRES_PORT" -d postgres; do
    if ! pid_is "$pid" "$dir/data" || ((SECONDS >= deadline)); then
      log "server exited or was not ready within ${READY_TIMEOUT}s; last log lines:"
      tail -n 40 "$dir/server.log" >&2 2>/dev/null || true
      stop
      exit 1
    fi
    sleep 0.25
  done
  log "postgresql $("$bin/postgres" --version | awk '{print $3}') ready (pid $pid, data $dir)"
  echo "DRIFTGUARD_TEST_POSTGRES=postgres://postgres@127.0.0.1:$POSTGRES_PORT/postgres?sslmode=disable"
  echo "DRIFTGUARD_TEST_POSTGRES_PID=$pid"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 install|start|stop" >&2
    exit 2
    ;;
esac
