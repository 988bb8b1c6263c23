#!/usr/bin/env bash
# quickstart.sh - from a fresh checkout to a job's output in one command:
# installs what is missing (Debian/Ubuntu), builds a release build in build/,
# starts a local cluster (a coordinator and 2 agents on loopback) with
# `bramble up`, runs examples/hello.yaml on it and shows the result.
#
# Usage: deploy/quickstart.sh        (stop the cluster with: build/bin/bramble down)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=deploy/install-deps.sh
. deploy/install-deps.sh
br_install_deps "${BR_BUILD_DEPS[@]}"

echo "==> building (release) into build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBRAMBLE_TESTS=OFF -DBRAMBLE_SANITIZE=OFF \
    -DBRAMBLE_FUZZ=OFF >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)"

BRAMBLE=build/bin/bramble

echo
echo "==> starting a local cluster: $BRAMBLE up --agents 2"
if ! "$BRAMBLE" up --agents 2; then
    echo
    echo "quickstart: 'bramble up' failed (see above). If a local cluster is already"
    echo "running, stop it first with: $BRAMBLE down"
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

echo
if [ "$RC" -eq 0 ]; then
    echo "The job completed. The cluster keeps running: try '$BRAMBLE submit SPEC --follow',"
    echo "'$BRAMBLE jobs', '$BRAMBLE events'."
else
    echo "The job did not complete (bramble submit --wait exited $RC)."
fi
echo "Stop the local cluster with: $BRAMBLE down"
exit "$RC"
