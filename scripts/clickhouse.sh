#!/usr/bin/env bash
# Throwaway ClickHouse server on loopback for the integration tests.
#
#   scripts/clickhouse.sh install   apt-get install clickhouse-server/-client if missing
#   scripts/clickhouse.sh start     fresh server in a temp dir; prints DRIFTGUARD_TEST_CLICKHOUSE=host:port
#                                   and the secure port's DRIFTGUARD_TEST_CLICKHOUSE_SECURE,
#                                   _CA, _USER and _PASSWORD (see secure_config)
#   scripts/clickhouse.sh stop      stop the server started by `start`, delete its data
#
# ClickHouse comes from Debian's own archive (18.16 on bookworm) because that
# is the only source of it reachable from CI and dev machines. The packaged
# system service is never used: it may or may not be running (on 9000/8123),
# and we stay out of its way on other ports.
set -euo pipefail

NAME=clickhouse
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLICKHOUSE_PORT="${CLICKHOUSE_PORT:-19000}"
CLICKHOUSE_HTTP_PORT="${CLICKHOUSE_HTTP_PORT:-18123}"
CLICKHOUSE_SECURE_PORT="${CLICKHOUSE_SECURE_PORT:-19440}"
READY_TIMEOUT="${CLICKHOUSE_READY_TIMEOUT:-60}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"


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
  # On a systemd machine the postinst also enables and starts the system
  # service on 9000/8123; harmless here, since we only use our own ports.
  apt_install clickhouse-server clickhouse-client
}

stop() { stop_recorded "@DIR@/config.xml"; }

# TLS_USER is the password user the tests connect as over TLS.
TLS_USER=driftguard_tls

# secure_config DIR PORT: a CA and a server certificate for 127.0.0.1 made
# now with openssl (the CA is the tests' only trust anchor, so a client
# trusting the system roots alone must fail), 18.16's secure native port
# (tcp_port_secure, served with the <openSSL><server> settings) and a user
# with a random password. Both go in the config.d and users.d folders the
# server merges into config.xml and users.xml, so the templates shared with
# `driftguard dev` stay plaintext and open.
secure_config() {
  local dir="$1" port="$2" tls="$1/tls"
  mkdir -p "$dir/config.d" "$dir/users.d"
  if ! make_test_certificates "$tls" >>"$dir/log/openssl.log" 2>&1; then
    log "making the test certificates failed:"
    tail -n 30 "$dir/log/openssl.log" >&2
    return 1
  fi
  cat >"$dir/config.d/secure.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <tcp_port_secure>$port</tcp_port_secure>
  <openSSL>
    <server>
      <certificateFile>$tls/server.pem</certificateFile>
      <privateKeyFile>$tls/server.key</privateKeyFile>
      <verificationMode>none</verificationMode>
      <loadDefaultCAFile>false</loadDefaultCAFile>
      <cacheSessions>true</cacheSessions>
      <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols>
      <preferServerCiphers>true</preferServerCiphers>
    </server>
  </openSSL>
</yandex>
EOF
  TLS_PASSWORD="$(openssl rand -hex 16)"
  cat >"$dir/users.d/$TLS_USER.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <users>
    <$TLS_USER>
      <password>$TLS_PASSWORD</password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </$TLS_USER>
  </users>
</yandex>
EOF
}

start() {
  install
  local bin
  bin="$(server_bin)"
  local dir
  dir="$(new_run_dir "$CLICKHOUSE_PORT" "$CLICKHOUSE_HTTP_PORT" "$CLICKHOUSE_SECURE_PORT")"
  mkdir -p "$dir"/{data,tmp,user_files,format_schemas,log}
  # 18.16 config format (root <yandex>). Only the IPv4 loopback: listening on
  # ::1 fails outright on hosts without IPv6. No interserver port: that is
  # only opened when configured. Caches are sized for a 2-core test machine.
  # The same templates `driftguard dev` embeds for its own child server.
  local tmpl="$ROOT/internal/chlocal"
  sed -e "s|{{DIR}}|$dir|g" -e "s|{{TCP_PORT}}|$CLICKHOUSE_PORT|g" -e "s|{{HTTP_PORT}}|$CLICKHOUSE_HTTP_PORT|g" \
    "$tmpl/config.xml" >"$dir/config.xml"
  cp "$tmpl/users.xml" "$dir/users.xml"
  secure_config "$dir" "$CLICKHOUSE_SECURE_PORT" || { stop; exit 1; }

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
  echo "DRIFTGUARD_TEST_CLICKHOUSE_SECURE=127.0.0.1:$CLICKHOUSE_SECURE_PORT"
  echo "DRIFTGUARD_TEST_CLICKHOUSE_CA=$dir/tls/ca.pem"
  echo "DRIFTGUARD_TEST_CLICKHOUSE_USER=$TLS_USER"
  echo "DRIFTGUARD_TEST_CLICKHOUSE_PASSWORD=$TLS_PASSWORD"
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
