#!/usr/bin/env bash
# code.sh - what code that travels with a job costs (docs/files.md), on a local
# cluster of 2 agents (bramble up) with a Release build. Prints the figures;
# docs/benchmarks.md keeps them.
#   bench/code.sh [BUILD_DIR]   (default: build)
# 1. packing a warm tree of 10,000 small files: a push of a tree the store holds
#    already (walk, ignore rules, hash, the manifest's listing, nothing else sent),
#    beside `git ls-files` + `git hash-object` of the same tree, the way git itself
#    would list and hash it;
# 2. a resubmit after one 1 MB file of a 20 MB tree changed: the bytes sent, and the
#    time from `bramble submit` to the job running (loopback);
# 3. the start of a job whose code the node caches, against one with no code:
#    submitted to running, as the coordinator's timestamps say, medians of 15.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$(cd "$build/bin" && pwd)
work=$(mktemp -d)
export HOME=$work/home
mkdir -p "$HOME"
trap '"$bin/bramble" down --dir "$work/cluster" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
B="$bin/bramble"
"$B" up --agents 2 --dir "$work/cluster" >/dev/null
echo "machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -m)"
median() { sort -n | awk '{ d[NR] = $1 } END { print d[int((NR + 1) / 2)] }'; }
secs() { awk -v s="$1" -v e="$2" 'BEGIN { printf "%.3f\n", e - s }'; }

# 1. 10,000 small files (1-4 KiB) in 100 dirs, in a git work tree
tree=$work/small
mkdir -p "$tree"
python3 - "$tree" <<'EOF'
import os, sys
root = sys.argv[1]
for d in range(100):
    os.makedirs(f"{root}/d{d:03}", exist_ok=True)
    for f in range(100):
        with open(f"{root}/d{d:03}/f{f:03}.py", "wb") as fh:
            fh.write(os.urandom(1024 + (d * 100 + f) % 3072))
EOF
git -C "$tree" init -q && git -C "$tree" add -A && git -C "$tree" -c user.name=b -c user.email=b@b commit -qm t
"$B" data push "$tree" small >/dev/null 2>&1 # the first: everything sent
pack=() gitt=()
for i in 1 2 3 4 5; do
    s=$EPOCHREALTIME
    "$B" data push "$tree" small --json >/dev/null
    e=$EPOCHREALTIME
    pack+=("$(secs "$s" "$e")")
    s=$EPOCHREALTIME
    (cd "$tree" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 git hash-object >/dev/null)
    e=$EPOCHREALTIME
    gitt+=("$(secs "$s" "$e")")
done
echo "1. warm push of 10,000 small files (nothing to send): $(printf '%s\n' "${pack[@]}" | median) s" \
     "(runs: ${pack[*]}); git ls-files + hash-object: $(printf '%s\n' "${gitt[@]}" | median) s"

# 2. one 1 MB file changed in a 20 MB tree
proj=$work/proj
mkdir -p "$proj"
for i in $(seq 1 20); do head -c 1000000 /dev/urandom >"$proj/w$i.bin"; done
printf 'name: big\ncode: .\ncommand: "true"\nresources: {nodelist: [node-1]}\n' >"$proj/job.yaml"
"$B" submit "$proj/job.yaml" --wait >/dev/null 2>&1
head -c 1000000 /dev/urandom >"$proj/w7.bin"
s=$EPOCHREALTIME
out=$("$B" submit "$proj/job.yaml" 2>"$work/err")
id=$out
until [ "$("$B" job show "$id" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')" != pending ] &&
      "$B" job show "$id" --json | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["started"] is None)'; do
    sleep 0.01
done
e=$EPOCHREALTIME
echo "2. after one 1 MB file changed: $(grep -o 'sent .*' "$work/err"), submit to running $(secs "$s" "$e") s"
"$B" job show "$id" | grep -o 'its code fetched.*' || true

# 3. a cached code's start against no code, on node-1
printf 'name: plain\ncommand: "true"\nresources: {nodelist: [node-1]}\n' >"$work/plain.yaml"
mkdir -p "$work/small-code"
cp "$tree/d000/f000.py" "$work/small-code/"
printf 'name: coded\ncode: .\ncommand: "true"\nresources: {nodelist: [node-1]}\n' >"$work/small-code/job.yaml"
"$B" submit "$work/small-code/job.yaml" --wait >/dev/null 2>&1 # cached from now on
start_ms() { "$B" job show "$1" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(round((j["started"] - j["submitted"]) * 1000, 1))'; }
plain=() coded=()
for i in $(seq 1 15); do
    a=$("$B" submit "$work/plain.yaml" --wait)
    plain+=("$(start_ms "$a")")
    b=$("$B" submit "$work/small-code/job.yaml" --wait 2>/dev/null)
    coded+=("$(start_ms "$b")")
done
echo "3. submitted to running, median of 15: no code $(printf '%s\n' "${plain[@]}" | median) ms," \
     "cached code $(printf '%s\n' "${coded[@]}" | median) ms"
