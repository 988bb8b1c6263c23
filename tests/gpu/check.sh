#!/usr/bin/env bash
# check.sh - bramble on a machine with an NVIDIA GPU, in one run of at most 8 minutes:
#   tests/gpu/check.sh [BUILD_DIR]        (default build-gpu)
# It builds bramble (Release, no tests), then, when nvidia-smi sees a GPU:
#   1. an agent with --gpus auto (NVML): each GPU's model, VRAM and UUID against
#      nvidia-smi's;
#   2. a bare job with gpus: 1 sees exactly its GPU (CUDA_VISIBLE_DEVICES names one
#      GPU, the one the coordinator says it holds, by UUID: nvidia-smi itself
#      ignores CUDA_VISIBLE_DEVICES, so it is asked for that id); a container job
#      is skipped (no image can be had here without a registry);
#   3. NVML telemetry while a CUDA load runs (the NCCL probe, in a loop): the
#      GPU's utilisation and power, as the agent reports them, rise;
#   4. the NCCL probe across the machine's GPUs (one rank each).
# Each check prints PASS, FAIL or SKIP with what it saw; the exit status is 1 when
# one failed. Without a GPU it builds, says so and exits 0.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build-gpu}
DEADLINE=$(($(date +%s) + 470)) # (8 minutes, less the teardown)
FAILS=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
skip() { echo "SKIP $*"; }
left() { echo $((DEADLINE - $(date +%s))); }

echo "== build ($BUILD)"
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBRAMBLE_TESTS=OFF \
        >"$BUILD.configure.log" 2>&1; then
    tail -20 "$BUILD.configure.log"
    echo "FAIL build: cmake could not configure (see above; deploy/install-deps.sh installs what it needs)"
    exit 1
fi
if ! cmake --build "$BUILD" -j"$(nproc)" >"$BUILD.build.log" 2>&1; then
    tail -30 "$BUILD.build.log"
    echo "FAIL build"
    exit 1
fi
pass "build: $(ls "$BUILD/bin" | tr '\n' ' ')"
BIN=$BUILD/bin
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "no NVIDIA GPU here (nvidia-smi finds none): built only"
    exit 0
fi
nvidia-smi -L
NGPU=$(nvidia-smi -L | grep -c '^GPU ')

T=$(mktemp -d "${TMPDIR:-/tmp}/bramble-gpu.XXXXXX")
export HOME=$T BRAMBLE_CREDENTIAL=$T/admin.credential
B() { "$BIN/bramble" "$@"; }
cleanup() {
    B down --dir "$T/c" >/dev/null 2>&1
    [ -n "${LOAD:-}" ] && kill "$LOAD" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
py() { python3 -c "$@"; }

echo "== 1. an agent with --gpus auto against nvidia-smi"
if ! B up --dir "$T/c" --agents 1 >"$T/up.log" 2>&1; then
    cat "$T/up.log"
    fail "bramble up"
    exit 1
fi
NODE=node-1
B node show $NODE --json >"$T/node.json"
nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits >"$T/smi.csv"
if py "$(cat <<'PY'
import csv, json, sys
node = json.load(open(sys.argv[1]))
gpus = {g["index"]: g for g in node.get("gpus") or []}
bad = 0
for row in csv.reader(open(sys.argv[2])):
    i, name, mib, uuid = int(row[0]), row[1].strip(), int(row[2]), row[3].strip()
    g = gpus.get(i)
    if not g:
        print("  GPU %d: the agent reports none" % i)
        bad = 1
        continue
    same = (g["model"] == name, abs(g["vram_total"] - mib * 2**20) <= 64 * 2**20,
            g.get("uuid") == uuid)
    print("  GPU %d: agent %r %d MiB %s; nvidia-smi %r %d MiB %s"
          % (i, g["model"], g["vram_total"] >> 20, g.get("uuid"), name, mib, uuid))
    bad |= not all(same)
sys.exit(bad)
PY
)" "$T/node.json" "$T/smi.csv"; then
    pass "inventory: model, VRAM and UUID of each GPU match nvidia-smi"
else
    fail "inventory differs from nvidia-smi"
fi

echo "== 2. a job sees exactly its GPU"
cat >"$T/bare.yaml" <<'YAML'
name: gpu-bare
resources: {gpus: 1, cpus: 0}
command: |
  echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
  nvidia-smi --id="$CUDA_VISIBLE_DEVICES" --query-gpu=uuid --format=csv,noheader
  sleep 5
YAML
J=$(B submit "$T/bare.yaml")
sleep 2
B node show $NODE --json >"$T/held.json"
for _ in $(seq 60); do
    B job show "$J" --json | grep -q '"state": "completed"\|"state": "failed"' && break
    sleep 1
done
B logs "$J" >"$T/bare.log" 2>&1
cat "$T/bare.log"
if py "$(cat <<'PY'
import json, sys
node = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read().split()
job = int(sys.argv[3])
held = [g for g in node["gpus"] if any(h["job"] == job for h in g.get("held_by", []))]
uuids = [w for w in log if w.startswith("GPU-")]
print("  holds GPU %s; nvidia-smi in the job sees %s" % ([g["index"] for g in held], uuids))
sys.exit(not (len(held) == 1 and uuids == [held[0].get("uuid")]))
PY
)" "$T/held.json" "$T/bare.log" "$J"; then
    pass "bare job: exactly its GPU"
else
    fail "bare job: not exactly its GPU"
fi
if command -v podman >/dev/null && command -v nvidia-ctk >/dev/null; then
    skip "container job: no image here to run (no registry is reachable; test_containers.py covers CDI with a spec of its own)"
else
    skip "container job: podman or nvidia-ctk not here"
fi

echo "== 3. NVML telemetry under a CUDA load"
figure() { # the agent's last util and power of GPU 0, as the coordinator keeps them
    B node show $NODE --json | py 'import json,sys; g=json.load(sys.stdin)["gpus"][0]; print(g.get("util", -1), g.get("power_w", -1))'
}
sleep 3
read -r U0 P0 < <(figure)
export WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 CUDA_VISIBLE_DEVICES=0
(while :; do MASTER_PORT=$((20000 + RANDOM % 20000)) "$BIN/bramble-nccl-probe" >/dev/null 2>&1 || sleep 1; done) &
LOAD=$!
MAXU=$U0 MAXP=$P0
for _ in $(seq 20); do
    sleep 1
    read -r U P < <(figure)
    MAXU=$(py "print(max($MAXU, $U))")
    MAXP=$(py "print(max($MAXP, $P))")
done
kill $LOAD 2>/dev/null; wait $LOAD 2>/dev/null; LOAD=
unset WORLD_SIZE RANK LOCAL_RANK MASTER_ADDR CUDA_VISIBLE_DEVICES
echo "  idle: util $U0 %, power $P0 W; under load: util up to $MAXU %, power up to $MAXP W"
if py "import sys; sys.exit(not ($MAXU > $U0 and $MAXP > $P0))"; then
    pass "telemetry rises under load"
else
    fail "telemetry did not rise under load"
fi

echo "== 4. the NCCL probe across $NGPU GPU(s)"
if [ "$(left)" -lt 60 ]; then
    skip "NCCL probe: no time left"
else
    PORT=$((20000 + RANDOM % 20000))
    for r in $(seq 1 $((NGPU - 1))); do
        WORLD_SIZE=$NGPU RANK=$r LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
            CUDA_VISIBLE_DEVICES=$r timeout 120 "$BIN/bramble-nccl-probe" >/dev/null 2>&1 &
    done
    if WORLD_SIZE=$NGPU RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
        CUDA_VISIBLE_DEVICES=0 timeout 120 "$BIN/bramble-nccl-probe" >"$T/nccl.json" 2>"$T/nccl.err"; then
        tail -1 "$T/nccl.json"
        pass "NCCL probe: $(tail -1 "$T/nccl.json")"
    else
        cat "$T/nccl.err"
        fail "NCCL probe"
    fi
    wait
fi

echo "== $FAILS failed"
[ "$FAILS" -eq 0 ]
