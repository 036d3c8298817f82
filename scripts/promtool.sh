#!/usr/bin/env bash
# promtool, Prometheus's own rule checker, for the chart's alert tests
# (charts/promtool_test.go: `promtool check rules` on the rendered rules and
# `promtool test rules` on charts/testdata/alerts).
#
#   scripts/promtool.sh install   apt-get install prometheus if promtool is missing
#
# Debian's prometheus package ships promtool beside the server. On a host
# run by systemd the package starts its server (on every address, port
# 9090); this script installed it only for promtool, so it stops and
# disables that server again.
set -euo pipefail

NAME=promtool
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

install() {
  command -v promtool >/dev/null && return 0
  apt_install prometheus
  if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
}

case "${1:-}" in
  install) install ;;
  *)
    echo "usage: $0 install" >&2
    exit 2
    ;;
esac
