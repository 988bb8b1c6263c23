#!/usr/bin/env bash
# ended_jobs.sh - a coordinator with a long past: N ended jobs in its store
# (bench/fill_store.c), a few current ones, and the figures of that: the
# coordinator's resident memory, and how long `bramble jobs` (current and lately
# ended jobs) takes, median and slowest of 10 runs. Build first (Release):
#   cmake -B build-rel -DCMAKE_BUILD_TYPE=Release -DBRAMBLE_TESTS=OFF
#   cmake --build build-rel --target brambled bramble bramble-bench-fill
# Usage: bench/ended_jobs.sh [N]   (default 100000)
# Environment: BIN (default build-rel/bin), PORT (default 27730).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$ROOT/build-rel/bin}
PORT=${PORT:-27730}
N=${1:-100000}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/bramble-ended.XXXXXX")
COORD=
cleanup() {
    [ -n "$COORD" ] && kill "$COORD" 2>/dev/null && wait "$COORD" 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT
"$BIN/brambled" init --data-dir "$DIR/c" --listen "tcp://127.0.0.1:$PORT" >/dev/null
"$BIN/bramble-bench-fill" "$DIR/c" "$N"
"$BIN/brambled" --data-dir "$DIR/c" >"$DIR/brambled.log" 2>&1 &
COORD=$!
B=("$BIN/bramble" --credential "$DIR/c/admin.credential")
for _ in $(seq 100); do "${B[@]}" nodes --json >/dev/null 2>&1 && break; sleep 0.1; done
for i in 1 2 3; do # current: they wait, as no node has joined
    printf 'name: wait-%s\ncommand: sleep 1\n' "$i" >"$DIR/w.yaml"
    "${B[@]}" submit "$DIR/w.yaml" >/dev/null
done
times=()
for _ in $(seq 10); do
    t0=$(date +%s%N)
    rows=$("${B[@]}" jobs | wc -l)
    times+=($((($(date +%s%N) - t0) / 1000000)))
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
echo "ended jobs in the store: $N; bramble jobs lists $((rows - 1)) (current and lately ended)"
echo "bramble jobs: median $(echo "$sorted" | sed -n 5p) ms, slowest $(echo "$sorted" | tail -1) ms"
echo "coordinator RSS: $(awk '/VmRSS/ {printf "%.1f MiB", $2 / 1024}' "/proc/$COORD/status")"
echo "store: $(du -m "$DIR/c/bramble.db" | cut -f1) MiB"
