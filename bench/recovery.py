#!/usr/bin/env python3
"""recovery.py - how fast a job is running again after its node is killed.

Starts a local cluster of 2 agents (bramble up) with the given heartbeat and node
timeout, then for each trial: runs examples/train_checkpoint.py, waits for its
first checkpoint, kills the node that runs it (SIGKILL to the agent and to every
process of its jobs), and measures from the kill to (a) the job running again
on the other node (the coordinator's "running" event of attempt 2) and (b) the
first training step of attempt 2 (the step's own timestamp in the job's log).
Prints the median and max of both. Usage:
  recovery.py BIN_DIR TRIALS HEARTBEAT NODE_TIMEOUT
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

BIN, TRIALS, HB, TIMEOUT = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = tempfile.mkdtemp(prefix="bramble-recovery-")
ENV = dict(os.environ, HOME=WORK)
DIR = os.path.join(WORK, "cluster")


def bramble(*args, check=True):
    r = subprocess.run([os.path.join(BIN, "bramble"), *args], env=ENV,
                       capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit("bramble %s: %s" % (" ".join(args), r.stderr.strip()))
    return r.stdout


def wait(pred, what, timeout=60, jid=None):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    if jid:
        print(bramble("job", "show", jid, check=False), file=sys.stderr)
        print(bramble("logs", jid, check=False)[-2000:], file=sys.stderr)
    raise SystemExit("timed out waiting for " + what)


def job(jid):
    return json.loads(bramble("job", "show", str(jid), "--json"))


def ready_nodes():
    return [n["name"] for n in json.loads(bramble("nodes", "--json"))
            if n["state"] == "ready" and n.get("connected", True)]


def kill_node(node):
    with open(os.path.join(DIR, node + ".pid")) as f:
        os.kill(int(f.read().strip()), signal.SIGKILL)
    tag = ("BRAMBLE_TASK=%s/" % node).encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if any(e.startswith(tag) for e in f.read().split(b"\0")):
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def restart_agent(node):
    log = open(os.path.join(DIR, node + ".log"), "a")
    p = subprocess.Popen([os.path.join(BIN, "bramble-agent"), "--data-dir",
                          os.path.join(DIR, node)], env=ENV, stdout=log, stderr=log,
                         start_new_session=True)
    with open(os.path.join(DIR, node + ".pid"), "w") as f:
        f.write(str(p.pid))


def trial(i):
    ckpt = os.path.join(WORK, "ckpt-%d" % i)
    jid = bramble("submit", os.path.join(ROOT, "examples/train-checkpoint.yaml"),
                  "--set", "name=rec-%d" % i, "--set", "workdir=" + ROOT,
                  "--set", "checkpoint.dir=" + ckpt, "--set",
                  "command=python3 examples/train_checkpoint.py --steps 100000 "
                  "--every 10 --step-time 0.05 --print-steps").strip()
    j = wait(lambda: (lambda j: j if j["state"] == "running" and j["checkpoints"]
                      else None)(job(jid)), "a checkpoint", jid=jid)
    node = j["nodes"][0]
    t0 = time.time()
    kill_node(node)
    ev = wait(lambda: next((e for e in job(jid)["events"] if e["state"] == "running"
                            and "attempt 2" in (e["reason"] or "")), None),
              "attempt 2 running")
    pat = re.compile(r"^step (\d+) t=([\d.]+)$", re.M)

    def first_new_step():
        out = subprocess.run([os.path.join(BIN, "bramble"), "logs", jid], env=ENV,
                             capture_output=True, text=True).stdout
        part = out.split("attempt 2 on", 1)
        m = pat.search(part[1]) if len(part) == 2 else None
        return float(m.group(2)) if m else None
    t_step = wait(first_new_step, "a step of attempt 2")
    bramble("cancel", jid)
    restart_agent(node)
    wait(lambda: len(ready_nodes()) == 2, "both nodes ready again")
    return ev["time"] - t0, t_step - t0


def main():
    subprocess.run([os.path.join(BIN, "bramble"), "up", "--agents", "2", "--dir", DIR,
                    "--heartbeat-interval", HB, "--node-timeout", TIMEOUT],
                   env=ENV, check=True, stdout=subprocess.DEVNULL)
    try:
        # past the coordinator's start-up grace (2 x node timeout), as in real life
        wait(lambda: len(ready_nodes()) == 2, "nodes ready")
        time.sleep(2 * float(TIMEOUT.rstrip("ms")) / (1000 if TIMEOUT.endswith("ms") else 1)
                   + 0.5)
        runs, steps = [], []
        for i in range(TRIALS):
            r, s = trial(i)
            runs.append(r)
            steps.append(s)
        print("heartbeat %s, node timeout %s, %d trials:" % (HB, TIMEOUT, TRIALS))
        print("  kill -> running again:  median %.2f s, max %.2f s"
              % (statistics.median(runs), max(runs)))
        print("  kill -> first new step: median %.2f s, max %.2f s"
              % (statistics.median(steps), max(steps)))
    finally:
        subprocess.run([os.path.join(BIN, "bramble"), "down", "--dir", DIR], env=ENV,
                       stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
