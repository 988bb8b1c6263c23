#!/usr/bin/env bash
# swarm.sh - a fresh coordinator on loopback and N simulated agents against it
# (bench/swarm.c); prints the swarm's figures. Build first, Release for figures:
#   cmake -B build-rel -DCMAKE_BUILD_TYPE=Release -DBRAMBLE_TESTS=OFF
#   cmake --build build-rel --target brambled bramble-swarm
# Usage: bench/swarm.sh AGENTS HEARTBEAT MEASURE [swarm flags: --jobs N --hold]
#   e.g. bench/swarm.sh 10000 1s 20s
# Environment: BESIDE, a shell command run once the agents have joined, while the
# swarm is measured (its output in the coordinator's dir; BRAMBLE_CREDENTIAL is the
# admin's), e.g. BESIDE='bramble data push TREE w' for an upload beside the swarm;
# SWARM_RTT_LOG=PREFIX, each answered heartbeat's time and round trip into
# PREFIX.PID (one file a swarm process), to see when the slow ones came;
# BIN (default build-rel/bin), PORT (default 27700), NODE_TIMEOUT
# (default 120s: longer than joining them all takes, so none is lost meanwhile;
# the coordinator answers heartbeats as often as the agents' fence time needs,
# which is every heartbeat for a node timeout of up to about 12 heartbeat
# intervals).
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$ROOT/build-rel/bin}
PORT=${PORT:-27700}
AGENTS=$1 HB=$2 MEASURE=$3
shift 3
# each simulated agent holds a connection, and so does the coordinator for it
ulimit -Hn $((4 * AGENTS + 4096)) 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
DIR=$(mktemp -d "${TMPDIR:-/tmp}/bramble-swarm.XXXXXX")
COORD=
cleanup() {
    [ -n "$COORD" ] && kill "$COORD" 2>/dev/null && wait "$COORD" 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT
"$BIN/brambled" init --data-dir "$DIR/c" --listen "tcp://127.0.0.1:$PORT" >/dev/null
"$BIN/brambled" --data-dir "$DIR/c" --heartbeat-interval "$HB" \
    --node-timeout "${NODE_TIMEOUT:-120s}" \
    >"$DIR/brambled.log" 2>&1 &
COORD=$!
for _ in $(seq 100); do
    "$BIN/bramble" --credential "$DIR/c/admin.credential" nodes --json >/dev/null 2>&1 && break
    sleep 0.1
done
beside() { # once the agents have joined: BESIDE, timed
    while IFS= read -r line; do
        printf '%s\n' "$line"
        case $line in joined*)
            [ -n "${BESIDE:-}" ] && (
                t0=$(date +%s.%N)
                PATH=$BIN:$PATH BRAMBLE_CREDENTIAL=$DIR/c/admin.credential \
                    bash -c "$BESIDE" >"$DIR/beside.log" 2>&1 && rc=0 || rc=$?
                echo "beside (exit $rc): $BESIDE: $(awk -v a="$t0" -v b="$(date +%s.%N)" \
                    'BEGIN { printf "%.1f", b - a }') s from the join" >&2
            ) &
            ;;
        esac
    done
    wait
}
"$BIN/bramble-swarm" --credential "$DIR/c/admin.credential" --coordinator-pid "$COORD" \
    --agents "$AGENTS" --heartbeat "$HB" --measure "$MEASURE" "$@" | beside
