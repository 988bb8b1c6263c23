#!/usr/bin/env python3
"""shell_forward.py BIN [MB] [KEYS] - what `bramble forward` and `bramble shell` cost,
side by side in one run against direct access, on a local cluster (`bramble up
--agents 1`), loopback only:

  * forward throughput: a job serves MB (default 512) megabytes on a TCP port of its
    node (a Python sender, the same for both); the bench reads them directly from
    that port and through `bramble forward JOB 0:PORT`, three times each, and
    reports MB/s and the ratio;
  * keystroke round trip: one byte written to `bramble shell JOB -- cat` and read
    back, KEYS (default 1000) times, against the same through a local `cat` on
    pipes; p50 and p99 of each, and what the shell adds.
"""
import os
import select
import socket
import subprocess
import sys
import time

from benchnet import wait  # noqa: E402 (beside this file)
from localcluster import LocalCluster  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
MB = int(sys.argv[2]) if len(sys.argv) > 2 else 512
KEYS = int(sys.argv[3]) if len(sys.argv) > 3 else 1000

SENDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tcp_sender.py")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def read_all(port):
    """MB/s reading everything a connection to port sends."""
    c = socket.create_connection(("127.0.0.1", port), timeout=60)
    t0 = time.perf_counter()
    got = 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        got += len(b)
    dt = time.perf_counter() - t0
    c.close()
    assert got == MB << 20, f"read {got} bytes, not {MB << 20}"
    return got / dt / 1e6


def round_trips(argv, env, n):
    """p50 and p99 (ms) of one byte written to argv's stdin and read from its stdout."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                         bufsize=0)
    times = []
    try:
        for i in range(n + 20):
            t0 = time.perf_counter()
            p.stdin.write(b"x")
            r, _, _ = select.select([p.stdout], [], [], 30)
            assert r, "no echo within 30 s"
            assert p.stdout.read(1) == b"x"
            if i >= 20:  # the first ones: connections made
                times.append(time.perf_counter() - t0)
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    times.sort()
    return times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000


def main():
    lc = LocalCluster(BIN, "bramble-fwdbench-", agents=1)
    fwd = None
    try:
        port = free_port()
        job = lc.submit(f"name: sender\ncommand: /usr/bin/python3 {SENDER} {port} {MB}\n")
        wait(lambda: listening(port), 60, "the sender job to listen")
        fwd = subprocess.Popen([os.path.join(BIN, "bramble"), "forward", str(job), f"0:{port}"],
                               stdout=subprocess.PIPE, env=lc.env, text=True)
        line = fwd.stdout.readline()
        local = int(line.split()[1].rsplit(":", 1)[1])
        print(f"forward throughput, {MB} MB each (MB/s):")
        for rnd in range(3):
            d = read_all(port)
            t = read_all(local)
            print(f"  round {rnd + 1}: direct {d:8.0f}  forward {t:8.0f}  ({t / d:.2f}x)")
        cat = lc.submit("name: cat\ncommand: sleep 600\n")
        wait(lambda: "running" in lc.run("job", "show", str(cat)).stdout, 60, "cat job running")
        d50, d99 = round_trips(["cat"], lc.env, KEYS)
        s50, s99 = round_trips([os.path.join(BIN, "bramble"), "shell", str(cat), "--", "cat"],
                               lc.env, KEYS)
        print(f"keystroke round trip, {KEYS} of them (ms):")
        print(f"  local cat      p50 {d50:.3f}  p99 {d99:.3f}")
        print(f"  bramble shell  p50 {s50:.3f}  p99 {s99:.3f}  added p50 {s50 - d50:+.3f} "
              f"p99 {s99 - d99:+.3f}")
    finally:
        if fwd:
            fwd.terminate()
            fwd.wait(timeout=10)
        lc.down()


if __name__ == "__main__":
    main()
