#!/usr/bin/env bash
# quickstart.sh - from a fresh checkout to a job's output in one command:
# installs what is missing (Debian/Ubuntu), builds a release build in build/,
# starts a local cluster (a coordinator and 2 agents on loopback) with
# `bramble up`, runs examples/hello.yaml on it, then runs a training job that
# checkpoints, kills the node under it and shows it resume on the other node.
# It ends by printing the next commands with the ids its jobs got (a cluster used
# before goes on counting). The training job's checkpoints stay in the cluster's
# directory, so that `bramble checkpoint pull` works after it.
#
# Usage: deploy/quickstart.sh        (stop the cluster with: build/bin/bramble down)
#        QUICKSTART_BIN=DIR deploy/quickstart.sh
#                                    (the binaries in DIR: no install, no build)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ -n "${QUICKSTART_BIN:-}" ]; then
    BIN=$QUICKSTART_BIN
else
    # shellcheck source=deploy/install-deps.sh
    . deploy/install-deps.sh
    br_install_deps "${BR_BUILD_DEPS[@]}"

    echo "==> building (release) into build/"
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBRAMBLE_TESTS=OFF \
        -DBRAMBLE_SANITIZE=OFF -DBRAMBLE_FUZZ=OFF >/dev/null
    cmake --build build -j "$(nproc 2>/dev/null || echo 2)"
    BIN=build/bin
fi
BRAMBLE=$BIN/bramble

echo
echo "==> starting a local cluster: $BRAMBLE up --agents 2"
if ! "$BRAMBLE" up --agents 2; then
    echo
    echo "quickstart: 'bramble up' failed (see above)."
    exit 1
fi

echo
echo "==> running examples/hello.yaml: $BRAMBLE submit examples/hello.yaml --wait"
set +e
JOB_ID=$("$BRAMBLE" submit examples/hello.yaml --wait)
RC=$?
set -e
JOB_ID=${JOB_ID%%[[:space:]]*}
echo "job ${JOB_ID:-?} ended; submit --wait exited $RC"

echo
echo "==> $BRAMBLE nodes"
"$BRAMBLE" nodes

if [ -n "$JOB_ID" ]; then
    echo
    echo "==> $BRAMBLE job show $JOB_ID"
    "$BRAMBLE" job show "$JOB_ID"
    echo
    echo "==> $BRAMBLE logs $JOB_ID"
    "$BRAMBLE" logs "$JOB_ID"
fi

# --- a job survives the loss of its node -----------------------------------------
# field ID EXPR: a value from `bramble job show ID --json` (EXPR on the object j).
field() {
    "$BRAMBLE" job show "$1" --json |
        /usr/bin/python3 -c "import json,sys; j=json.load(sys.stdin); print($2)"
}
# descendants PID: every process below PID (children, theirs, ...), by parent pid.
descendants() {
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { parent[$1] = $2 }
        END {
            mark[root] = 1
            for (changed = 1; changed;) {
                changed = 0
                for (p in parent)
                    if (!(p in mark) && (parent[p] in mark)) { mark[p] = 1; changed = 1 }
            }
            for (p in mark) if (p != root) print p
        }'
}
# kill_node NODE: what losing a machine looks like - its agent and every process of
# its jobs die. Only this cluster's: the agent whose pid this cluster recorded and
# the processes below it (its jobs), stopped first so that none forks away while
# the tree is read; another local cluster's node of the same name is left alone.
kill_node() {
    local pid pids more
    pid=$(cat "$CLUSTER_DIR/$1.pid")
    kill -STOP "$pid"
    pids=$(descendants "$pid")
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -STOP $pids 2>/dev/null || true
    more=$(descendants "$pid") # what forked before it was stopped
    # shellcheck disable=SC2086
    kill -9 "$pid" $pids $more 2>/dev/null || true
}
wait_until() { # wait_until SECONDS WHAT COMMAND...
    local end=$((SECONDS + $1)) what=$2
    shift 2
    until "$@"; do
        if [ $SECONDS -ge $end ]; then
            echo "quickstart: gave up waiting for $what" >&2
            return 1
        fi
        sleep 0.2
    done
}

CLUSTER_DIR=$(head -n1 "$HOME/.config/bramble/local-cluster")
QS_TMP=$(mktemp -d /tmp/bramble-quickstart.XXXXXX)
# shellcheck disable=SC2317 # (run by the trap)
cleanup() { rm -rf "$QS_TMP"; } # the comparison run's files and this run's pull
trap cleanup EXIT
# the job's checkpoints: kept with the cluster, one dir per job (the coordinator
# puts the job's id in), for `bramble checkpoint pull` after the quickstart
# shellcheck disable=SC2016 # (the coordinator expands it, not the shell)
CKPT=$CLUSTER_DIR/checkpoints/'train-${BRAMBLE_JOB_ID}'
echo
echo "==> a training job that survives the loss of its node"
echo "    (its code, examples/, travels with it: code: . in the spec)"
echo "    $BRAMBLE submit examples/train-code.yaml --set 'checkpoint.dir=$CKPT'"
TRAIN=$("$BRAMBLE" submit examples/train-code.yaml --set "checkpoint.dir=$CKPT")
# shellcheck disable=SC2317 # (run by wait_until)
has_checkpoint() { [ "$(field "$TRAIN" "len(j['checkpoints'])")" -ge 2 ]; }
wait_until 60 "the job's first checkpoints" has_checkpoint
NODE=$(field "$TRAIN" "j['nodes'][0]")
echo "    job $TRAIN runs on $NODE and has checkpointed up to step" \
     "$(field "$TRAIN" "max(c['step'] for c in j['checkpoints'])")"
echo "==> killing $NODE (SIGKILL to its agent and to its job's processes)"
kill_node "$NODE"
"$BRAMBLE" logs "$TRAIN" -f >/dev/null
TRAIN_STATE=$(field "$TRAIN" "j['state']")
echo
echo "==> $BRAMBLE job show $TRAIN   (the timeline)"
"$BRAMBLE" job show "$TRAIN" | sed -n '/^events:/,$p'
echo
echo "==> $BRAMBLE logs $TRAIN"
"$BRAMBLE" logs "$TRAIN" | grep -v ' (checkpoint saved)$' || true
echo
echo "==> uninterrupted run of the same script, for comparison:"
BRAMBLE_CHECKPOINT_DIR=$QS_TMP/direct /usr/bin/python3 examples/train_checkpoint.py \
    --steps 60 --every 5 --step-time 0 | tail -1
echo "    (the job's final line above is the same: it resumed from its checkpoint)"
echo
echo "==> its newest checkpoint, fetched to this machine and verified:"
echo "    $BRAMBLE checkpoint pull $TRAIN DIR"
if ! "$BRAMBLE" checkpoint pull "$TRAIN" "$QS_TMP/weights"; then
    echo "quickstart: the job's newest checkpoint could not be pulled" >&2
    RC=1
fi
if [ "$TRAIN_STATE" != completed ]; then
    echo "quickstart: the training job ended $TRAIN_STATE" >&2
    RC=1
fi
echo "    $NODE is lost; restart its agent (with its pid where bramble down finds it):"
# a root agent runs jobs as root only when told so (bramble up tells its agents)
ROOT_JOBS=
[ "$(id -u)" -eq 0 ] && ROOT_JOBS=" --allow-root-jobs"
echo "    $BIN/bramble-agent --data-dir $CLUSTER_DIR/$NODE$ROOT_JOBS \\"
echo "        >>$CLUSTER_DIR/$NODE.log 2>&1 & echo \$! >$CLUSTER_DIR/$NODE.pid"

echo
if [ "$RC" -eq 0 ]; then
    echo "Both jobs completed."
else
    echo "Something did not work: see the lines above."
fi
echo
echo "Next steps (the cluster keeps running; job $TRAIN is the training job):"
echo "  $BRAMBLE nodes"
echo "  $BRAMBLE submit examples/hello.yaml --follow"
echo "  $BRAMBLE jobs --all"
echo "  $BRAMBLE logs $TRAIN"
echo "  $BRAMBLE checkpoint list $TRAIN    # its checkpoints, and their copies"
echo "  $BRAMBLE checkpoint pull $TRAIN weights/job-$TRAIN    # its newest one, here, verified"
echo "  $BRAMBLE down    # stop the cluster (its data is kept for the next bramble up)"
exit "$RC"
