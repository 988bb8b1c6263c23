#!/usr/bin/env bash
# recovery.sh - kill-the-node trials on a local cluster: how long from the kill
# until the job runs again on another node, and until its first new training step,
# with the default timing (1s heartbeat, 5s node timeout) and with fast settings
# (200ms / 1s). Prints median and max; docs/benchmarks.md keeps the figures.
#   bench/recovery.sh [BUILD_DIR] [TRIALS]   (defaults: build, 20)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${1:-build}/bin" && pwd)
trials=${2:-20}
echo "machine: $(nproc) cores, $(uname -m), $(. /etc/os-release; echo "$PRETTY_NAME")"
/usr/bin/python3 bench/recovery.py "$bin" "$trials" 1s 5s
/usr/bin/python3 bench/recovery.py "$bin" "$trials" 200ms 1s
