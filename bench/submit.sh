#!/usr/bin/env bash
# submit.sh - submission throughput and end-to-end time of trivial jobs on a local
# cluster of 2 agents (bramble up). Prints the figures; docs/benchmarks.md keeps them.
#   bench/submit.sh [BUILD_DIR]   (default: build; needs a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/bin
work=$(mktemp -d)
export HOME=$work/home
mkdir -p "$HOME"
trap '"$bin/bramble" down --dir "$work/cluster" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

"$bin/bramble" up --agents 2 --dir "$work/cluster" >/dev/null
cred=$HOME/.config/bramble/credential
echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -m), $(. /etc/os-release; echo "$PRETTY_NAME")"

# 1. through the CLI: one process per submission, as a shell loop would do it
n=100
printf 'name: cli-%s\ncommand: "true"\n' X > "$work/spec.yaml"
start=$(date +%s.%N)
for i in $(seq 1 $n); do
    "$bin/bramble" submit "$work/spec.yaml" --set name=cli-$i >/dev/null
done
end=$(date +%s.%N)
awk -v n=$n -v s="$start" -v e="$end" \
    'BEGIN { printf "cli: %d submissions in %.3f s = %.0f/s\n", n, e-s, n/(e-s) }'

# 2. one connection, one request at a time; then how long the 500 jobs take to run
"$bin/bramble-bench-submit" --credential "$cred" --count 500 --mode loop --prefix loop --wait
# 3. one connection, all 500 requests in flight (batched into shared commits)
"$bin/bramble-bench-submit" --credential "$cred" --count 500 --mode pipelined --prefix pipe --wait

# 4. what a person waits: `bramble submit --wait` of a trivial job, from the command
# to its return (the job's end reaches the CLI as event.news, not by polling)
n=15
for i in $(seq 1 $n); do
    s=$(date +%s.%N)
    "$bin/bramble" submit "$work/spec.yaml" --set name=wait-$i --wait >/dev/null
    e=$(date +%s.%N)
    awk -v s="$s" -v e="$e" 'BEGIN { printf "%.4f\n", e - s }'
done | sort -n | awk '{ d[NR] = $1 } END {
    printf "submit --wait, trivial job: median %.3f s, min %.3f s, max %.3f s (%d runs)\n",
    d[int((NR + 1) / 2)], d[1], d[NR], NR }'
