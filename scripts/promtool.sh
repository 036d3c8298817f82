#!/usr/bin/env bash
# promtool, Prometheus's own rule checker, for the chart's alert tests
# (charts/promtool_test.go: `promtool check rules` on the rendered rules and
# `promtool test rules` on charts/testdata/alerts).
#
#   scripts/promtool.sh install   apt-get install prometheus if promtool is missing
#
# Debian's prometheus package ships promtool beside the server; the package's
# server is not started or used.
set -euo pipefail

NAME=promtool
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

install() {
  command -v promtool >/dev/null && return 0
  apt_install prometheus
}

case "${1:-}" in
  install) install ;;
  *)
    echo "usage: $0 install" >&2
    exit 2
    ;;
esac
