# shellcheck shell=bash
# Shared by kafka.sh, clickhouse.sh and chromium.sh: the state folder,
# process checks, the stop sequence and apt-get installs. Source it after
# setting NAME (used in messages and file names).

STATE_DIR="${DRIFTGUARD_TEST_STATE:-${TMPDIR:-/tmp}/driftguard-test-${USER:-$(id -un)}}"
PID_FILE="$STATE_DIR/$NAME.pid"
DIR_FILE="$STATE_DIR/$NAME.dir"

log() { echo "$NAME.sh: $*" >&2; }

# apt_install PKG...: installs Debian packages with apt-get, as root or
# through sudo. The package lists are updated once per half hour, not once
# per script: the test task installs from five scripts on a fresh machine,
# and each update costs seconds to tens of seconds. Another install that
# holds dpkg's lock is waited for rather than failed on.
apt_install() {
  local sudo=() stamp="$STATE_DIR/apt-lists-updated"
  if ((EUID != 0)); then
    command -v sudo >/dev/null || { log "need root or sudo to apt-get install $*"; exit 1; }
    sudo=(sudo)
  fi
  log "installing $* from Debian"
  mkdir -p "$STATE_DIR"
  if [[ -z "$(find "$stamp" -mmin -30 2>/dev/null)" ]]; then
    "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
    touch "$stamp"
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$@" >&2
}

# True if something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# True if the pid in $1 is alive and its command line contains $2, so that a
# recycled pid never gets a signal from us. Only for before the TERM: a JVM
# that is shutting down may already show an empty command line.
pid_is() {
  local cmd
  [[ -n "$1" ]] && cmd="$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline")" && [[ "$cmd" == *"$2"* ]]
}

# stop_pid_file FILE MARKER: stops the process whose pid FILE holds if its
# command line still contains MARKER (TERM, then KILL after 20 s), and
# deletes FILE.
stop_pid_file() {
  local file="$1" marker="$2" pid=""
  [[ -f "$file" ]] && pid="$(cat "$file")"
  if pid_is "$pid" "$marker"; then
    # A fault test may have left it paused (SIGSTOP); TERM needs it running.
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    # A clean shutdown takes a few seconds (log flush, controlled shutdown).
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      log "process $pid ignored TERM for 20s, killing it"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
  fi
  rm -f "$file"
}

# stop_recorded MARKER: stops the process recorded by `start` if its command
# line still contains MARKER (@DIR@ standing for its temp folder), and
# deletes the temp folder it recorded, only if this script made it.
stop_recorded() {
  local marker="$1" dir=""
  [[ -f "$DIR_FILE" ]] && dir="$(cat "$DIR_FILE")"
  marker="${marker//@DIR@/$dir}"
  if [[ -n "$dir" ]]; then stop_pid_file "$PID_FILE" "$marker"; fi
  if [[ "$dir" == *"/driftguard-$NAME."* && -d "$dir" ]]; then rm -rf "$dir"; fi
  rm -f "$PID_FILE" "$DIR_FILE"
}

# new_run_dir PORT...: stops a leftover run (it would hold the ports), checks
# that the ports are free, and prints a fresh temp folder, recorded for stop.
new_run_dir() {
  mkdir -p "$STATE_DIR"
  stop
  local port dir
  for port in "$@"; do
    if port_open "$port"; then
      log "port $port on 127.0.0.1 is already in use"
      return 1
    fi
  done
  dir="$(mktemp -d "${TMPDIR:-/tmp}/driftguard-$NAME.XXXXXX")"
  echo "$dir" >"$DIR_FILE"
  echo "$dir"
}

# make_test_certificates DIR: a CA (ca.pem, ca.key), a server key and
# certificate for 127.0.0.1 and localhost (server.key, server.pem) and a
# client certificate for CN=admin (client.key, client.pem), all P-256 and
# valid two days, for the test servers' TLS listeners. The CA is the
# tests' only trust anchor, so a client trusting the system roots alone
# fails. Each step is checked: callers run it under `if !`, where set -e
# does not hold.
make_test_certificates() {
  local d="$1" key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  command -v openssl >/dev/null || apt_install openssl
  mkdir -p "$d" || return 1
  openssl req -x509 "${key[@]}" -keyout "$d/ca.key" -out "$d/ca.pem" -days 2 \
    -subj "/CN=driftguard test CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" || return 1
  local name ext
  for name in server client; do
    if [[ "$name" == server ]]; then
      ext=$'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth'
      openssl req "${key[@]}" -keyout "$d/server.key" -out "$d/server.csr" -subj "/CN=localhost" || return 1
    else
      ext="extendedKeyUsage=clientAuth"
      openssl req "${key[@]}" -keyout "$d/client.key" -out "$d/client.csr" -subj "/CN=admin" || return 1
    fi
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
      -days 2 -out "$d/$name.pem" -extfile <(printf '%s\n' "$ext") || return 1
  done
  chmod 600 "$d"/*.key
}
