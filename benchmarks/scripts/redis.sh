#!/usr/bin/env bash
# Throwaway Redis server on loopback for the orders peer
# (benchmarks/peers/redisorders) and its tests.
#
#   benchmarks/scripts/redis.sh install   apt-get install redis-server if missing
#   benchmarks/scripts/redis.sh start     fresh server in a temp dir; prints
#                                         DRIFTGUARD_TEST_REDIS=host:port and DRIFTGUARD_TEST_REDIS_PID=<pid>
#   benchmarks/scripts/redis.sh stop      stop the server started by `start`, delete its data
#
# Redis comes from Debian's archive, like ClickHouse in scripts/. The
# packaged service (6379) is never used: we run our own server on
# REDIS_PORT (default 16379) with its data and log in a temp dir. It keeps
# Redis's built-in defaults (RDB snapshots, no append-only file), as the
# orphan seed ran it; REDIS_SETTINGS adds `--name value` arguments, e.g.
# REDIS_SETTINGS="--appendonly yes --appendfsync everysec".
set -euo pipefail

NAME=redis
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

REDIS_PORT="${REDIS_PORT:-16379}"
REDIS_SETTINGS="${REDIS_SETTINGS:-}"
READY_TIMEOUT="${REDIS_READY_TIMEOUT:-30}"

install() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
  # On a systemd machine the postinst also starts the system service on
  # 6379; harmless here, since we only use our own port.
  apt_install redis-server
}

# The config file's path is in the process title (see start), so stop
# needs nothing but the recorded pid and folder.
stop() { stop_recorded "@DIR@/redis.conf"; }

start() {
  install
  local bin dir
  bin="$(command -v redis-server)"
  dir="$(new_run_dir "$REDIS_PORT")"
  # The built-in defaults, then ours. The title names the config file,
  # which `stop` checks before it signals. A throwaway server skips the
  # snapshot at shutdown: it would be deleted with the folder.
  cat >"$dir/redis.conf" <<CONF
bind 127.0.0.1
port $REDIS_PORT
dir $dir
logfile $dir/server.log
daemonize no
protected-mode yes
shutdown-on-sigterm nosave
proc-title-template "{title} {listen-addr} {config-file}"
CONF
  local args=("$dir/redis.conf")
  # shellcheck disable=SC2206 # word splitting is the point: "--name value ..."
  args+=($REDIS_SETTINGS)

  # setsid: the server must outlive this script and not get the caller's ^C
  # before `stop` runs.
  setsid "$bin" "${args[@]}" </dev/null >>"$dir/stdout.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$PID_FILE"

  local deadline=$((SECONDS + READY_TIMEOUT))
  until [[ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
      log "server exited or was not ready within ${READY_TIMEOUT}s; last log lines:"
      tail -n 40 "$dir/server.log" "$dir/stdout.log" >&2 2>/dev/null || true
      stop
      exit 1
    fi
    sleep 0.1
  done
  log "redis $("$bin" --version | awk '{print $3}' | cut -d= -f2) ready (pid $pid, data $dir)"
  echo "DRIFTGUARD_TEST_REDIS=127.0.0.1:$REDIS_PORT"
  echo "DRIFTGUARD_TEST_REDIS_PID=$pid"
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
