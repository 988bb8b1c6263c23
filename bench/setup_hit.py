#!/usr/bin/env python3
"""setup_hit.py BIN [N] - what a setup found built (a cache hit) adds to a job's start,
side by side in one run on a local cluster (`bramble up --agents 1`), loopback only.

Two specs whose command first prints the time (`date +%s%N`): one bare, one with a
`setup:` that the first job of it builds (not counted). Then N (default 20) of each,
alternating, one at a time: the start is from just before `bramble submit` to the
time the command printed; p50 and p90 of each, and what the hit adds. The setup
itself is instant, so the difference is what the node does for a hit: finding the
environment by its key, and BRAMBLE_ENV_DIR.
"""
import os
import sys
import time

from benchnet import wait  # noqa: E402 (beside this file)
from localcluster import LocalCluster  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
N = int(sys.argv[2]) if len(sys.argv) > 2 else 20

BARE = "name: bare-{i}\nresources: {{cpus: 0}}\ncommand: date +%s%N\n"
SETUP = ("name: hit-{i}\nresources: {{cpus: 0}}\n"
         "setup: echo built > \"$BRAMBLE_ENV_DIR/made\"\n"
         "command: date +%s%N; cat \"$BRAMBLE_ENV_DIR/made\"\n")


def start_ms(lc, text):
    """ms from submit to the command's first line."""
    t0 = time.time_ns()
    job = lc.submit(text)
    wait(lambda: lc.run("job", "show", str(job), "--json").stdout.count('"completed"') > 0,
         60, f"job {job} to complete")
    out = lc.run("logs", str(job)).stdout.split()
    first = next(w for w in out if w.isdigit())  # (a setup that ran printed first)
    return (int(first) - t0) / 1e6, out, job


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def main():
    lc = LocalCluster(BIN, "bramble-setupbench-", agents=1)
    try:
        _, out, first = start_ms(lc, SETUP.format(i="first"))  # builds it
        assert out[-1] == "built", out
        assert "[setup] done" in lc.run("logs", str(first)).stdout
        bare, hit = [], []
        for i in range(N):
            bare.append(start_ms(lc, BARE.format(i=i))[0])
            ms, out, job = start_ms(lc, SETUP.format(i=i))
            assert out[-1] == "built", out
            assert "[setup]" not in lc.run("logs", str(job)).stdout  # a hit runs nothing
            hit.append(ms)
    finally:
        lc.down()
    print(f"start of a job, {N} each, alternating (ms from submit to its first line)")
    print(f"{'':24} {'p50':>8} {'p90':>8}")
    print(f"{'bare':24} {pct(bare, .5):8.1f} {pct(bare, .9):8.1f}")
    print(f"{'setup found built':24} {pct(hit, .5):8.1f} {pct(hit, .9):8.1f}")
    print(f"{'added by the hit':24} {pct(hit, .5) - pct(bare, .5):+8.1f} "
          f"{pct(hit, .9) - pct(bare, .9):+8.1f}")


if __name__ == "__main__":
    main()
