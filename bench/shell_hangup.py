#!/usr/bin/env python3
"""shell_hangup.py BIN [ROUNDS] [BEFORE_BIN] - how long a shell whose CLI vanished
keeps running on the node: a local cluster (`bramble up --agents 1`) runs a job,
`bramble shell JOB -- sleep N` is started, and once its `sleep` runs in the job the
CLI is killed with SIGKILL; measured is the time until that `sleep` is gone (hung
up by the agent), ROUNDS times (default 10). With BEFORE_BIN, the same with that
build first, side by side in one run. The target (docs/benchmarks.md): within a
heartbeat (1 s)."""

import os
import signal
import subprocess
import sys
import time

from benchnet import wait  # noqa: E402 (beside this file)
from localcluster import LocalCluster  # noqa: E402


def sleepers(n):
    """Pids of the processes whose command line is `sleep n`."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() == b"sleep\0%d\0" % n:
                    out.append(int(pid))
        except OSError:
            pass
    return out


def rounds(bin_dir, n):
    lc = LocalCluster(os.path.abspath(bin_dir), "bramble-hangup-")
    times = []
    try:
        jid = lc.submit("name: target\nresources: {cpus: 0}\ncommand: sleep 600\n")
        wait(lambda: lc.run("job", "show", str(jid)).stdout.find("running") >= 0, 30,
             "the job to run")
        for i in range(n):
            mark = 7000 + i
            cli = subprocess.Popen([os.path.join(lc.bin, "bramble"), "shell", str(jid), "--",
                                    "sleep", str(mark)], env=lc.env, stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait(lambda: sleepers(mark), 30, "the shell's sleep to run")
            cli.send_signal(signal.SIGKILL)
            t0 = time.monotonic()
            cli.wait()
            wait(lambda: not sleepers(mark), 30, "the shell's sleep to be hung up")
            times.append((time.monotonic() - t0) * 1000)
    finally:
        lc.down()
    times.sort()
    return times


def main():
    bin_dir = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    builds = ([("before", sys.argv[3])] if len(sys.argv) > 3 else []) + [("this", bin_dir)]
    for name, b in builds:
        t = rounds(b, n)
        print(f"{name:7} CLI killed to the remote process hung up, {n} rounds: "
              f"median {t[len(t) // 2]:.0f} ms, max {t[-1]:.0f} ms "
              f"({', '.join(f'{x:.0f}' for x in t)})", flush=True)


if __name__ == "__main__":
    main()
