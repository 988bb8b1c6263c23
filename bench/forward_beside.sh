#!/usr/bin/env bash
# forward_beside.sh [MB [REPORT]] - a forward's bytes beside bench/swarm.sh's heartbeats:
#   BESIDE="$PWD/bench/forward_beside.sh 2048 /tmp/fwd.txt" bench/swarm.sh 1000 1s 30s
# A real agent joins the swarm's coordinator, a job on it serves MB megabytes
# (default 2048) on a TCP port of its node, and `bramble forward JOB PORT --stdio`
# carries them here through the coordinator's relay. Prints (and appends to REPORT,
# as swarm.sh keeps no output of BESIDE) when the bytes began to flow, how many came
# and how long they took. Needs bramble and bramble-agent
# on PATH and BRAMBLE_CREDENTIAL (swarm.sh's BESIDE has both).
set -euo pipefail
MB=${1:-2048}
SENDER=$(dirname "$(readlink -f "$0")")/tcp_sender.py # (the job reads it from here)
REPORT=${2:-/dev/null}
D=$(mktemp -d "${TMPDIR:-/tmp}/bramble-fwd.XXXXXX")
AGENT=
cleanup() {
    [ -n "$AGENT" ] && kill "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null
    rm -rf "$D"
}
trap cleanup EXIT
now() { date +%s.%N; }
T0=$(now)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ROOT_JOBS=()
[ "$(id -u)" = 0 ] && ROOT_JOBS=(--allow-root-jobs)
bramble-agent --data-dir "$D/agent" --join "$(bramble token create --uses 1)" \
    --name fwd-real --probe-port 0 --replica-port 0 "${ROOT_JOBS[@]}" \
    >"$D/agent.log" 2>&1 &
AGENT=$!
cat >"$D/job.yaml" <<EOF
name: fwd-source
resources: {cpus: 0, nodelist: [fwd-real]}
command: exec python3 $SENDER $PORT $MB
EOF
for _ in $(seq 150); do # (one node's state: a listing of the swarm's would load it)
    bramble node show fwd-real 2>/dev/null | grep -q '^state: *ready' && break
    sleep 0.2
done
JOB=$(bramble submit "$D/job.yaml")
for _ in $(seq 150); do
    bramble job show "$JOB" 2>/dev/null | grep -q '^state: *running' &&
        python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $PORT), 1).close()" \
            2>/dev/null && break
    sleep 0.2
done
T1=$(now)
GOT=$(bramble forward "$JOB" "$PORT" --stdio </dev/null | wc -c)
T2=$(now)
bramble cancel --now "$JOB" >/dev/null 2>&1 || true
awk -v t0="$T0" -v t1="$T1" -v t2="$T2" -v got="$GOT" -v mb="$MB" 'BEGIN {
    printf "forward: %d of %d MiB in %.1f s (%.0f MB/s), from %.1f s after this began\n",
        got / 1048576, mb, t2 - t1, got / 1e6 / (t2 - t1), t1 - t0 }' | tee -a "$REPORT"
[ "$GOT" -eq $((MB << 20)) ]
