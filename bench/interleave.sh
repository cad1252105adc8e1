#!/usr/bin/env bash
# Runs one benchmark command alternately on a snapshot of commit REF and on this checkout, for
# ROUNDS rounds, and appends each run's JSON lines to OUT: the way bench/RESULTS.md compares a
# change with the commit before it on a machine whose speed drifts from hour to hour.
#
#   bench/interleave.sh REF ROUNDS OUT -- -m bench.fanout --backend postgres --children 10000
#
# The snapshot is `git archive REF` in a temporary directory with this checkout's bench/ copied
# in (the same benchmark code measures both engines); each run gets PYTHONPATH of its tree, so
# the api and worker processes the benchmark starts run that tree's code too.
set -euo pipefail
if [ $# -lt 5 ] || [ "$4" != "--" ]; then
  echo "usage: bench/interleave.sh REF ROUNDS OUT -- <python arguments>" >&2
  exit 2
fi
REF=$1 ROUNDS=$2 OUT=$3
shift 4
HERE=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$HERE/.venv/bin/python}
SNAPSHOT=$(mktemp -d)
trap 'rm -rf "$SNAPSHOT"' EXIT
git -C "$HERE" archive "$REF" | tar -x -C "$SNAPSHOT"
cp "$HERE"/bench/*.py "$SNAPSHOT/bench/"
for round in $(seq 1 "$ROUNDS"); do
  for tree in "$SNAPSHOT" "$HERE"; do
    label=$([ "$tree" = "$HERE" ] && echo "this checkout" || echo "$REF")
    echo "### round $round, $label, $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg)" >>"$OUT"
    (cd "$tree" && PYTHONPATH=$tree timeout 1800 "$PYTHON" "$@" 2>/dev/null | grep -E '^\{' >>"$OUT") || true
  done
done
