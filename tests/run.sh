#!/usr/bin/env bash
# tests/run.sh - build bramble with sanitizers and run every test stage:
#   1. install missing Debian packages (only when something is missing)
#   2. configure + build build-test/ (Debug, ASan+UBSan, -Werror)
#   3. unit tests (ctest)
#   4. libFuzzer targets in build-fuzz/ (clang), FUZZ_SECONDS each on their seeds (a
#      smoke run; the long campaigns are bench/fuzz-campaign.sh)
#   5. integration tests (pytest, real processes, against build-test/bin)
#   6. a final line "N passed, M failed"; exit status non-zero on any failure
#
# Usage: tests/run.sh [--quick]     (--quick skips fuzzing)
# Environment: FUZZ_SECONDS (default 6), JOBS (build parallelism, default nproc),
#   INTEGRATION_SHARDS (pytest processes run at once, default 2).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

QUICK=0
for arg in "$@"; do
    case "$arg" in
        --quick) QUICK=1 ;;
        -h|--help)
            sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
            exit 0 ;;
        *) echo "run.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

FUZZ_SECONDS=${FUZZ_SECONDS:-6}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
PASSED=0
FAILED=0
FAILURES=()
START=$(date +%s)

stage() { printf '\n==== %s (at %ds) ====\n' "$*" "$(($(date +%s) - START))"; }
pass() { PASSED=$((PASSED + ${2:-1})); }
fail() { FAILED=$((FAILED + ${2:-1})); FAILURES+=("$1"); }

finish() {
    local elapsed=$(( $(date +%s) - START ))
    echo
    if [ "${#FAILURES[@]}" -gt 0 ]; then
        echo "failures:"
        printf '  %s\n' "${FAILURES[@]}"
    fi
    echo "(took ${elapsed}s)"
    echo "${PASSED} passed, ${FAILED} failed"
    [ "$FAILED" -eq 0 ]
}

# ---- 1. packages
stage "dependencies"
# shellcheck source=deploy/install-deps.sh
. "$ROOT/deploy/install-deps.sh"
if ! br_install_deps "${BR_TEST_DEPS[@]}"; then
    echo "run.sh: could not install the packages needed" >&2
    fail "dependencies"
    finish
    exit 1
fi

# ---- 2. build
stage "build (build-test: Debug, ASan+UBSan, -Werror)"
BUILD_OK=1
mkdir -p build-test
if cmake -S . -B build-test -DBRAMBLE_SANITIZE=ON -DBRAMBLE_WERROR=ON \
        -DCMAKE_BUILD_TYPE=Debug >build-test/configure.log 2>&1 ||
        { cat build-test/configure.log; false; }; then
    if ! cmake --build build-test -j "$JOBS"; then
        BUILD_OK=0
    fi
else
    BUILD_OK=0
fi
if [ "$BUILD_OK" -eq 0 ]; then
    fail "build-test build"
fi

# ---- 3. unit tests
stage "unit tests (ctest)"
if [ "$BUILD_OK" -eq 1 ]; then
    CTEST_LOG=build-test/ctest.log
    set +e
    (cd build-test && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --output-on-failure -j2) 2>&1 | tee "$CTEST_LOG"
    CTEST_RC=${PIPESTATUS[0]}
    set -e
    # "100% tests passed, 0 tests failed out of 5"
    SUMMARY=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$CTEST_LOG" | tail -1 || true)
    if [ -n "$SUMMARY" ]; then
        total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$SUMMARY")
        nfail=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$SUMMARY")
        pass "unit" $((total - nfail))
        if [ "$nfail" -gt 0 ]; then
            while read -r name; do
                fail "unit: $name"
            done < <(sed -n '/The following tests FAILED/,$p' "$CTEST_LOG" |
                     grep -E '^[[:space:]]+[0-9]+ - ' | sed -E 's/^[[:space:]]+[0-9]+ - //; s/ \([^)]*\)$//')
            # if the names could not be read, still count every failure
            listed=$(sed -n '/The following tests FAILED/,$p' "$CTEST_LOG" |
                     grep -cE '^[[:space:]]+[0-9]+ - ' || true)
            if [ "$listed" -lt "$nfail" ]; then
                fail "unit: $((nfail - listed)) more" $((nfail - listed))
            fi
        fi
    elif grep -q 'No tests were found' "$CTEST_LOG"; then
        echo "run.sh: ctest found no unit tests"
    elif [ "$CTEST_RC" -ne 0 ]; then
        fail "ctest (exit $CTEST_RC)"
    fi
else
    echo "SKIP: unit tests (the build failed)"
fi

# ---- 4. fuzzing
stage "fuzzing (libFuzzer, ${FUZZ_SECONDS}s per target)"
FUZZ_TARGETS=(fuzz_msg fuzz_spec fuzz_jobsock fuzz_announce fuzz_jsontext fuzz_stream)
if [ "$QUICK" -eq 1 ]; then
    echo "SKIP: fuzzing (--quick)"
elif ! command -v clang >/dev/null 2>&1; then
    echo "SKIP: fuzzing: clang is not installed (libFuzzer needs clang)"
else
    FUZZ_BUILD_OK=1
    mkdir -p build-fuzz
    # jansson with the fuzzer's instrumentation, so the JSON paths count in coverage;
    # when it cannot be built it says so in one line and the system's is used
    "$ROOT/tests/fuzz/jansson.sh" build-fuzz ||
        echo "fuzz: JSON paths are NOT instrumented (tests/fuzz/jansson.sh failed)"
    if CC=clang cmake -S . -B build-fuzz -DBRAMBLE_FUZZ=ON -DBRAMBLE_SANITIZE=ON \
            -DCMAKE_BUILD_TYPE=Debug >build-fuzz/configure.log 2>&1 ||
            { cat build-fuzz/configure.log; false; }; then
        :
    else
        FUZZ_BUILD_OK=0
        fail "build-fuzz configure"
    fi
    for t in "${FUZZ_TARGETS[@]}"; do
        if [ "$FUZZ_BUILD_OK" -eq 0 ]; then
            fail "$t (not built)"
            continue
        fi
        if ! cmake --build build-fuzz -j "$JOBS" --target "$t"; then
            fail "$t (does not build; is tests/fuzz/$t.c there?)"
            continue
        fi
        bin="build-fuzz/fuzz/$t"
        seeds="tests/fuzz/seeds/${t#fuzz_}"
        scratch=$(mktemp -d "${TMPDIR:-/tmp}/bramble-$t.XXXXXX")
        mkdir -p "$scratch/corpus" "$scratch/artifacts"
        if [ -d "$seeds" ]; then
            cp -R "$seeds/." "$scratch/corpus/"
        else
            echo "run.sh: no seed dir $seeds; $t starts from an empty corpus"
        fi
        echo "$t: ${FUZZ_SECONDS}s on $(find "$scratch/corpus" -type f | wc -l) seeds" \
             "(scratch: $scratch)"
        set +e
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
            "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
            -print_final_stats=1 -artifact_prefix="$scratch/artifacts/" \
            "$scratch/corpus" >"$scratch/fuzz.log" 2>&1
        rc=$?
        set -e
        if [ "$rc" -eq 0 ]; then
            grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units)' "$scratch/fuzz.log" |
                tail -2 || true
            pass "$t"
            rm -rf "$scratch"
        else
            echo "---- $t failed (exit $rc); last lines of its log ----"
            tail -n 60 "$scratch/fuzz.log"
            mkdir -p build-fuzz/crashes
            cp -R "$scratch/artifacts/." build-fuzz/crashes/ 2>/dev/null || true
            echo "---- reproducers kept in build-fuzz/crashes/:"
            ls -1 build-fuzz/crashes/ 2>/dev/null || true
            fail "$t (exit $rc; see build-fuzz/crashes/ and $scratch/fuzz.log)"
        fi
    done
fi

# ---- 5. integration tests
# The test files run in SHARDS pytest processes at once (most of a test's time is
# spent waiting on heartbeats and timeouts, not on the CPU), balanced by how long
# each file took (tests/integration/durations.txt, "SECONDS FILE" lines, in the
# manner of pytest-split; a file not listed is weighed by its size at the listed
# files' seconds per byte): biggest first, each to the shard with the least so far.
# Every shard has its own junit file, log and --basetemp. Each run writes what it
# measured to build-test/durations.txt: copy it over the listed one when files
# have come or grown.
# The official `openai` client for Node, from the npm registry (the gateway's tests
# use it as a client nobody here wrote): into build-test/npm, once.
stage "npm test clients (openai for Node)"
if command -v npm >/dev/null 2>&1 || br_install_deps npm; then
    if tests/node/install.sh build-test/npm; then
        export BRAMBLE_NPM_DIR="$ROOT/build-test/npm"
    else
        fail "npm: the openai client could not be installed (tests/node/install.sh)"
    fi
else
    fail "npm: not installed, and could not be"
fi

SHARDS=${INTEGRATION_SHARDS:-2}
stage "integration tests (pytest, ${SHARDS} shards)"
if [ "$BUILD_OK" -eq 1 ]; then
    rm -f build-test/pytest-junit*.xml build-test/pytest-shard-*.log
    TMP_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/bramble-it.XXXXXX")
    mapfile -t SHARD_FILES < <(/usr/bin/python3 - "$SHARDS" tests/integration/durations.txt \
                                   tests/integration/test_*.py <<'EOF'
import os
import sys
n, listed, files = max(1, int(sys.argv[1])), {}, sys.argv[3:]
if os.path.exists(sys.argv[2]):
    for line in open(sys.argv[2]):
        secs, _, name = line.strip().partition(" ")
        try:
            listed[name] = float(secs)
        except ValueError:
            pass
known = [f for f in files if os.path.basename(f) in listed]
per_byte = (sum(listed[os.path.basename(f)] for f in known) /
            max(1, sum(os.path.getsize(f) for f in known))) if known else 1.0
weight = {f: listed.get(os.path.basename(f), os.path.getsize(f) * per_byte) for f in files}
shards = [[0.0, []] for _ in range(n)]
for f in sorted(files, key=lambda f: (-weight[f], f)):
    least = min(shards, key=lambda s: s[0])
    least[0] += weight[f]
    least[1].append(f)
for _, chosen in shards:
    print(" ".join(sorted(chosen)))
EOF
)
    PIDS=()
    for i in "${!SHARD_FILES[@]}"; do
        [ -n "${SHARD_FILES[$i]}" ] || continue
        # shellcheck disable=SC2086  # one word per file
        BRAMBLE_BIN="$ROOT/build-test/bin" \
            ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
            /usr/bin/python3 -m pytest -q -p no:cacheprovider \
            --junitxml="build-test/pytest-junit-$i.xml" --basetemp="$TMP_ROOT/s$i" \
            ${SHARD_FILES[$i]} >"build-test/pytest-shard-$i.log" 2>&1 &
        PIDS[$i]=$!
        echo "shard $i: ${SHARD_FILES[$i]}"
    done
    # while they run: how many tests each shard has done, once a minute
    last_said=$(date +%s)
    while :; do
        running=0
        for i in "${!PIDS[@]}"; do
            kill -0 "${PIDS[$i]}" 2>/dev/null && running=$((running + 1))
        done
        [ "$running" -gt 0 ] || break
        if [ $(( $(date +%s) - last_said )) -ge 60 ]; then
            last_said=$(date +%s)
            line="integration (at $((last_said - START))s):"
            for i in "${!PIDS[@]}"; do
                # pytest -q: a character a test (. F E s x X) on its progress lines
                marks=$({ grep -oE '^[.sxXFE]+' "build-test/pytest-shard-$i.log" 2>/dev/null ||
                          true; } | tr -d '\n')
                fails=$(printf '%s' "$marks" | tr -cd 'FE' | wc -c)
                line="$line shard $i: ${#marks} tests done"
                [ "$fails" -gt 0 ] && line="$line, $fails failed"
            done
            echo "$line"
        fi
        sleep 5
    done
    for i in "${!PIDS[@]}"; do
        set +e
        wait "${PIDS[$i]}"
        rc=$?
        set -e
        echo
        echo "---- shard $i (pytest exit $rc)"
        cat "build-test/pytest-shard-$i.log"
        junit="build-test/pytest-junit-$i.xml"
        if [ -f "$junit" ]; then
            # one line per test case: "pass NAME", "fail NAME" or "skip NAME"
            while read -r verdict name; do
                case "$verdict" in
                    pass) pass "$name" ;;
                    fail) fail "integration: $name" ;;
                esac
            done < <(/usr/bin/python3 - "$junit" <<'EOF'
import sys
import xml.etree.ElementTree as ET
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    name = f"{case.get('classname', '')}::{case.get('name', '')}"
    tags = {child.tag for child in case}
    if tags & {"failure", "error"}:
        print("fail", name)
    elif "skipped" in tags:
        print("skip", name)
    else:
        print("pass", name)
EOF
)
        fi
        if [ ! -f "$junit" ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; }; then
            # 1 = some tests failed (counted above); anything else is pytest itself failing
            fail "pytest shard $i (exit $rc)"
        elif [ "$rc" -eq 0 ]; then
            rm -rf "${TMP_ROOT:?}/s$i"  # a failed shard's files stay for a look
        fi
    done
    rmdir "$TMP_ROOT" 2>/dev/null || echo "the failed tests' files are kept under $TMP_ROOT"
    # what each file took this time, for tests/integration/durations.txt
    /usr/bin/python3 - build-test/pytest-junit-*.xml >build-test/durations.txt <<'EOF' || true
import collections
import sys
import xml.etree.ElementTree as ET
took = collections.Counter()
for path in sys.argv[1:]:
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("classname", "").split(".")[-1]
        took[name + ".py"] += float(case.get("time") or 0)
for name in sorted(took):
    print(f"{took[name]:.0f} {name}")
EOF
else
    echo "SKIP: integration tests (the build failed)"
fi

finish
