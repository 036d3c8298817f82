#!/usr/bin/env bash
# Run a command against throwaway Kafka brokers and a ClickHouse server:
#
#   scripts/with-services.sh go test ./...
#   scripts/with-services.sh --cluster go test ./...
#
# Starts the plain broker, the secure one (TLS, SASL, ACLs: `kafka.sh secure
# start`) and ClickHouse in parallel, exports DRIFTGUARD_TEST_KAFKA (and the
# broker's DRIFTGUARD_TEST_KAFKA_PID, for fault tests), the secure broker's
# DRIFTGUARD_TEST_KAFKA_SECURE_* variables, DRIFTGUARD_TEST_CLICKHOUSE (and
# its secure port's DRIFTGUARD_TEST_CLICKHOUSE_SECURE, _CA, _USER and
# _PASSWORD) and DRIFTGUARD_TEST_REQUIRE=1 (integration tests must then fail
# rather than skip), runs the command, always stops them, and exits with the command's
# exit code. With --cluster it also starts the three-broker cluster of the
# fault tests (`kafka.sh cluster start`) and exports DRIFTGUARD_TEST_CLUSTER,
# DRIFTGUARD_TEST_CLUSTER_PIDS and DRIFTGUARD_TEST_CLUSTER_CONTROL.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
with_cluster=0
if [[ "${1:-}" == --cluster ]]; then
  with_cluster=1
  shift
fi
if (($# == 0)); then
  echo "usage: $0 [--cluster] CMD [ARGS...]" >&2
  exit 2
fi

out="$(mktemp -d "${TMPDIR:-/tmp}/driftguard-with-services.XXXXXX")"
starters=()

# shellcheck disable=SC2317 # only reached through the trap
cleanup() {
  # A start still in flight has written its pid file right after launching
  # the server, so ending the starter first and then `stop` leaves nothing.
  local p
  for p in "${starters[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${starters[@]}"; do wait "$p" 2>/dev/null || true; done
  "$here/kafka.sh" stop &
  "$here/kafka.sh" secure stop &
  "$here/clickhouse.sh" stop &
  if ((with_cluster)); then "$here/kafka.sh" cluster stop & fi
  wait || true
  rm -rf "$out"
}
trap cleanup EXIT
# exit runs the EXIT trap; the codes are the usual 128+signal.
trap 'exit 130' INT
trap 'exit 143' TERM

"$here/kafka.sh" start >"$out/kafka" &
starters+=("$!")
"$here/kafka.sh" secure start >"$out/secure" &
starters+=("$!")
"$here/clickhouse.sh" start >"$out/clickhouse" &
starters+=("$!")
if ((with_cluster)); then
  "$here/kafka.sh" cluster start >"$out/cluster" &
  starters+=("$!")
fi
ok=1
for p in "${starters[@]}"; do wait "$p" || ok=0; done
starters=()
if ((!ok)); then
  echo "with-services.sh: could not start the test services" >&2
  exit 1
fi

kafka="$(sed -n 's/^DRIFTGUARD_TEST_KAFKA=//p' "$out/kafka")"
kafka_pid="$(sed -n 's/^DRIFTGUARD_TEST_KAFKA_PID=//p' "$out/kafka")"
clickhouse="$(sed -n 's/^DRIFTGUARD_TEST_CLICKHOUSE=//p' "$out/clickhouse")"
export DRIFTGUARD_TEST_KAFKA="$kafka" DRIFTGUARD_TEST_KAFKA_PID="$kafka_pid" \
  DRIFTGUARD_TEST_CLICKHOUSE="$clickhouse" DRIFTGUARD_TEST_REQUIRE=1
# Every line the secure broker printed is a DRIFTGUARD_TEST_KAFKA_SECURE_*
# variable.
while IFS= read -r line; do
  [[ "$line" == DRIFTGUARD_TEST_KAFKA_SECURE_*=* ]] && export "${line?}"
done <"$out/secure"
for name in DRIFTGUARD_TEST_CLICKHOUSE_SECURE DRIFTGUARD_TEST_CLICKHOUSE_CA \
  DRIFTGUARD_TEST_CLICKHOUSE_USER DRIFTGUARD_TEST_CLICKHOUSE_PASSWORD; do
  export "$name=$(sed -n "s/^$name=//p" "$out/clickhouse")"
done
if ((with_cluster)); then
  for name in DRIFTGUARD_TEST_CLUSTER DRIFTGUARD_TEST_CLUSTER_PIDS DRIFTGUARD_TEST_CLUSTER_CONTROL; do
    export "$name=$(sed -n "s/^$name=//p" "$out/cluster")"
  done
fi

rc=0
"$@" || rc=$?
exit "$rc"
