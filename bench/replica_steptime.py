#!/usr/bin/python3
"""replica_steptime.py - what copying checkpoints to another node costs a job.

Starts a local cluster of 2 agents with no shared disk: each agent runs in a mount
namespace of its own, where a directory of its own is bind-mounted at the job's
checkpoint.dir (as tests/integration/test_replica_restore.py does), so a replica
is a real pull over CURVE into the other node's replica store. Then runs
bench/steptime_job.py (fixed CPU work per step, a checkpoint of --mib MiB every
--every steps) with `checkpoint: {replicas: 0}` and with `replicas: 1`, in turn,
--rounds times each (the order alternating). Prints per run the median and mean
step time, the save time, the copies the coordinator reported, the CPU time
brambled and each agent used, the load average and the step time by seconds
since the last save; then the slowdown of replicas: 1 next to replicas: 0, in
all and for the steps in a copy's window against the others of their run.
Needs root (unshare --mount). Usage:
  bench/replica_steptime.py [--bin build-rel/bin] [--rounds 3] [--steps 220]
      [--every 50] [--work 2000000] [--mib 128] [--files 4]
      [--replica-bandwidth RATE]   (the agents' cap on what they send)
docs/benchmarks.md keeps the figures.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = "BRAMBLE_STEPTIME_BENCH"  # in the environment of all it starts


class Cluster:
    def __init__(self, bin_dir, work, extra):
        self.bin, self.work, self.extra = bin_dir, work, extra
        self.cred = os.path.join(work, "c", "admin.credential")
        self.mark = uuid.uuid4().hex
        self.env = dict(os.environ, HOME=work, **{MARK: self.mark})
        self.procs = []

    def cli(self, *args, check=True):
        r = subprocess.run([os.path.join(self.bin, "bramble"), "--credential",
                            self.cred, *map(str, args)], env=self.env,
                           capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise SystemExit("bramble %s: %s" % (" ".join(map(str, args)),
                                                 r.stderr.strip()))
        return r.stdout

    def spawn(self, name, argv):
        log = open(os.path.join(self.work, name + ".log"), "w")
        p = subprocess.Popen(argv, env=self.env, stdout=log, stderr=log,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def start(self, ckpt):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        data = os.path.join(self.work, "c")
        subprocess.run([os.path.join(self.bin, "brambled"), "init", "--data-dir", data,
                        "--listen", "tcp://127.0.0.1:%d" % port], env=self.env,
                       check=True, stdout=subprocess.DEVNULL)
        self.spawn("brambled", [os.path.join(self.bin, "brambled"), "--data-dir", data])
        wait(lambda: self.cli("nodes", "--json", check=False), "the coordinator")
        tok = self.cli("token", "create", "--uses", 2).strip()
        for n in ("node-1", "node-2"):
            disk = os.path.join(self.work, "disk-" + n)
            os.mkdir(disk)
            # a mount namespace of its own, its own disk at ckpt; jobs inherit it
            self.spawn(n, ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", disk,
                           ckpt,
                           os.path.join(self.bin, "bramble-agent"), "--data-dir",
                           os.path.join(self.work, n), "--join", tok, "--name", n,
                           "--probe-port", "0", "--replica-port", "0",
                           "--allow-root-jobs", *self.extra])
        wait(lambda: sum(x["state"] == "ready" for x in
                         json.loads(self.cli("nodes", "--json"))) == 2, "2 ready nodes")

    def stop(self):
        for p in reversed(self.procs):  # agents, then the coordinator
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        tag = ("%s=%s" % (MARK, self.mark)).encode()
        for pid in filter(str.isdigit, os.listdir("/proc")):  # jobs left behind
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    if tag in f.read().split(b"\0"):
                        os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


def cpu_seconds(pid):
    """The CPU time process pid has used so far (user and system, all threads)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def wait(pred, what, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise SystemExit("timed out waiting for " + what)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def one_run(c, a, ckpt, replicas, i):
    out = os.path.join(c.work, "steps-%d.txt" % i)
    spec = os.path.join(c.work, "job-%d.yaml" % i)
    with open(spec, "w") as f:
        f.write("""name: steptime-r%d
command: /usr/bin/python3 %s/bench/steptime_job.py --steps %d --every %d --work %d \
--mib %d --files %d --out %s
workdir: %s
checkpoint:
  dir: %s/job-%d
  pattern: "checkpoint-*"
  complete_file: trainer_state.json
  replicas: %d
""" % (replicas, ROOT, a.steps, a.every, a.work, a.mib, a.files, out, c.work, ckpt, i,
            replicas))
    cpu0 = [cpu_seconds(p.pid) for p in c.procs]
    jid = c.cli("submit", spec).strip()
    t0 = time.time()
    j = wait(lambda: (lambda j: j if j["state"] in ("completed", "failed", "cancelled")
                      else None)(json.loads(c.cli("job", "show", jid, "--json"))),
             "job %s to end" % jid, timeout=3600)
    wall = time.time() - t0
    if j["state"] != "completed":
        print(c.cli("logs", jid, check=False)[-2000:], file=sys.stderr)
        raise SystemExit("job %s %s" % (jid, j["state"]))

    def copies_settled():  # each copy begun has ended, well or not
        j = json.loads(c.cli("job", "show", jid, "--json"))
        ev = [e["reason"] or "" for e in j["events"] if e["state"] == "replica"]
        begun = sum("is being copied" in r for r in ev)
        done = [r for r in ev if "replicated on" in r or " failed on " in r]
        return [j["events"]] if len(done) >= begun else None
    events = wait(copies_settled, "the copies of job %s" % jid, timeout=600)[0]
    cpu = [cpu_seconds(p.pid) - t for p, t in zip(c.procs, cpu0)]
    ev = [e["reason"] or "" for e in events if e["state"] == "replica"]
    steps, saves = [], {}  # (start, seconds); step: (end, seconds)
    with open(out) as f:
        for ln in f:
            k, n, t, d = ln.split()
            if k == "step":
                steps.append((float(t), float(d)))
            else:
                saves[int(n)] = (float(t) + float(d), float(d))
    # when each copy ended, counted from the end of its checkpoint's save
    ends = []
    for e in events:
        m = re.search(r"\(step (\d+)[,)]", e["reason"] or "")
        if e["state"] == "replica" and m and int(m.group(1)) in saves and (
                "replicated on" in e["reason"] or " failed on " in e["reason"]):
            ends.append(e["time"] - saves[int(m.group(1))][0])
    rep = [r for r in ev if "replicated on" in r]
    secs = [float(m.group(1)) for m in (re.search(r" in ([\d.]+) s", r) for r in rep)
            if m]
    for n in ("node-1", "node-2"):  # free the disks for the next run
        shutil.rmtree(os.path.join(c.work, "disk-" + n, "job-%d" % i),
                      ignore_errors=True)
    durs = [d for _, d in steps]
    return {"replicas": replicas, "median": statistics.median(durs),
            "mean": statistics.mean(durs),
            "save": statistics.median(d for _, d in saves.values()),
            "steps": steps, "saves": [e for e, _ in saves.values()], "ends": ends,
            "wall": wall, "copies": len(rep), "checkpoints": len(saves),
            "failed": sum(" failed on " in r for r in ev), "cpu": cpu,
            "copy_s": statistics.median(secs) if secs else 0.0, "load": loadavg()}


def by_second(x):
    """The median step time by whole seconds since the end of the last save
    ("-" before the first, "7+" from 7 s on), with how many steps each."""
    bins = {}
    for t, d in x["steps"]:
        past = [t - e for e in x["saves"] if t >= e]
        bins.setdefault(min(int(min(past)), 7) if past else -1, []).append(d)
    return " ".join("%s:%.3f(%d)" % ("-" if k < 0 else "7+" if k == 7 else k,
                                     statistics.median(v), len(v))
                    for k, v in sorted(bins.items()))


def near_saves(x, w):
    """The steps that start within w seconds of the end of a save (while the copy
    runs): (the median of the other steps, the median of these, the seconds these
    took beyond that other median, per checkpoint)."""
    near = lambda t: any(0 <= t - e <= w for e in x["saves"])
    close = [d for t, d in x["steps"] if near(t)]
    rest = [d for t, d in x["steps"] if not near(t)]
    q = statistics.median(rest)
    return (q, statistics.median(close) if close else q,
            sum(d - q for d in close) / max(1, len(x["saves"])))


def main():
    ap = argparse.ArgumentParser(description="step time while checkpoints replicate")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build-rel", "bin"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=220)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--work", type=int, default=2000000)
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--replica-bandwidth")
    a = ap.parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # clean up on these too
        signal.signal(sig, lambda *_: sys.exit(1))
    work = tempfile.mkdtemp(prefix="bramble-steptime-")
    ckpt = os.path.join(work, "ckpt")  # the same path on both nodes, two disks
    os.mkdir(ckpt)
    extra = ["--replica-bandwidth", a.replica_bandwidth] if a.replica_bandwidth else []
    c = Cluster(os.path.abspath(a.bin), work, extra)
    cap = ", --replica-bandwidth " + a.replica_bandwidth if a.replica_bandwidth else ""
    print("machine: %d cores; load %s; %d steps of %d rounds, a checkpoint of %d MiB "
          "in %d files every %d steps%s" % (os.cpu_count(), loadavg(), a.steps, a.work,
                                           a.mib, a.files, a.every, cap), flush=True)
    res = {0: [], 1: []}
    try:
        c.start(ckpt)
        i = 0
        for r in range(a.rounds):
            for replicas in ((0, 1) if r % 2 == 0 else (1, 0)):
                i += 1
                x = one_run(c, a, ckpt, replicas, i)
                res[replicas].append(x)
                print("replicas %d: step median %.4f s, mean %.4f s; save %.3f s; "
                      "%d/%d checkpoints copied (median %.1f s each), %d copies "
                      "failed; job %.1f s; load %s; CPU s of brambled %.1f, "
                      "node-1 %.1f, node-2 %.1f"
                      % (replicas, x["median"], x["mean"], x["save"], x["copies"],
                         x["checkpoints"], x["copy_s"], x["failed"], x["wall"],
                         x["load"], *x["cpu"]), flush=True)
                print("  step time by seconds since a save: " + by_second(x),
                      flush=True)
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)
    m0 = statistics.median(x["median"] for x in res[0])
    m1 = statistics.median(x["median"] for x in res[1])
    a0 = statistics.median(x["mean"] for x in res[0])
    a1 = statistics.median(x["mean"] for x in res[1])
    print("replicas 0: median step %.4f s, mean %.4f s (medians of %d runs)"
          % (m0, a0, len(res[0])))
    print("replicas 1: median step %.4f s, mean %.4f s (medians of %d runs)"
          % (m1, a1, len(res[1])))
    print("slowdown: median step %+.1f%%, mean step %+.1f%%"
          % (100 * (m1 / m0 - 1), 100 * (a1 / a0 - 1)))
    # The load of others drifts from run to run; within a run it hits the steps
    # near a save and the others alike. So: the steps within w seconds of a save
    # (the copy's window; with replicas: 0 the writer's own hashing and write-back
    # run then too) next to the other steps of the same run.
    ends = [e for x in res[1] for e in x["ends"]]
    w = statistics.median(ends) if ends else 0.0
    print("a copy ends a median %.2f s after its save; the steps within that of a "
          "save, next to the other steps of their run:" % w)
    excess = {0: [], 1: []}
    for r in (0, 1):
        for x in res[r]:
            q, n, e = near_saves(x, w)
            excess[r].append(e)
            print("  replicas %d: others %.4f s, near a save %.4f s (%+.1f%%), "
                  "%.3f s lost per checkpoint" % (r, q, n, 100 * (n / q - 1), e))
    q = statistics.median(near_saves(x, w)[0] for r in (0, 1) for x in res[r])
    e0, e1 = statistics.median(excess[0]), statistics.median(excess[1])
    every = a.every * q
    print("the copy's cost: %.3f s per checkpoint (%.3f s lost with replicas 1, %.3f s "
          "with 0), %.1f%% of %d steps (%.1f s)" % (e1 - e0, e1, e0,
                                                  100 * (e1 - e0) / every, a.every,
                                                  every))


if __name__ == "__main__":
    main()
