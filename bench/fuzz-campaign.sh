#!/usr/bin/env bash
# bench/fuzz-campaign.sh - one long libFuzzer campaign of a fuzz target (tests/fuzz/),
# niced, starting from its seed corpus, and the figures docs/benchmarks.md records:
# executions, wall time, exec/s, final coverage (cov/ft), corpus size, crashes.
#
# Usage: bench/fuzz-campaign.sh TARGET [RUNS]      e.g. fuzz_msg 10000000
# Environment:
#   MAX_SECONDS  also stop after this many seconds (default: no limit); the figures
#                then say how many runs were really executed
#   BUILD        the fuzz build directory (default build-fuzz; configured and the
#                target built here, with tests/fuzz/jansson.sh's jansson when it can)
#   KEEP         a directory to keep the corpus, artifacts and log in (default: a
#                temporary one, removed unless something was found)
# Exit status: 0 when the campaign ended without a finding, 1 otherwise.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    sed -n '5,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
TARGET=$1
RUNS=${2:-10000000}
BUILD=${BUILD:-build-fuzz}
MAX_SECONDS=${MAX_SECONDS:-}
SEEDS="tests/fuzz/seeds/${TARGET#fuzz_}"
[ -f "tests/fuzz/$TARGET.c" ] || { echo "fuzz-campaign: no tests/fuzz/$TARGET.c" >&2; exit 2; }

tests/fuzz/jansson.sh "$BUILD"
CC=clang cmake -S . -B "$BUILD" -DBRAMBLE_FUZZ=ON -DBRAMBLE_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Debug >"$BUILD/configure.log" 2>&1 ||
    { cat "$BUILD/configure.log"; exit 1; }
nice -n 19 cmake --build "$BUILD" --target "$TARGET" -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
JANSSON="system libjansson (JSON paths not instrumented)"
if grep -q 'fuzz: JSON paths instrumented' "$BUILD/configure.log"; then
    JANSSON=$(head -1 "$BUILD/jansson/BUILD-INFO")
fi

if [ -n "${KEEP:-}" ]; then
    WORK=$KEEP
    mkdir -p "$WORK"
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/bramble-campaign-$TARGET.XXXXXX")
fi
rm -rf "$WORK/corpus" "$WORK/artifacts"
mkdir -p "$WORK/corpus" "$WORK/artifacts"
[ -d "$SEEDS" ] && cp -R "$SEEDS/." "$WORK/corpus/"
seeds=$(find "$WORK/corpus" -type f | wc -l)

limit=()
[ -n "$MAX_SECONDS" ] && limit=(-max_total_time="$MAX_SECONDS")
echo "fuzz-campaign: $TARGET, $RUNS runs${MAX_SECONDS:+ or ${MAX_SECONDS}s}, $seeds seeds," \
     "nice 19; work dir $WORK"
start=$(date +%s.%N)
set +e
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    nice -n 19 "$BUILD/fuzz/$TARGET" -runs="$RUNS" "${limit[@]}" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$WORK/artifacts/" \
    "$WORK/corpus" >"$WORK/fuzz.log" 2>&1
rc=$?
set -e
end=$(date +%s.%N)

wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }')
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/fuzz.log" | tail -1)
if [ -z "$execs" ]; then # stopped by a finding: the last status line's count
    execs=$(grep -oE '^#[0-9]+' "$WORK/fuzz.log" | tail -1 | tr -d '#')
fi
execs=${execs:-0}
last=$(grep -E '^#[0-9]+.*cov: ' "$WORK/fuzz.log" | tail -1 || true)
cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]*).*/\1/p' <<<"$last")
files=$(find "$WORK/corpus" -type f | wc -l)
found=$(find "$WORK/artifacts" -type f | wc -l)
rate=$(awk -v e="$execs" -v w="$wall" 'BEGIN { printf "%.0f", (w > 0 ? e / w : 0) }')
counters=$(sed -nE 's/.*Loaded 1 modules +\(([0-9]+) inline 8-bit counters.*/\1/p' \
           "$WORK/fuzz.log" | head -1)

echo "target:       $TARGET (${counters:-?} coverage counters)"
echo "jansson:      $JANSSON"
echo "executions:   $execs (asked: $RUNS${MAX_SECONDS:+, or ${MAX_SECONDS}s})"
echo "wall time:    ${wall}s"
echo "exec/s:       $rate"
echo "coverage:     cov $cov, ft $ft"
echo "corpus:       $corp (units/bytes in memory; $files files on disk, $seeds seeds)"
echo "findings:     $found (fuzzer exit $rc)"
echo "| $TARGET | $execs | ${wall} s | $rate | $cov / $ft | $corp | $found |"
if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    echo "---- last lines of $WORK/fuzz.log ----"
    tail -n 40 "$WORK/fuzz.log"
    ls -1 "$WORK/artifacts"
    exit 1
fi
[ -n "${KEEP:-}" ] || rm -rf "$WORK"
exit 0
