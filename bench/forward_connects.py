#!/usr/bin/env python3
"""forward_connects.py BIN [ROUNDS] [BURST] - new connections through `bramble forward`,
in bursts, side by side in one run against direct access and `ssh -L`, on a local
cluster (`bramble up --agents 1`), loopback only.

A job runs Python's http.server (what users start; its accept queue holds 5), and
each round opens BURST (default 8) connections at once, as a browser opening a
page does, each fetching a small file: directly, through `bramble forward JOB
0:PORT`, and through `ssh -L` when sshd is at hand (needs root). ROUNDS (default
30) rounds each, alternating. Reports each path's requests that failed, and the
p50 and p99 of a request's time (connect to the whole answer, ms).
"""
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchnet import wait  # noqa: E402
from localcluster import LocalCluster  # noqa: E402
from shell_forward import free_port, listening, ssh_tunnel  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
BURST = int(sys.argv[3]) if len(sys.argv) > 3 else 8
BODY = b"hello through the forward\n"


def get(port, out, i):
    t0 = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
            c.sendall(b"GET /hello.txt HTTP/1.0\r\nHost: x\r\n\r\n")
            got = b""
            while True:
                b = c.recv(65536)
                if not b:
                    break
                got += b
        out[i] = time.perf_counter() - t0 if got.endswith(BODY) else None
    except OSError:
        out[i] = None


def burst(port):
    out = [None] * BURST
    ts = [threading.Thread(target=get, args=(port, out, i)) for i in range(BURST)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def summary(name, times):
    ok = sorted(t for t in times if t is not None)
    failed = len(times) - len(ok)
    if not ok:
        return f"  {name:14s} {failed}/{len(times)} failed"
    return (f"  {name:14s} failed {failed:3d}/{len(times)}  p50 {ok[len(ok) // 2] * 1000:7.2f}"
            f"  p99 {ok[min(len(ok) - 1, int(len(ok) * 0.99))] * 1000:7.2f}")


def stop(p):
    """SIGTERM, then SIGKILL after 10 s (an sshd was once seen to outlive SIGTERM)."""
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main():
    lc = LocalCluster(BIN, "bramble-connbench-", agents=1)
    fwd, tunnel_procs = None, ()
    try:
        port = free_port()
        www = os.path.join(lc.tmp, "www")
        os.makedirs(www)
        with open(os.path.join(www, "hello.txt"), "wb") as f:
            f.write(BODY)
        job = lc.submit(f"name: www\nworkdir: {www}\n"
                        f"command: /usr/bin/python3 -m http.server {port} --bind 127.0.0.1\n")
        wait(lambda: listening(port), 60, "the job's http.server to listen")
        fwd = subprocess.Popen([os.path.join(BIN, "bramble"), "forward", str(job), f"0:{port}"],
                               stdout=subprocess.PIPE, env=lc.env, text=True)
        local = int(fwd.stdout.readline().split()[1].rsplit(":", 1)[1])
        paths = {"direct": port, "bramble forward": local}
        if shutil.which("ssh") and os.path.exists("/usr/sbin/sshd") and os.geteuid() == 0:
            paths["ssh -L"], tunnel_procs = ssh_tunnel(lc.tmp, port)
        times = {name: [] for name in paths}
        for _ in range(ROUNDS):
            for name, p in paths.items():
                times[name] += burst(p)
        print(f"{ROUNDS} bursts of {BURST} connections to http.server (ms per request):")
        for name in paths:
            print(summary(name, times[name]))
    finally:
        for p in list(tunnel_procs) + ([fwd] if fwd else []):
            stop(p)
        lc.down()


if __name__ == "__main__":
    main()
