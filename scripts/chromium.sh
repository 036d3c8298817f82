#!/usr/bin/env bash
# Chromium for the browser tests (cmd/driftguard's TestPageInARealBrowser),
# driven headless through the DevTools protocol.
#
#   scripts/chromium.sh install   apt-get install chromium if missing
#
# Debian's own package, like ClickHouse's, because the distribution's archive
# is what CI and dev machines reach.
set -euo pipefail

NAME=chromium
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

install() {
  command -v chromium >/dev/null && return 0
  apt_install chromium
}

case "${1:-}" in
  install) install ;;
  *)
    echo "usage: $0 install" >&2
    exit 2
    ;;
esac
