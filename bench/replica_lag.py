#!/usr/bin/python3
"""replica_lag.py - how far a checkpoint's copy on another node lags behind it.

Starts a local cluster of 2 agents with no shared disk (each in a mount namespace
of its own, as bench/replica_steptime.py does), runs bench/steptime_job.py with
`checkpoint: {replicas: 1}` and measures, for every counted checkpoint, the lag
from the coordinator counting it (its event "is being copied to") to its copy
being complete and verified (its event "replicated on"), and how many were left
out because a newer one was queued first ("skipped on"). One run with small
checkpoints saved often (--small-every steps, --small-kib KiB), one with large ones
(--large-every, --large-mib). With --baseline DIR (the bin/ dir of another build),
each run is made with both builds in turn, so the two are measured side by side in
one run of this script. Needs root (unshare --mount). Usage:
  bench/replica_lag.py [--bin build-rel/bin] [--baseline OLD/bin] [--rounds 1]
docs/benchmarks.md keeps the figures.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_steptime import ROOT, Cluster, wait  # noqa: E402


def lags(events):
    """{step: lag in seconds} of the copies made, and the steps skipped."""
    begun, done, skipped = {}, {}, set()
    for e in events:
        r = e["reason"] or ""
        m = re.search(r"\(step (\d+)[,)]", r)
        if e["state"] != "replica" or not m:
            continue
        step = int(m.group(1))
        if "is being copied to" in r:
            begun.setdefault(step, e["time"])
        elif "replicated on" in r:
            done.setdefault(step, e["time"])
        elif "skipped on" in r:
            skipped.add(step)
    return {s: done[s] - begun[s] for s in done if s in begun}, skipped, len(begun)


def one_run(c, kind, every, steps, work, kib, i):
    out = os.path.join(c.work, "steps-%d.txt" % i)
    spec = os.path.join(c.work, "job-%d.yaml" % i)
    with open(spec, "w") as f:
        f.write("""name: lag-%s-%d
command: /usr/bin/python3 %s/bench/steptime_job.py --steps %d --every %d --work %d \
--kib %d --files 1 --out %s
workdir: %s
checkpoint:
  dir: %s/job-%d
  pattern: "checkpoint-*"
  complete_file: trainer_state.json
  replicas: 1
""" % (kind, i, ROOT, steps, every, work, kib, out, c.work, c.ckpt, i))
    jid = c.cli("submit", spec).strip()

    def ended():
        j = json.loads(c.cli("job", "show", jid, "--json"))
        return j if j["state"] in ("completed", "failed", "cancelled") else None
    j = wait(ended, "job %s to end" % jid, timeout=3600)
    if j["state"] != "completed":
        raise SystemExit("job %s %s: %s" % (jid, j["state"], j.get("reason")))

    def settled():
        j = json.loads(c.cli("job", "show", jid, "--json"))
        lag, skipped, begun = lags(j["events"])
        failed = sum(" failed on " in (e["reason"] or "") for e in j["events"])
        return (lag, skipped, begun) if len(lag) + len(skipped) + failed >= begun else None
    lag, skipped, begun = wait(settled, "the copies of job %s" % jid, timeout=600)
    for n in ("node-1", "node-2"):
        shutil.rmtree(os.path.join(c.work, "disk-" + n, "job-%d" % i), ignore_errors=True)
    v = sorted(lag.values())
    return {"counted": begun, "copied": len(v), "skipped": len(skipped),
            "median": statistics.median(v) if v else float("nan"),
            "max": v[-1] if v else float("nan")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build-rel", "bin"))
    ap.add_argument("--baseline", help="bin/ of another build, measured alongside")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--small-every", type=int, default=5)
    ap.add_argument("--small-kib", type=int, default=4)
    ap.add_argument("--large-every", type=int, default=40)
    ap.add_argument("--large-mib", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--work", type=int, default=1000000)  # about 0.1 s a step
    a = ap.parse_args()
    builds = [("this", a.bin)] + ([("baseline", a.baseline)] if a.baseline else [])
    runs = [("small", a.small_every, a.small_kib), ("large", a.large_every,
                                                    a.large_mib * 1024)]
    results = {}
    i = 0
    for r in range(a.rounds):
        order = builds if r % 2 == 0 else builds[::-1]
        for name, bin_dir in order:
            work = tempfile.mkdtemp(prefix="bramble-lag-")
            c = Cluster(bin_dir, work, [])
            c.ckpt = os.path.join(work, "ckpt")
            os.mkdir(c.ckpt)
            try:
                c.start(c.ckpt)
                time.sleep(2)  # the coordinator's start-up grace
                for kind, every, kib in runs:
                    i += 1
                    res = one_run(c, kind, every, a.steps, a.work, kib, i)
                    results.setdefault((name, kind), []).append(res)
                    print("%-8s %-5s counted %3d copied %3d skipped %3d lag median %.3f s "
                          "max %.3f s" % (name, kind, res["counted"], res["copied"],
                                          res["skipped"], res["median"], res["max"]),
                          flush=True)
            finally:
                c.stop()
                shutil.rmtree(work, ignore_errors=True)
    print()
    for kind, _, _ in runs:
        med = {n: statistics.median(x["median"] for x in results[(n, kind)])
               for n, _ in builds}
        mx = {n: max(x["max"] for x in results[(n, kind)]) for n, _ in builds}
        line = "%s: this build's lag median %.3f s, max %.3f s" % (kind, med["this"],
                                                                  mx["this"])
        if a.baseline:
            line += "; baseline %.3f s, max %.3f s; ratio %.2f" % (
                med["baseline"], mx["baseline"], med["this"] / med["baseline"])
        print(line)


if __name__ == "__main__":
    main()
