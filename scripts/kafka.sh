#!/usr/bin/env bash
# Throwaway single-node Apache Kafka (KRaft, broker+controller) on loopback
# for the integration tests.
#
#   scripts/kafka.sh fetch   download Kafka + runtime deps from Maven Central (cached)
#   scripts/kafka.sh start   fresh broker in a temp dir; prints DRIFTGUARD_TEST_KAFKA=host:port
#   scripts/kafka.sh stop    stop the broker started by `start`, delete its data
#   scripts/kafka.sh libs    print the classpath folder (TopicCommand etc. live there too)
#
# Kafka is fetched as Maven artifacts rather than the release tarball because
# Maven Central is the only Kafka source reachable from CI and dev machines.
set -euo pipefail

NAME=kafka
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
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

stop() { stop_recorded "kafka.Kafka"; }

start() {
  fetch
  local dir
  dir="$(new_run_dir "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT")"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
# Single node: internal topics cannot be replicated, and consumer groups
# should not wait for more members before the first assignment.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
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

  local java_opts=(-Xms256m -Xmx512m -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$dir/log4j2.xml" -cp "$LIBS/*")
  local cluster_id
  # --standalone makes this node the whole (dynamic) controller quorum.
  if ! cluster_id="$(java "${java_opts[@]}" kafka.tools.StorageTool random-uuid 2>>"$dir/stdout.log")" ||
    ! java "${java_opts[@]}" kafka.tools.StorageTool format -t "$cluster_id" \
      -c "$dir/server.properties" --standalone >>"$dir/stdout.log" 2>&1; then
    log "formatting the storage failed:"
    tail -n 30 "$dir/stdout.log" >&2
    stop
    exit 1
  fi

  # setsid: the broker must outlive this script and not get the caller's ^C
  # before `stop` runs. Output goes to files so that $(kafka.sh start) returns.
  setsid java "${java_opts[@]}" kafka.Kafka "$dir/server.properties" \
    </dev/null >>"$dir/stdout.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$PID_FILE"

  local deadline=$((SECONDS + READY_TIMEOUT))
  until port_open "$KAFKA_PORT" && grep -q "Kafka Server started" "$dir/server.log" 2>/dev/null; do
    if ! pid_is "$pid" kafka.Kafka || ((SECONDS >= deadline)); then
      log "broker exited or was not ready within ${READY_TIMEOUT}s; last log lines:"
      tail -n 40 "$dir/server.log" "$dir/stdout.log" >&2 2>/dev/null || true
      stop
      exit 1
    fi
    sleep 0.5
  done
  log "kafka $KAFKA_VERSION ready (pid $pid, data $dir)"
  echo "DRIFTGUARD_TEST_KAFKA=127.0.0.1:$KAFKA_PORT"
  # Fault tests pause and resume the broker by this id.
  echo "DRIFTGUARD_TEST_KAFKA_PID=$pid"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  libs) echo "$LIBS" ;;
  *)
    echo "usage: $0 fetch|start|stop|libs" >&2
    exit 2
    ;;
esac
