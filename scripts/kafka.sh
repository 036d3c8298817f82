#!/usr/bin/env bash
# Throwaway Apache Kafka (KRaft) on loopback for the integration tests: one
# node that is broker and controller, or a cluster of three such nodes for
# the fault tests.
#
#   scripts/kafka.sh fetch   download Kafka + runtime deps from Maven Central (cached)
#   scripts/kafka.sh start   fresh broker in a temp dir; prints DRIFTGUARD_TEST_KAFKA=host:port
#   scripts/kafka.sh stop    stop the broker started by `start`, delete its data
#   scripts/kafka.sh libs    print the classpath folder (TopicCommand etc. live there too)
#
#   scripts/kafka.sh cluster start       three nodes in a temp dir; prints
#                                        DRIFTGUARD_TEST_CLUSTER=host:port,host:port,host:port,
#                                        DRIFTGUARD_TEST_CLUSTER_PIDS=pid,pid,pid (node ids 1, 2, 3)
#                                        and DRIFTGUARD_TEST_CLUSTER_CONTROL (this script's path)
#   scripts/kafka.sh cluster restart N   start node N again on its data (after a test killed it);
#                                        prints the new DRIFTGUARD_TEST_CLUSTER_PIDS
#   scripts/kafka.sh cluster stop        stop every node of the cluster, delete its data
#
#   scripts/kafka.sh secure start        one node with TLS, SASL and the standard authorizer;
#                                        prints the DRIFTGUARD_TEST_KAFKA_SECURE_* variables
#                                        (listed in secure_start)
#   scripts/kafka.sh secure stop         stop it, delete its data and certificates
#
# The single broker, the cluster and the secure broker have state files and
# ports of their own, so all run at once.
#
# Kafka is fetched as Maven artifacts rather than the release tarball because
# Maven Central is the only Kafka source reachable from CI and dev machines.
set -euo pipefail

# The cluster keeps its own state files (lib.sh names them after NAME).
case "${1:-}" in
  cluster) NAME=kafka-cluster ;;
  secure) NAME=kafka-secure ;;
  *) NAME=kafka ;;
esac
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
# The cluster's client and controller ports, one per node (node ids 1, 2,
# 3), below Linux's ephemeral range so that no client's port takes one.
IFS=, read -r -a CLUSTER_PORTS <<<"${KAFKA_CLUSTER_PORTS:-19192,19193,19194}"
IFS=, read -r -a CLUSTER_CONTROLLER_PORTS <<<"${KAFKA_CLUSTER_CONTROLLER_PORTS:-19292,19293,19294}"
# The secure broker's listeners: SASL over TLS, TLS with client
# certificates required (mTLS), SASL over plaintext, and its controller.
KAFKA_SECURE_SASL_SSL_PORT="${KAFKA_SECURE_SASL_SSL_PORT:-19392}"
KAFKA_SECURE_MTLS_PORT="${KAFKA_SECURE_MTLS_PORT:-19393}"
KAFKA_SECURE_SASL_PLAINTEXT_PORT="${KAFKA_SECURE_SASL_PLAINTEXT_PORT:-19394}"
KAFKA_SECURE_CONTROLLER_PORT="${KAFKA_SECURE_CONTROLLER_PORT:-19395}"
# How long a silent follower stays in the ISR, and a silent node keeps its
# leaderships: short, so that a fault test's stalls and kills play out in
# seconds (Kafka's defaults are 30 s and 9 s).
CLUSTER_REPLICA_LAG_MS="${KAFKA_CLUSTER_REPLICA_LAG_MS:-4000}"
CLUSTER_SESSION_MS="${KAFKA_CLUSTER_SESSION_MS:-4000}"
# Kafka 4.x logs through slf4j 1.7 and, like its release tarball, needs a
# log4j2 binding for it (log4j-slf4j-impl, not the slf4j2 one); its poms leave
# the binding to the application.
LOG4J_VERSION="${LOG4J_VERSION:-2.24.3}"

# Outside the checkout so that fresh clones (CI) reuse the download.
CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/driftguard/kafka-${KAFKA_VERSION}"
LIBS="$CACHE_DIR/libs"
READY_TIMEOUT="${KAFKA_READY_TIMEOUT:-90}"


fetch() {
  # The marker is written last, so an interrupted fetch is redone from scratch.
  [[ -f "$LIBS/.complete" ]] && return 0
  log "fetching kafka_2.13 $KAFKA_VERSION and its runtime dependencies (first run only)"
  local work
  work="$(mktemp -d "${TMPDIR:-/tmp}/driftguard-kafka-fetch.XXXXXX")"
  # kafka-tools is not needed by the broker, but puts TopicCommand,
  # ConsoleProducer etc. on the same classpath; connect-runtime (jetty, jersey)
  # is only used by its Connect plugin tool.
  cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>driftguard</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version>
      <exclusions><exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion></exclusions>
    </dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
  # Plugin version pinned so the result does not depend on whatever is newest.
  # Maven's output is only worth showing when it failed.
  if ! mvn -q -B -f "$work/pom.xml" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$work/libs" >"$work/mvn.log" 2>&1; then
    cat "$work/mvn.log" >&2
    rm -rf "$work"
    log "maven could not fetch kafka_2.13 $KAFKA_VERSION"
    return 1
  fi
  # Swap the finished folder in whole so a concurrent reader never sees half
  # of it; a fetch running in parallel may have finished first.
  if [[ -f "$LIBS/.complete" ]]; then rm -rf "$work"; return 0; fi
  mkdir -p "$CACHE_DIR"
  rm -rf "$LIBS"
  mv "$work/libs" "$LIBS"
  rm -rf "$work"
  touch "$LIBS/.complete"
  log "cached $(find "$LIBS" -name '*.jar' | wc -l) jars in $LIBS"
}

# node_java_opts DIR: the JVM options of the node whose folder is DIR: its
# own log, a heap that leaves room for three nodes beside everything else.
node_java_opts() {
  local heap=(-Xms256m -Xmx512m)
  [[ "$NAME" != kafka ]] && heap=(-Xms128m -Xmx256m)
  JAVA_OPTS=("${heap[@]}" -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$1/log4j2.xml" -cp "$LIBS/*")
}

# write_node DIR NODE_ID PORT CONTROLLER_PORT VOTERS: the node's
# server.properties and log4j2.xml in DIR; VOTERS empty for one node that is
# its own (dynamic) quorum. Settings that differ by mode are appended after.
write_node() {
  local dir="$1" id="$2" port="$3" cport="$4" voters="$5"
  mkdir -p "$dir"
  {
    echo "process.roles=broker,controller"
    echo "node.id=$id"
    if [[ -n "$voters" ]]; then
      echo "controller.quorum.voters=$voters"
    else
      echo "controller.quorum.bootstrap.servers=127.0.0.1:$cport"
    fi
    cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
# Consumer groups should not wait for more members before the first
# assignment.
group.initial.rebalance.delay.ms=0
# The log cleaner takes its dedupe buffer (128 MiB by default) in one
# allocation at startup: half of a cluster node's 256 MiB heap, which a
# fragmented heap can refuse (OutOfMemoryError, the node exits). The
# tests' compacted topics are small; 16 MiB holds half a million keys.
log.cleaner.dedupe.buffer.size=16777216
EOF
  } >"$dir/server.properties"
  # Written per run so that the broker log lands in its own temp dir.
  cat >"$dir/log4j2.xml" <<EOF
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="$dir/server.log">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka" level="INFO"/>
    <Logger name="org.apache.kafka" level="INFO"/>
    <Root level="WARN"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
EOF
}

# format_node DIR CLUSTER_ID [ARGS...]: formats the node's storage.
format_node() {
  local dir="$1" cluster_id="$2"
  shift 2
  node_java_opts "$dir"
  java "${JAVA_OPTS[@]}" kafka.tools.StorageTool format -t "$cluster_id" \
    -c "$dir/server.properties" "$@" >>"$dir/stdout.log" 2>&1
}

# launch_node DIR PID_FILE: starts the node in the background, records its
# pid. setsid: the broker must outlive this script and not get the caller's
# ^C before `stop` runs. Output goes to files so that $(kafka.sh start)
# returns. The last run's log is kept aside, so readiness is read from this
# run's.
launch_node() {
  local dir="$1" pid_file="$2"
  node_java_opts "$dir"
  [[ -f "$dir/server.log" ]] && mv "$dir/server.log" "$dir/server.log.$(date +%s%N)"
  setsid java "${JAVA_OPTS[@]}" kafka.Kafka "$dir/server.properties" \
    </dev/null >>"$dir/stdout.log" 2>&1 &
  echo "$!" >"$pid_file"
}

# wait_node DIR PID PORT: waits until the node serves clients; false if it
# exited or took longer than READY_TIMEOUT, after showing its last log lines.
# Until the background job has exec'd java, its command line is still this
# script's, without kafka.Kafka: under load (every server starting at once)
# the first look can come that early, so a node counts as exited only once
# it was seen as java, or is gone.
wait_node() {
  local dir="$1" pid="$2" port="$3" seen=0 exited
  local deadline=$((SECONDS + READY_TIMEOUT))
  until port_open "$port" && grep -q "Kafka Server started" "$dir/server.log" 2>/dev/null; do
    exited=0
    if pid_is "$pid" kafka.Kafka; then
      seen=1
    elif ((seen)) || ! kill -0 "$pid" 2>/dev/null; then
      exited=1
    fi
    if ((exited)) || ((SECONDS >= deadline)); then
      log "broker $dir exited or was not ready within ${READY_TIMEOUT}s; last log lines:"
      tail -n 40 "$dir/server.log" "$dir/stdout.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.5
  done
}

# random_cluster_id: a cluster id as StorageTool's random-uuid makes one
# (16 random bytes, base64url), without starting a JVM for it.
# StorageTool reads an id that starts with '-' (1 in 64) as an option, so
# such an id is drawn again, as Kafka's own Uuid.randomUuid does.
random_cluster_id() {
  local id
  until [[ -n "${id:-}" && "$id" != -* ]]; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
  done
  echo "$id"
}

stop() {
  if [[ "$NAME" == kafka-cluster ]]; then cluster_stop; else stop_recorded kafka.Kafka; fi
}

# run_single DIR PORT [FORMAT_ARGS...]: formats the storage of the one
# node in DIR, starts it and waits until it serves on PORT; on failure
# stops it and exits.
run_single() {
  local dir="$1" port="$2"
  shift 2
  local cluster_id
  # --standalone makes this node the whole (dynamic) controller quorum.
  if ! cluster_id="$(random_cluster_id "$dir")" || ! format_node "$dir" "$cluster_id" --standalone "$@"; then
    log "formatting the storage failed:"
    tail -n 30 "$dir/stdout.log" >&2
    stop
    exit 1
  fi
  launch_node "$dir" "$PID_FILE"
  if ! wait_node "$dir" "$(cat "$PID_FILE")" "$port"; then
    stop
    exit 1
  fi
}

# single_node_settings: what a one-node cluster needs, since its internal
# topics cannot be replicated.
single_node_settings() {
  cat <<EOF
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
EOF
}

start() {
  fetch
  local dir
  dir="$(new_run_dir "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT")"
  write_node "$dir" 1 "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" ""
  single_node_settings >>"$dir/server.properties"
  run_single "$dir" "$KAFKA_PORT"
  local pid
  pid="$(cat "$PID_FILE")"
  log "kafka $KAFKA_VERSION ready (pid $pid, data $dir)"
  echo "DRIFTGUARD_TEST_KAFKA=127.0.0.1:$KAFKA_PORT"
  # Fault tests pause and resume the broker by this id.
  echo "DRIFTGUARD_TEST_KAFKA_PID=$pid"
}

# The cluster: node N (1-based) lives in $dir/node-N, its pid in
# $STATE_DIR/kafka-cluster-N.pid.
node_pid_file() { echo "$STATE_DIR/$NAME-$1.pid"; }

cluster_pids() {
  local n pids=()
  for n in $(seq 1 "${#CLUSTER_PORTS[@]}"); do pids+=("$(cat "$(node_pid_file "$n")" 2>/dev/null || true)"); done
  (IFS=,; echo "${pids[*]}")
}

cluster_stop() {
  # Every node at once: one by one, the last ones would wait for a
  # controller quorum that is gone before they give up.
  local n
  for n in $(seq 1 "${#CLUSTER_PORTS[@]}"); do stop_pid_file "$(node_pid_file "$n")" kafka.Kafka & done
  wait
  stop_recorded kafka.Kafka
}

cluster_start() {
  fetch
  if ((${#CLUSTER_PORTS[@]} != ${#CLUSTER_CONTROLLER_PORTS[@]})); then
    log "KAFKA_CLUSTER_PORTS and KAFKA_CLUSTER_CONTROLLER_PORTS need one port per node each"
    exit 2
  fi
  local dir
  dir="$(new_run_dir "${CLUSTER_PORTS[@]}" "${CLUSTER_CONTROLLER_PORTS[@]}")"
  local nodes="${#CLUSTER_PORTS[@]}" n voters=()
  for n in $(seq 1 "$nodes"); do voters+=("$n@127.0.0.1:${CLUSTER_CONTROLLER_PORTS[n - 1]}"); done
  local rf=$((nodes < 3 ? nodes : 3))
  local min_isr=$((rf > 1 ? 2 : 1))
  for n in $(seq 1 "$nodes"); do
    write_node "$dir/node-$n" "$n" "${CLUSTER_PORTS[n - 1]}" "${CLUSTER_CONTROLLER_PORTS[n - 1]}" "$(IFS=,; echo "${voters[*]}")"
    # Internal topics replicated as production's must be: the processors'
    # transactions and their committed input offsets live there, and
    # __consumer_offsets takes the broker's min.insync.replicas. Few
    # partitions, so that a node starts and catches up in seconds.
    cat >>"$dir/node-$n/server.properties" <<EOF
min.insync.replicas=$min_isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$min_isr
transaction.state.log.num.partitions=6
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$min_isr
replica.lag.time.max.ms=$CLUSTER_REPLICA_LAG_MS
replica.fetch.wait.max.ms=200
broker.session.timeout.ms=$CLUSTER_SESSION_MS
broker.heartbeat.interval.ms=500
EOF
  done
  local cluster_id
  if ! cluster_id="$(random_cluster_id "$dir/node-1")"; then
    log "could not make a cluster id:"
    tail -n 30 "$dir/node-1/stdout.log" >&2
    cluster_stop
    exit 1
  fi
  for n in $(seq 1 "$nodes"); do
    if ! format_node "$dir/node-$n" "$cluster_id"; then
      log "formatting node $n failed:"
      tail -n 30 "$dir/node-$n/stdout.log" >&2
      cluster_stop
      exit 1
    fi
  done
  # Started together: each waits for a quorum of the others.
  for n in $(seq 1 "$nodes"); do launch_node "$dir/node-$n" "$(node_pid_file "$n")"; done
  for n in $(seq 1 "$nodes"); do
    if ! wait_node "$dir/node-$n" "$(cat "$(node_pid_file "$n")")" "${CLUSTER_PORTS[n - 1]}"; then
      cluster_stop
      exit 1
    fi
  done
  log "kafka $KAFKA_VERSION cluster of $nodes ready (pids $(cluster_pids), data $dir)"
  local addrs=()
  for n in $(seq 1 "$nodes"); do addrs+=("127.0.0.1:${CLUSTER_PORTS[n - 1]}"); done
  echo "DRIFTGUARD_TEST_CLUSTER=$(IFS=,; echo "${addrs[*]}")"
  # Fault tests kill, pause and resume node N by the N-th pid, and start it
  # again with `$DRIFTGUARD_TEST_CLUSTER_CONTROL cluster restart N`.
  echo "DRIFTGUARD_TEST_CLUSTER_PIDS=$(cluster_pids)"
  echo "DRIFTGUARD_TEST_CLUSTER_CONTROL=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
}

cluster_restart() {
  local n="${1:-}" dir
  if ! [[ "$n" =~ ^[0-9]+$ ]] || ((n < 1 || n > ${#CLUSTER_PORTS[@]})); then
    log "cluster restart needs a node number from 1 to ${#CLUSTER_PORTS[@]}"
    exit 2
  fi
  dir="$(cat "$DIR_FILE" 2>/dev/null || true)"
  if [[ -z "$dir" || ! -d "$dir/node-$n" ]]; then
    log "no cluster is running: start one with \`$0 cluster start\`"
    exit 1
  fi
  local pid_file
  pid_file="$(node_pid_file "$n")"
  if pid_is "$(cat "$pid_file" 2>/dev/null || true)" kafka.Kafka; then
    log "node $n is running (pid $(cat "$pid_file")); kill it first"
    exit 1
  fi
  launch_node "$dir/node-$n" "$pid_file"
  if ! wait_node "$dir/node-$n" "$(cat "$pid_file")" "${CLUSTER_PORTS[n - 1]}"; then
    exit 1
  fi
  log "node $n ready again (pid $(cat "$pid_file"))"
  echo "DRIFTGUARD_TEST_CLUSTER_PIDS=$(cluster_pids)"
}

# The secure broker: one node whose clients must authenticate and are
# authorized by the standard (KRaft) authorizer. A CA, the broker's
# certificate (for 127.0.0.1 and localhost) and a client certificate are
# made with openssl into the run folder, as PEM, which Kafka reads as is
# (ssl.keystore.type=PEM). The super user `admin` (SCRAM-SHA-512,
# SCRAM-SHA-256 and PLAIN; its client certificate's CN maps to it too) has a
# random password made at start; its SCRAM credentials are written into
# the storage when it is formatted, so no client has to add them after the
# start. Tests make their own users and ACLs through it.
secure_start() {
  fetch
  command -v openssl >/dev/null || apt_install openssl
  local dir
  dir="$(new_run_dir "$KAFKA_SECURE_SASL_SSL_PORT" "$KAFKA_SECURE_MTLS_PORT" \
    "$KAFKA_SECURE_SASL_PLAINTEXT_PORT" "$KAFKA_SECURE_CONTROLLER_PORT")"
  local tls="$dir/tls" password
  password="$(openssl rand -hex 16)"
  if ! { make_test_certificates "$tls" && kafka_key_store "$tls"; } >>"$dir/openssl.log" 2>&1; then
    log "making the test certificates failed:"
    tail -n 30 "$dir/openssl.log" >&2
    stop
    exit 1
  fi
  write_node "$dir" 1 "$KAFKA_SECURE_SASL_SSL_PORT" "$KAFKA_SECURE_CONTROLLER_PORT" ""
  single_node_settings >>"$dir/server.properties"
  local plain="org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"$password\" user_admin=\"$password\";"
  local scram="org.apache.kafka.common.security.scram.ScramLoginModule required;"
  # Later keys win in a properties file: these replace write_node's
  # plaintext listeners. The controller listener stays plaintext, on
  # loopback, and is the only one where a principal is ANONYMOUS (the
  # node's broker half registering with its controller half), hence the
  # super user.
  cat >>"$dir/server.properties" <<EOF
listeners=SASL_SSL://127.0.0.1:$KAFKA_SECURE_SASL_SSL_PORT,SSL://127.0.0.1:$KAFKA_SECURE_MTLS_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SECURE_SASL_PLAINTEXT_PORT,CONTROLLER://127.0.0.1:$KAFKA_SECURE_CONTROLLER_PORT
advertised.listeners=SASL_SSL://127.0.0.1:$KAFKA_SECURE_SASL_SSL_PORT,SSL://127.0.0.1:$KAFKA_SECURE_MTLS_PORT,SASL_PLAINTEXT://127.0.0.1:$KAFKA_SECURE_SASL_PLAINTEXT_PORT
listener.security.protocol.map=SASL_SSL:SASL_SSL,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=SASL_PLAINTEXT
sasl.mechanism.inter.broker.protocol=PLAIN
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=$plain
listener.name.sasl_plaintext.plain.sasl.jaas.config=$plain
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$scram
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$scram
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=$scram
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=$scram
ssl.keystore.type=PEM
ssl.keystore.location=$tls/server-store.pem
ssl.truststore.type=PEM
ssl.truststore.location=$tls/ca.pem
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+).*\$/\$1/,DEFAULT
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
EOF
  run_single "$dir" "$KAFKA_SECURE_SASL_SSL_PORT" \
    --add-scram "SCRAM-SHA-512=[name=admin,password=$password]" \
    --add-scram "SCRAM-SHA-256=[name=admin,password=$password]"
  local pid
  pid="$(cat "$PID_FILE")"
  log "secure kafka $KAFKA_VERSION ready (pid $pid, data $dir)"
  echo "DRIFTGUARD_TEST_KAFKA_SECURE_SASL_SSL=127.0.0.1:$KAFKA_SECURE_SASL_SSL_PORT"
  echo "DRIFTGUARD_TEST_KAFKA_SECURE_MTLS=127.0.0.1:$KAFKA_SECURE_MTLS_PORT"
  echo "DRIFTGUARD_TEST_KAFKA_SECURE_SASL_PLAINTEXT=127.0.0.1:$KAFKA_SECURE_SASL_PLAINTEXT_PORT"
  echo "DRIFTGUARD_TEST_KAFKA_SECURE_CA_FILE=$tls/ca.pem"
  echo "DRIFTGUARD_TEST_KAFKA_SECURE_CERT_FILE=$tls/client.pem"
  echo "DRIFTGUARD_TEST_KAFKA_SECURE_KEY_FILE=$tls/client.key"
  echo "DRIFTGUARD_TEST_KAFKA_SECURE_USER=admin"
  echo "DRIFTGUARD_TEST_KAFKA_SECURE_PASSWORD=$password"
}

# kafka_key_store DIR: Kafka's PEM key store from make_test_certificates'
# server key and certificate: the private key, then the certificate chain,
# in server-store.pem.
kafka_key_store() {
  cat "$1/server.key" "$1/server.pem" "$1/ca.pem" >"$1/server-store.pem" && chmod 600 "$1/server-store.pem"
}

secure() {
  case "${1:-}" in
    start) secure_start ;;
    stop) stop ;;
    *)
      echo "usage: $0 secure start|stop" >&2
      exit 2
      ;;
  esac
}

cluster() {
  case "${1:-}" in
    start) cluster_start ;;
    restart) cluster_restart "${2:-}" ;;
    stop) cluster_stop ;;
    *)
      echo "usage: $0 cluster start|restart N|stop" >&2
      exit 2
      ;;
  esac
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  libs) echo "$LIBS" ;;
  cluster) cluster "${@:2}" ;;
  secure) secure "${@:2}" ;;
  *)
    echo "usage: $0 fetch|start|stop|libs|cluster start|restart N|stop|secure start|stop" >&2
    exit 2
    ;;
esac
