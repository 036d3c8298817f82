#!/usr/bin/env bash
# Throwaway ClickHouse server on loopback for the integration tests.
#
#   scripts/clickhouse.sh install   apt-get install clickhouse-server/-client if missing
#   scripts/clickhouse.sh start     fresh server in a temp dir; prints DRIFTGUARD_TEST_CLICKHOUSE=host:port
#   scripts/clickhouse.sh stop      stop the server started by `start`, delete its data
#
# ClickHouse comes from Debian's own archive (18.16 on bookworm) because that
# is the only source of it reachable from CI and dev machines. The packaged
# system service is never used: it may or may not be running (on 9000/8123),
# and we stay out of its way on other ports.
set -euo pipefail

CLICKHOUSE_PORT="${CLICKHOUSE_PORT:-19000}"
CLICKHOUSE_HTTP_PORT="${CLICKHOUSE_HTTP_PORT:-18123}"
STATE_DIR="${DRIFTGUARD_TEST_STATE:-${TMPDIR:-/tmp}/driftguard-test-${USER:-$(id -un)}}"
PID_FILE="$STATE_DIR/clickhouse.pid"
DIR_FILE="$STATE_DIR/clickhouse.dir"
READY_TIMEOUT="${CLICKHOUSE_READY_TIMEOUT:-60}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { echo "clickhouse.sh: $*" >&2; }

# The server lives in /usr/sbin, which is not on a normal user's PATH.
server_bin() {
  local b
  for b in /usr/sbin/clickhouse-server /usr/bin/clickhouse-server "$(command -v clickhouse-server || true)"; do
    [[ -n "$b" && -x "$b" ]] && { echo "$b"; return 0; }
  done
  return 1
}

install() {
  server_bin >/dev/null && command -v clickhouse-client >/dev/null && return 0
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || { log "need root or sudo to apt-get install clickhouse"; exit 1; }
    sudo=(sudo)
  fi
  log "installing clickhouse-server and clickhouse-client from Debian"
  "${sudo[@]}" apt-get update -qq >&2
  # On a systemd machine the postinst also enables and starts the system
  # service on 9000/8123; harmless here, since we only use our own ports.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends clickhouse-server clickhouse-client >&2
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# True if the pid in $1 is alive and its command line contains $2, so that a
# recycled pid never gets a signal from us.
pid_is() {
  local cmd
  [[ -n "$1" ]] && cmd="$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline")" && [[ "$cmd" == *"$2"* ]]
}

stop() {
  local pid="" dir=""
  [[ -f "$PID_FILE" ]] && pid="$(cat "$PID_FILE")"
  [[ -f "$DIR_FILE" ]] && dir="$(cat "$DIR_FILE")"
  if [[ -n "$dir" ]] && pid_is "$pid" "$dir/config.xml"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      log "server $pid ignored TERM for 20s, killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
  fi
  # Only ever delete a folder this script created.
  if [[ "$dir" == *"/driftguard-clickhouse."* && -d "$dir" ]]; then rm -rf "$dir"; fi
  rm -f "$PID_FILE" "$DIR_FILE"
}

start() {
  install
  local bin
  bin="$(server_bin)"
  mkdir -p "$STATE_DIR"
  stop # a leftover server from an aborted run would hold the ports
  if port_open "$CLICKHOUSE_PORT" || port_open "$CLICKHOUSE_HTTP_PORT"; then
    log "port $CLICKHOUSE_PORT or $CLICKHOUSE_HTTP_PORT on 127.0.0.1 is already in use"
    exit 1
  fi

  local dir
  dir="$(mktemp -d "${TMPDIR:-/tmp}/driftguard-clickhouse.XXXXXX")"
  echo "$dir" >"$DIR_FILE"
  mkdir -p "$dir"/{data,tmp,user_files,format_schemas,log}
  # 18.16 config format (root <yandex>). Only the IPv4 loopback: listening on
  # ::1 fails outright on hosts without IPv6. No interserver port: that is
  # only opened when configured. Caches are sized for a 2-core test machine.
  # The same templates `driftguard dev` embeds for its own child server.
  local tmpl="$ROOT/internal/chlocal"
  sed -e "s|{{DIR}}|$dir|g" -e "s|{{TCP_PORT}}|$CLICKHOUSE_PORT|g" -e "s|{{HTTP_PORT}}|$CLICKHOUSE_HTTP_PORT|g" \
    "$tmpl/config.xml" >"$dir/config.xml"
  cp "$tmpl/users.xml" "$dir/users.xml"

  # setsid: the server must outlive this script and not get the caller's ^C
  # before `stop` runs. Output goes to a file so that $(clickhouse.sh start)
  # returns. Running as root is accepted by 18.16 with a private data dir.
  setsid "$bin" --config-file="$dir/config.xml" \
    </dev/null >>"$dir/log/stdout.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$PID_FILE"

  local deadline=$((SECONDS + READY_TIMEOUT))
  until clickhouse-client --host 127.0.0.1 --port "$CLICKHOUSE_PORT" -q 'SELECT 1' >/dev/null 2>&1; do
    if ! pid_is "$pid" "$dir/config.xml" || ((SECONDS >= deadline)); then
      log "server exited or was not ready within ${READY_TIMEOUT}s; last log lines:"
      tail -n 40 "$dir/log/server.err.log" "$dir/log/stdout.log" >&2 2>/dev/null || true
      stop
      exit 1
    fi
    sleep 0.5
  done
  log "clickhouse $(clickhouse-client --host 127.0.0.1 --port "$CLICKHOUSE_PORT" -q "SELECT version()") ready (pid $pid, data $dir)"
  echo "DRIFTGUARD_TEST_CLICKHOUSE=127.0.0.1:$CLICKHOUSE_PORT"
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
