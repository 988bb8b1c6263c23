#!/usr/bin/env python3
"""gateway.py BIN [REQUESTS] - what bramble-gateway adds, side by side in one run
against direct access to a replica and against Debian's haproxy configured as the
nearest equivalent (balance leastconn, retry-on conn-failure, the same replicas):

  * latency on loopback: REQUESTS (default 2000) chat requests one after another
    on one kept-alive connection, to a replica directly, through haproxy and
    through the gateway; p50 and p99 of each, and what each proxy adds;
  * throughput: 64 clients at once (8 processes of 8 threads, each on its own
    kept-alive connection) for REQUESTS * 4 requests in all, through each.

The replicas are two fake OpenAI servers (tests/integration/fake_openai.py)
started as a bramble service by a local cluster (`bramble up`), whose gateway is
the one measured. haproxy runs in a session of its own, as the gateway does
(`bramble up` starts it so): with autogroup scheduling on (Debian's default), a
proxy left in the clients' session would get a share of their CPU slice rather
than one beside it, and the comparison would be of the placements. Installs
haproxy when it is missing (Debian)."""

import http.client
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time

from benchnet import wait  # noqa: E402 (beside this file)
from localcluster import LocalCluster  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "..", "tests", "integration", "fake_openai.py")
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
HDRS = {"Content-Type": "application/json"}


def one(conn):
    conn.request("POST", "/v1/chat/completions", body=BODY, headers=HDRS)
    r = conn.getresponse()
    r.read()
    return r.status


def latency(port, n):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(50):  # warm: connections made, caches filled
        one(conn)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        assert one(conn) == 200
        times.append(time.perf_counter() - t0)
    conn.close()
    times.sort()
    return times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000


def answers(port):
    """Whether a chat request through port is answered 200 (False while not yet)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        ok = one(conn) == 200
        conn.close()
        return ok
    except (OSError, http.client.HTTPException):
        return False


def worker(port, n, out):
    def loop():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        bad = 0
        for _ in range(n):
            try:
                bad += one(conn) != 200
            except (OSError, http.client.HTTPException):
                bad += 1
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        out.put(bad)
    ts = [threading.Thread(target=loop) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def cpu_s(pid):
    """The CPU seconds (user and system) process pid has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def switches(pid):
    """How often process pid was switched out while it could have run on."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split(":")[1]) for line in f
                    if line.startswith("nonvoluntary_ctxt_switches"))


def listener_pid(port):
    """The process listening on TCP port of loopback, from ss."""
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    return int(out.split("pid=")[1].split(",")[0])


def throughput(port, total):
    q = multiprocessing.Queue()
    per = total // 64
    ps = [multiprocessing.Process(target=worker, args=(port, per, q)) for _ in range(8)]
    t0 = time.perf_counter()
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    took = time.perf_counter() - t0
    bad = sum(q.get() for _ in range(64))
    return per * 64 / took, bad


def main():
    if not shutil.which("haproxy"):
        subprocess.run(["apt-get", "install", "-y", "-q", "haproxy"], check=True,
                       capture_output=True)
    lc = LocalCluster(BIN, "bramble-gwbench-")
    tmp, gw_port = lc.tmp, lc.gw_port
    hap = None
    try:
        lc.submit(f"name: llm\nkind: service\ncommand: /usr/bin/python3 {FAKE} --model m\n"
                  "resources: {cpus: 0}\nservice:\n  replicas: 2\n  model: m\n"
                  "  public: true\n  health: {http: /health, interval: 1s}\n")
        eps = wait(lambda: (lambda e: e if len(e) == 2 else None)(
            json.loads(lc.run("endpoints", "llm", "--json").stdout)), 60, "2 replicas")
        wait(lambda: answers(gw_port), 30, "the gateway to route")
        hap_port = 20000 + os.getpid() % 20000
        cfg = os.path.join(tmp, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("global\n  maxconn 4096\ndefaults\n  mode http\n  timeout connect 5s\n"
                    "  timeout client 60s\n  timeout server 600s\n  retries 2\n"
                    "  option redispatch\n  retry-on conn-failure empty-response 503\n"
                    f"frontend f\n  bind 127.0.0.1:{hap_port}\n  default_backend b\n"
                    "backend b\n  balance leastconn\n  http-reuse always\n" +
                    "".join(f"  server r{e['replica']} {e['host']}:{e['port']}\n"
                            for e in eps))
        # a session of its own, as the gateway has under `bramble up` (and a service
        # under systemd): with the kernel's autogroup scheduling, a process in the
        # clients' session is scheduled as one of them, not beside them
        hap = subprocess.Popen(["haproxy", "-f", cfg], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
        wait(lambda: answers(hap_port), 30, "haproxy")
        direct = eps[0]["port"]
        print(f"latency, {N} requests one after another (ms):")
        base = None
        for name, port in (("direct", direct), ("haproxy", hap_port), ("gateway", gw_port)):
            p50, p99 = latency(port, N)
            base = base or (p50, p99)
            print(f"  {name:8} p50 {p50:.3f}  p99 {p99:.3f}  added p50 {p50 - base[0]:+.3f} "
                  f"p99 {p99 - base[1]:+.3f}")
        print(f"throughput, 64 clients, {N * 4} requests (req/s; the proxy's own CPU time "
              "a request, user and system, and how often it was switched out while it could run):")
        for name, port in (("direct", direct), ("haproxy", hap_port), ("gateway", gw_port)):
            pid = listener_pid(port) if name != "direct" else None
            c0, s0 = (cpu_s(pid), switches(pid)) if pid else (0, 0)
            rps, bad = throughput(port, N * 4)
            cpu = (f"  {(cpu_s(pid) - c0) / (N * 4) * 1e6:.0f} us a request, switched out "
                   f"{(switches(pid) - s0) / (N * 4):.2f} times" if pid else "")
            print(f"  {name:8} {rps:8.0f}  failed {bad}{cpu}")
    finally:
        if hap:
            hap.terminate()
        lc.down()


if __name__ == "__main__":
    main()
