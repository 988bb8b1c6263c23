#!/usr/bin/env bash
# submit.sh - submission throughput and end-to-end time of trivial jobs on a local
# cluster of 2 agents (bramble up). Prints the figures; docs/benchmarks.md keeps them.
#   bench/submit.sh [BUILD_DIR]   (default: build; needs a release build)
#   bench/submit.sh --cli [--rounds N] BUILD_DIR [OTHER_BUILD_DIR...]
#       only the CLI's two figures (a shell loop of bramble submit, and submit
#       --wait of a trivial job), N rounds (default 3) in which each build's
#       bramble takes its turn, so that builds compared meet the same load; the
#       cluster runs the first build's daemons.
set -euo pipefail
cd "$(dirname "$0")/.."
cli_only=0 rounds=3
while [ $# -gt 0 ]; do
    case $1 in
    --cli) cli_only=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    *) break ;;
    esac
done
builds=("${@:-build}")
bin=${builds[0]}/bin
work=$(mktemp -d)
export HOME=$work/home
mkdir -p "$HOME"
trap '"$bin/bramble" down --dir "$work/cluster" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

"$bin/bramble" up --agents 2 --dir "$work/cluster" >/dev/null
cred=$HOME/.config/bramble/credential
echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -m), $(. /etc/os-release; echo "$PRETTY_NAME")"
printf 'name: cli-%s\ncommand: "true"\n' X > "$work/spec.yaml"
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# 1. through the CLI: one process per submission, as a shell loop would do it.
# Prints the rate; $1 the bramble, $2 a prefix for the jobs' names.
cli_loop() {
    local n=100 i start end
    start=$EPOCHREALTIME
    for ((i = 1; i <= n; i++)); do
        "$1" submit "$work/spec.yaml" --set name=$2-$i >/dev/null
    done
    end=$EPOCHREALTIME
    awk -v n=$n -v s="$start" -v e="$end" 'BEGIN { printf "%.0f\n", n / (e - s) }'
}

# 4. what a person waits: `bramble submit --wait` of a trivial job, from the command
# to its return (the job's end reaches the CLI as event.news, not by polling).
# Prints "median min max" in seconds; $1 the bramble, $2 a prefix for the names.
cli_wait() {
    local n=15 i s e
    for ((i = 1; i <= n; i++)); do
        s=$EPOCHREALTIME
        "$1" submit "$work/spec.yaml" --set name=$2-$i --wait >/dev/null
        e=$EPOCHREALTIME
        awk -v s="$s" -v e="$e" 'BEGIN { printf "%.4f\n", e - s }'
    done | sort -n | awk '{ d[NR] = $1 } END {
        printf "%.3f %.3f %.3f\n", d[int((NR + 1) / 2)], d[1], d[NR] }'
}

median() { sort -n | awk '{ d[NR] = $1 } END { print d[int((NR + 1) / 2)] }'; }

# Until no job is pending, starting or running (the loop's 100 jobs run after it),
# so that submit --wait does not wait behind them.
drain() {
    while "$bin/bramble" jobs --json |
        grep -Eq '"state": "(pending|starting|running)"'; do
        sleep 0.2
    done
}

if [ $cli_only = 1 ]; then
    echo "load average at start: $(loadavg)"
    declare -A rates waits
    for ((r = 1; r <= rounds; r++)); do
        for ((b = 0; b < ${#builds[@]}; b++)); do
            rate=$(cli_loop "${builds[b]}/bin/bramble" "r$r-b$b-loop")
            drain
            w=$(cli_wait "${builds[b]}/bin/bramble" "r$r-b$b-wait")
            rates[$b]+="$rate "
            waits[$b]+="${w%% *} "
            echo "round $r, ${builds[b]}: cli $rate submissions/s; submit --wait median," \
                 "min, max: $w s (load $(loadavg))"
        done
    done
    for ((b = 0; b < ${#builds[@]}; b++)); do
        echo "${builds[b]}: cli $(tr ' ' '\n' <<<"${rates[$b]}" | grep . | median)" \
             "submissions/s, submit --wait $(tr ' ' '\n' <<<"${waits[$b]}" | grep . | median) s" \
             "(medians of $rounds rounds)"
    done
    echo "load average at end: $(loadavg)"
    exit 0
fi

echo "cli: 100 submissions, $(cli_loop "$bin/bramble" cli) submissions/s"

# 2. one connection, one request at a time; then how long the 500 jobs take to run
"$bin/bramble-bench-submit" --credential "$cred" --count 500 --mode loop --prefix loop --wait
# 3. one connection, all 500 requests in flight (batched into shared commits)
"$bin/bramble-bench-submit" --credential "$cred" --count 500 --mode pipelined --prefix pipe --wait

read -r med min max <<<"$(cli_wait "$bin/bramble" wait)"
echo "submit --wait, trivial job: median $med s, min $min s, max $max s (15 runs)"
