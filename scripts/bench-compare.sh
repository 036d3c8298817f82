#!/usr/bin/env bash
# A Go benchmark on two revisions in one run: the package's test binary is
# built from BASE (its tree from `git archive`, no checkout) and from the
# work tree, and the two run in turn ROUNDS times, so a slow minute of a
# shared machine falls on both. Each result line is labelled base or head;
# the last lines are the medians of each metric and head/base.
#
#   scripts/bench-compare.sh BASE PACKAGE BENCH [ROUNDS] [-- flags after the package]
#   scripts/bench-compare.sh HEAD~1 ./sinks/realtime FanOutPerConversation 3 -- -conv.count=100
#
# BASE must hold the benchmark too (commit a benchmark before the change it
# measures).
set -euo pipefail
base=$1 pkg=$2 bench=$3 rounds=${4:-3}
shift $(( $# < 4 ? $# : 4 ))
[ "${1:-}" = "--" ] && shift
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/base"
git -C "$root" archive "$base" | tar -x -C "$tmp/base"
(cd "$tmp/base" && go test -c -o "$tmp/base.test" "$pkg")
(cd "$root" && go test -c -o "$tmp/head.test" "$pkg")
for i in $(seq "$rounds"); do
  for side in base head; do
    dir=$tmp/$side; [ "$side" = head ] && dir=$root
    (cd "$dir/${pkg#./}" && "$tmp/$side.test" -test.run '^$' -test.bench "$bench" -test.benchtime 1x "$@") |
      grep '^Benchmark' | sed "s/^/$side /" | tee -a "$tmp/results"
  done
done
# Medians per side and metric; then head/base.
printf "%-36s %14s %14s %10s\n" metric base head head/base
awk '{ for (i = 4; i < NF; i += 2) { v[$1 SUBSEP $(i+1)] = v[$1 SUBSEP $(i+1)] " " $i; units[$(i+1)] = 1 } }
  function median(s,   a, n, i, j, t) { n = split(s, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
  END { for (u in units) { b = median(v["base" SUBSEP u]); h = median(v["head" SUBSEP u])
          printf "%-36s %14.4g %14.4g %10.3f\n", u, b, h, (b != 0 ? h / b : 0) } }' "$tmp/results" | sort
