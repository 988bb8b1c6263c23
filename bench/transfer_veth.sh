#!/usr/bin/env bash
# transfer_veth.sh - checkpoint pulls over a link limited to 200 Mbit/s: two network
# namespaces joined by a veth pair, `tc qdisc ... tbf` on the holder's side, the
# holder of bramble-bench-transfer (--serve) in one and its puller (--pull) in the
# other. Runs a replica pull and a restore pull (--restore: into the job's
# checkpoint dir, as the job's user) in turn, RUNS times each, and prints MB/s,
# Mbit/s of payload and the share of the link of each, with the load average.
# Needs root (ip netns, tc). docs/benchmarks.md keeps the figures.
#   bench/transfer_veth.sh [BUILD_DIR] [RUNS] [SIZE] [FILES]
#   (defaults: build-rel, 5, 256MiB, 4); RATE_MBIT (200), BURST (256kbit).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${1:-build-rel}/bin" && pwd)
runs=${2:-5} size=${3:-256MiB} files=${4:-4}
rate=${RATE_MBIT:-200} burst=${BURST:-256kbit}
tag=brv$$ # interface names have at most 15 characters
hns=${tag}h pns=${tag}p
work=$(mktemp -d "${TMPDIR:-/tmp}/bramble-transfer-veth.XXXXXX")
chmod 755 "$work" # a restore writes as the job's user (nobody), beneath it
holder=
cleanup() {
    if [ -n "$holder" ]; then
        kill "$holder" 2>/dev/null || true
        wait "$holder" 2>/dev/null || true
    fi
    ip netns del "$hns" 2>/dev/null || true # takes the veth pair with it
    ip netns del "$pns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

ip netns add "$hns"
ip netns add "$pns"
ip link add "${tag}a" netns "$hns" type veth peer name "${tag}b" netns "$pns"
ip -n "$hns" addr add 10.231.0.1/24 dev "${tag}a"
ip -n "$pns" addr add 10.231.0.2/24 dev "${tag}b"
for ns in "$hns" "$pns"; do ip -n "$ns" link set lo up; done
ip -n "$hns" link set "${tag}a" up
ip -n "$pns" link set "${tag}b" up
ip netns exec "$hns" tc qdisc add dev "${tag}a" root tbf rate "${rate}mbit" \
    burst "$burst" latency 50ms

echo "machine: $(nproc) cores, $(uname -m); link: tbf rate ${rate}mbit burst $burst" \
    "latency 50ms; checkpoint: $size in $files files"
ip netns exec "$hns" "$bin/bramble-bench-transfer" --serve "$work/serve.json" \
    --listen tcp://10.231.0.1:0 --size "$size" --files "$files" --dir "$work" \
    >"$work/holder.log" 2>&1 &
holder=$!
for _ in $(seq 600); do
    [ -s "$work/serve.json" ] && break
    kill -0 "$holder" 2>/dev/null || { cat "$work/holder.log"; exit 1; }
    sleep 0.1
done
[ -s "$work/serve.json" ] || { echo "the holder did not start" >&2; exit 1; }
port=$(sed -n 's/.*"endpoint": *"tcp:\/\/[^"]*:\([0-9]*\)".*/\1/p' "$work/serve.json")

declare -A got
for i in $(seq "$runs"); do
    for mode in replica restore; do
        flag=
        [ "$mode" = restore ] && flag=--restore
        out=$(ip netns exec "$pns" "$bin/bramble-bench-transfer" --pull \
            "$work/serve.json" --connect "tcp://10.231.0.1:$port" --dir "$work" $flag)
        mbit=$(sed -n 's/.*Mbit\/s \([0-9.]*\).*/\1/p' <<<"$out")
        mbs=$(sed -n 's/.*MB\/s \([0-9.]*\).*/\1/p' <<<"$out")
        secs=$(sed -n 's/.*seconds \([0-9.]*\).*/\1/p' <<<"$out")
        [ -n "$mbit" ] || { echo "$out" >&2; exit 1; }
        got[$mode]="${got[$mode]:-} $mbit"
        share=$(awk -v b="$mbit" -v r="$rate" 'BEGIN { print 100 * b / r }')
        printf '%-7s run %d: %6s s  %5s MB/s  %4s Mbit/s  %5.1f%% of the link' \
            "$mode" "$i" "$secs" "$mbs" "$mbit" "$share"
        echo "   (load $(cut -d' ' -f1-3 /proc/loadavg))"
    done
done
for mode in replica restore; do
    # shellcheck disable=SC2086
    printf '%s\n' ${got[$mode]} | sort -n | awk -v m="$mode" -v r="$rate" '
        { v[NR] = $1 }
        END { med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%-7s %d runs: %s-%s Mbit/s, median %s (%.1f%% of the link)\n",
                     m, NR, v[1], v[NR], med, 100 * med / r }'
done
ip netns exec "$hns" tc -s qdisc show dev "${tag}a" | sed -n '1,3p'
