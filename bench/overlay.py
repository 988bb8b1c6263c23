#!/usr/bin/env python3
"""overlay.py BIN [RATE] [MIB] - what the overlay (docs/overlay.md) costs, side by
side in one run: two nodes, each in a network namespace of its own joined to the
host by a veth whose namespace end sends at most RATE (tbf, default 1gbit), the
host forwarding between them, the coordinator on the host. Each agent runs the
overlay with --overlay userspace (wireguard-go; the kernel's where asked with
--kernel and the kernel has it).

Measured:
  * join to usable: from starting the second node's agent (joined already once)
    to the first TCP connection from the first node to its overlay address;
  * throughput, one TCP stream of MIB (default 512) MiB, node 1 -> node 2: over
    the raw link (their own addresses) and over the overlay, alternating, three
    times each: the medians, and the overlay's as a percentage of the raw link's;
  * round trip: 2000 one-byte TCP ping-pongs (TCP_NODELAY) each way: p50 and p90,
    raw and overlay, and what the overlay adds.
  * a relayed pair: a third node that node 1 may not reach directly (each drops
    the UDP it would send the other) and a fourth started with --relay: throughput
    and round trip from node 1 to the third over the overlay, through the relay.
Needs root and iptables."""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchnet import Uplink, stop_all, wait  # noqa: E402 (beside this file)

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
BIN = os.path.abspath(ARGS[0] if ARGS else "build/bin")
RATE = ARGS[1] if len(ARGS) > 1 else "1gbit"
MIB = int(ARGS[2]) if len(ARGS) > 2 else 512
MODE = "kernel" if "--kernel" in sys.argv else "userspace"
PY = "/usr/bin/python3"

RECV = r'''
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(4)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    mode = c.recv(1)
    if mode == b"t":      # throughput: read to the end, say how long it took
        n, t0 = 0, None
        while True:
            b = c.recv(1 << 20)
            if not b:
                break
            if t0 is None:
                t0 = time.monotonic()
            n += len(b)
        print(f"{n} {time.monotonic() - t0}", flush=True)
    elif mode == b"p":    # ping-pong: echo each byte
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            b = c.recv(1)
            if not b:
                break
            c.sendall(b)
    c.close()
'''

SEND = r'''
import socket, sys, time
host, port, what, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
c = socket.create_connection((host, port), timeout=30)
if what == "t":
    c.sendall(b"t")
    block = b"\0" * (1 << 20)
    for _ in range(n):
        c.sendall(block)
    c.shutdown(socket.SHUT_WR)
    c.recv(1)
else:
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.sendall(b"p")
    out = []
    for _ in range(n):
        t = time.perf_counter()
        c.sendall(b"x")
        c.recv(1)
        out.append((time.perf_counter() - t) * 1000)
    print(" ".join(f"{x:.4f}" for x in out))
c.close()
'''


def sh(*argv, check=True):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=check)


class Node(Uplink):
    """A namespace joined to the host by a veth pair; its end shaped to RATE, its
    default route through the host."""

    def __init__(self, i, tmp):
        super().__init__(RATE, subnet=f"10.252.{200 + i}", burst="1mb", latency="50ms",
                         route=True)
        self.ip = self.ns_ip
        self.run = f"{tmp}/wg-{i}"
        os.makedirs(self.run)

    def wrap(self):
        return ["ip", "netns", "exec", self.ns, "unshare", "--mount", "--propagation",
                "private", "sh", "-c",
                f"mkdir -p /run/wireguard && mount --bind {self.run} /run/wireguard && "
                "exec \"$@\"", "sh"]


def main():
    if os.geteuid() != 0 or not shutil.which("wireguard-go"):
        print("overlay.py: needs root and wireguard-go; skipped")
        return
    tmp = tempfile.mkdtemp(prefix="bramble-bench-overlay-", dir="/var/tmp")
    forward = open("/proc/sys/net/ipv4/ip_forward").read().strip()
    nodes, procs = [], []
    env = dict(os.environ, BRAMBLE_CREDENTIAL=f"{tmp}/coord/admin.credential")

    def cli(*args):
        return subprocess.run([f"{BIN}/bramble", *map(str, args)], capture_output=True,
                              text=True, env=env, check=True, timeout=60).stdout

    def agent(i, n, join, *extra):  # (its log in tmp)
        log = open(f"{tmp}/agent-{i}.log", "a")
        argv = n.wrap() + [f"{BIN}/bramble-agent", "--data-dir", f"{tmp}/a{i}", "--overlay",
                           MODE, "--allow-root-jobs", *extra]
        if join:
            argv += ["--join", cli("token", "create").strip(), "--name", f"node-{i}"]
        p = subprocess.Popen(argv, stdout=log, stderr=log)
        procs.append(p)
        return p

    def in_ns(n, script, *args, **kw):
        return subprocess.Popen(["ip", "netns", "exec", n.ns, PY, "-c", script, *map(str, args)],
                                stdout=subprocess.PIPE, text=True, **kw)

    def overlay_of(name):
        return next(x for x in json.loads(cli("nodes", "--json")) if x["name"] == name).get(
            "overlay", {})

    try:
        open("/proc/sys/net/ipv4/ip_forward", "w").write("1")
        nodes = [Node(1, tmp), Node(2, tmp), Node(3, tmp), Node(4, tmp)]
        for a, b in ((nodes[0], nodes[2]), (nodes[2], nodes[0])):  # no direct path 1-3
            sh("ip", "netns", "exec", a.ns, "iptables", "-A", "OUTPUT", "-p", "udp", "-d",
               b.ip, "-j", "DROP")
        subprocess.run([f"{BIN}/brambled", "init", "--data-dir", f"{tmp}/coord", "--listen",
                        "tcp://0.0.0.0:7711", "--advertise", f"tcp://{nodes[0].host_ip}:7711"],
                       check=True, capture_output=True)
        procs.append(subprocess.Popen([f"{BIN}/brambled", "--data-dir", f"{tmp}/coord"],
                                      stdout=open(f"{tmp}/coord.log", "w"),
                                      stderr=subprocess.STDOUT))
        wait(lambda: subprocess.run([f"{BIN}/bramble", "nodes"], env=env,
                                    capture_output=True).returncode == 0, 30, "the coordinator")
        agent(1, nodes[0], True)
        a2 = agent(2, nodes[1], True)
        agent(3, nodes[2], True)
        agent(4, nodes[3], True, "--relay")
        wait(lambda: all(overlay_of(f"node-{i}").get("address") for i in range(1, 5)),
             60, "the nodes' overlay addresses")
        ov2, ov3 = overlay_of("node-2")["address"], overlay_of("node-3")["address"]
        recv = in_ns(nodes[1], RECV, 5201)
        recv.stdout.readline()
        recv3 = in_ns(nodes[2], RECV, 5201)
        recv3.stdout.readline()

        def connects(addr):
            return subprocess.run(["ip", "netns", "exec", nodes[0].ns, PY, "-c",
                                   "import socket,sys; socket.create_connection((sys.argv[1], "
                                   "5201), timeout=0.5).close()", addr],
                                  capture_output=True).returncode == 0

        wait(lambda: connects(ov2), 60, "the overlay to carry")

        # join to usable: node-2's agent started again, its interface made anew
        a2.send_signal(signal.SIGTERM)
        a2.wait(30)
        wait(lambda: not connects(ov2), 30, "node-2's overlay to go")
        t0 = time.monotonic()
        agent(2, nodes[1], False)
        wait(lambda: connects(ov2), 60, "node-2's overlay to come back")
        join_s = time.monotonic() - t0

        def throughput(addr, at=None):
            s = in_ns(nodes[0], SEND, addr, 5201, "t", MIB)
            s.wait(600)
            n, secs = (at or recv).stdout.readline().split()
            return int(n) * 8 / float(secs) / 1e6  # Mbit/s

        wait(lambda: connects(ov3), 60, "node 1 to reach node 3 through the relay")
        relayed_pairs = [p for p in json.loads(cli("probe", "--json"))["overlay"]["pairs"]
                         if p["path"] == "relayed"]
        raw, over, relayed = [], [], []
        for _ in range(3):
            raw.append(throughput(nodes[1].ip))
            over.append(throughput(ov2))
            relayed.append(throughput(ov3, recv3))

        def rtts(addr):
            s = in_ns(nodes[0], SEND, addr, 5201, "p", 2000)
            out, _ = s.communicate(timeout=600)
            v = sorted(float(x) for x in out.split())
            return v[len(v) // 2], v[int(len(v) * 0.9)]

        rr, ro, rl = rtts(nodes[1].ip), rtts(ov2), rtts(ov3)
        print(f"overlay ({MODE}) between four namespaces, each link shaped to {RATE} "
              f"(tbf), the host forwarding")
        print(f"join to usable (node-2's agent started again -> first TCP connection "
              f"over the overlay): {join_s:.2f} s")
        print(f"throughput, one TCP stream of {MIB} MiB, 3 each, alternating (Mbit/s):")
        print(f"  raw link  {' '.join(f'{x:.0f}' for x in raw)}  median "
              f"{statistics.median(raw):.0f}")
        print(f"  overlay   {' '.join(f'{x:.0f}' for x in over)}  median "
              f"{statistics.median(over):.0f} = "
              f"{100 * statistics.median(over) / statistics.median(raw):.0f}% of the raw link")
        print(f"  relayed   {' '.join(f'{x:.0f}' for x in relayed)}  median "
              f"{statistics.median(relayed):.0f} = "
              f"{100 * statistics.median(relayed) / statistics.median(raw):.0f}% of the raw "
              f"link (node 1 -> node 3 through node 4; pairs relayed: "
              f"{', '.join(p['a'] + '-' + p['b'] + ' via ' + p.get('via', '?') for p in relayed_pairs)})")
        print(f"round trip, 2000 one-byte TCP ping-pongs (ms): raw p50 {rr[0]:.3f} p90 "
              f"{rr[1]:.3f}; overlay p50 {ro[0]:.3f} p90 {ro[1]:.3f}; added p50 "
              f"{ro[0] - rr[0]:+.3f}; relayed p50 {rl[0]:.3f} p90 {rl[1]:.3f}, added p50 "
              f"{rl[0] - rr[0]:+.3f}")
        recv.kill()
        recv3.kill()
    finally:
        stop_all(procs, 15)
        for n in nodes:
            n.remove()
        open("/proc/sys/net/ipv4/ip_forward", "w").write(forward)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
