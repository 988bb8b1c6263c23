#!/usr/bin/env python3
"""shell_forward.py BIN [MB] [KEYS] - what `bramble forward` and `bramble shell` cost,
side by side in one run against direct access, on a local cluster (`bramble up
--agents 1`), loopback only:

  * forward throughput: a job serves MB (default 512) megabytes on a TCP port of its
    node (a Python sender, the same for both); the bench reads them directly from
    that port and through `bramble forward JOB 0:PORT`, three times each, and
    reports MB/s and the ratio;
  * the same bytes through `ssh -L` (OpenSSH with its default cipher, an sshd on a
    loopback port with keys made for the run): what users reach for today, and
    what encryption on both ends costs on this machine;
  * keystroke round trip: one byte written to `bramble shell JOB -- cat` and read
    back, KEYS (default 1000) times, against the same through a local `cat` on
    pipes; p50 and p99 of each, and what the shell adds.
"""
import os
import select
import shutil
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


def ssh_tunnel(tmp, port):
    """An sshd on a free loopback port and `ssh -N -L` through it to port: (local
    port, processes to stop)."""
    keys = os.path.join(tmp, "sshkeys")
    os.makedirs(keys, exist_ok=True)
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                        os.path.join(keys, name)], check=True)
    with open(os.path.join(keys, "user.pub")) as f, \
            open(os.path.join(keys, "authorized_keys"), "w") as out:
        out.write(f.read())
    sport, local = free_port(), free_port()
    cfg = os.path.join(keys, "sshd_config")
    with open(cfg, "w") as f:
        f.write(f"Port {sport}\nListenAddress 127.0.0.1\nHostKey {keys}/host\n"
                f"AuthorizedKeysFile {keys}/authorized_keys\nPidFile {keys}/sshd.pid\n"
                "UsePAM no\nStrictModes no\n")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", cfg],
                            stderr=subprocess.DEVNULL)
    wait(lambda: listening(sport), 30, "sshd to listen")
    ssh = subprocess.Popen(["ssh", "-F", "/dev/null", "-N", "-i", os.path.join(keys, "user"),
                            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                            "-L", f"127.0.0.1:{local}:127.0.0.1:{port}", "-p", str(sport),
                            f"{os.environ.get('USER', 'root')}@127.0.0.1"],
                           stdin=subprocess.DEVNULL)
    wait(lambda: listening(local), 30, "ssh -L to listen")
    return local, (ssh, sshd)


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
        tunnel, tunnel_procs = (None, ())
        if shutil.which("ssh") and os.path.exists("/usr/sbin/sshd") and os.geteuid() == 0:
            tunnel, tunnel_procs = ssh_tunnel(lc.tmp, port)
        print(f"forward throughput, {MB} MB each (MB/s):")
        for rnd in range(3):
            d = read_all(port)
            t = read_all(local)
            s = read_all(tunnel) if tunnel else 0
            print(f"  round {rnd + 1}: direct {d:8.0f}  forward {t:8.0f}  ({t / d:.2f}x)"
                  + (f"  ssh -L {s:8.0f}  ({s / d:.2f}x)" if tunnel else "  (no ssh -L: "
                     "needs root, ssh and sshd)"))
        for p in tunnel_procs:
            p.terminate()
            p.wait(timeout=10)
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
