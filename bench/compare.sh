#!/usr/bin/env bash
# compare.sh - the coordinator's figures for two builds side by side, in alternating
# rounds so that both meet the same load: the swarm (bench/swarm.sh), one scheduling
# pass (bramble-bench-sched) and pipelined submissions to a local cluster
# (bramble-bench-submit). Release builds with the swarm and bench targets:
#   cmake -B DIR -DCMAKE_BUILD_TYPE=Release -DBRAMBLE_TESTS=OFF
#   cmake --build DIR --target brambled bramble bramble-agent bramble-swarm \
#       bramble-bench-sched bramble-bench-submit
# Usage: bench/compare.sh [--rounds N] BEFORE_BIN AFTER_BIN   (default 2 rounds)
# Environment: AGENTS (default 1000), SWARM_HB (1s), SWARM_MEASURE (10s),
# SCHED (default "10000 1000 3": jobs, nodes, passes), SUBMITS (500), BATCHES (5).
set -euo pipefail
rounds=2
[ "${1:-}" = --rounds ] && { rounds=$2; shift 2; }
[ $# -eq 2 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
before=$(cd "$1" && pwd) after=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/bramble-compare.XXXXXX")
cleanup() {
    local b
    for b in "$before" "$after"; do
        "$b/bramble" down --dir "$work/cluster" >/dev/null 2>&1 || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
echo "machine: $(nproc) cores, $(uname -m); $rounds rounds, before: $before, after: $after"

swarm() { # BIN: the swarm's one line of figures
    BIN=$1 "$ROOT/bench/swarm.sh" "${AGENTS:-1000}" "${SWARM_HB:-1s}" "${SWARM_MEASURE:-10s}" 2>&1 |
        grep -E "^coordinator CPU:|heartbeats in" | tr '\n' ' '
}

sched() { # BIN: each pass's CPU time
    # shellcheck disable=SC2086
    "$1/bramble-bench-sched" ${SCHED:-10000 1000 3} 2>&1 | grep -E "^pass [0-9]+:" |
        sed 's/, [0-9]* waiting.*//' | tr '\n' ' '
}

submits() { # BIN: the median rate of pipelined batches on a fresh 2-agent cluster
    local bin=$1
    HOME=$work/home-$RANDOM
    export HOME
    mkdir -p "$HOME"
    rm -rf "$work/cluster"
    "$bin/bramble" up --agents 2 --dir "$work/cluster" --http off >/dev/null
    "$bin/bramble-bench-submit" --credential "$HOME/.config/bramble/credential" \
        --count "${SUBMITS:-500}" --mode pipelined --batches "${BATCHES:-5}" \
        --command true 2>&1 | grep -E "^pipelined:" | tr '\n' ' '
    "$bin/bramble" down --dir "$work/cluster" >/dev/null 2>&1 || true
}

for r in $(seq "$rounds"); do
    for side in before after; do
        bin=${!side}
        echo "round $r $side swarm:   $(swarm "$bin")"
        echo "round $r $side sched:   $(sched "$bin")"
        echo "round $r $side submits: $(submits "$bin")"
    done
done
