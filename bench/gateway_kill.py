#!/usr/bin/env python3
"""gateway_kill.py BIN [ROUNDS] [SECONDS] - a replica killed under 32 concurrent
clients, side by side in one run through Debian's haproxy (the nearest equivalent:
balance leastconn, retry-on conn-failure empty-response 503, retries 2, option
redispatch, and a health check every second, `check inter 1s fall 1 rise 1`) and
through bramble-gateway, in front of the same service of two fake OpenAI replicas
(tests/integration/fake_openai.py) that a local cluster (`bramble up`) runs.

In each round, for each proxy in turn: 32 clients (4 processes of 8 threads, each
on its own kept-alive connection) send chat requests for SECONDS (default 4); one
second in, one replica's process is killed (SIGKILL). Counted: the requests
answered 200 and those that failed (another status, or no answer), and what
reached the dead replica after the kill: requests cut (in flight on it, or sent on
a connection kept to it: haproxy's response errors for that server, the gateway's
"taken out" lines for its port that are not connection failures) and new
connections tried to it (haproxy's connection errors, the gateway's lines that
say it could not connect): each was retried on the other replica. For the gateway,
also how many of those were sent after the kill: its line says when the try began
(a try begun before, in flight or its connect waiting in the replica's listen
queue, is cut by the death, not routed to a dead replica). bramble restarts the
killed replica; the next turn waits for both replicas to answer again. Installs
haproxy when it is missing (Debian)."""

import csv
import http.client
import io
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

from benchnet import wait  # noqa: E402 (beside this file)
from gateway import FAKE, answers, listener_pid, one  # noqa: E402 (its chat request too)
from localcluster import LocalCluster  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 4.0


def clients(port, until, out):
    """8 threads sending requests on kept-alive connections until `until`."""
    def loop():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        ok = bad = 0
        while time.time() < until:
            try:
                if one(conn) == 200:
                    ok += 1
                else:
                    bad += 1
            except (OSError, http.client.HTTPException):
                bad += 1
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        out.put((ok, bad))
    ts = [threading.Thread(target=loop) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def under_fire(port, kill_port):
    """32 clients on port for SECONDS, the replica on kill_port killed 1 s in:
    (answered, failed, when it was killed: unix seconds)."""
    q = multiprocessing.Queue()
    until = time.time() + SECONDS
    ps = [multiprocessing.Process(target=clients, args=(port, until, q)) for _ in range(4)]
    for p in ps:
        p.start()
    time.sleep(1.0)
    victim = listener_pid(kill_port)
    killed = time.time()
    os.kill(victim, signal.SIGKILL)
    for p in ps:
        p.join()
    res = [q.get() for _ in range(32)]
    return sum(r[0] for r in res), sum(r[1] for r in res), killed


def began_after(line, killed):
    """Whether the gateway's line says its try began after `killed` (unix seconds):
    "(the try began HH:MM:SS.mmm UTC)", within the same day."""
    m = re.search(r"the try began (\d\d):(\d\d):(\d\d)\.(\d{3}) UTC", line)
    if not m:
        return True  # (not said: counted as after)
    h, mi, sec, ms = (int(g) for g in m.groups())
    t = time.gmtime(killed)
    day = killed - (t.tm_hour * 3600 + t.tm_min * 60 + t.tm_sec) - (killed % 1)
    return day + h * 3600 + mi * 60 + sec + ms / 1000 >= killed


def hap_stat(sock_path, server):
    """haproxy's counters for backend server `server`: {column: value}."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    s.sendall(b"show stat\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
    return next(r for r in rows if r["pxname"] == "b" and r["svname"] == server)


def main():
    if not shutil.which("haproxy"):
        subprocess.run(["apt-get", "install", "-y", "-q", "haproxy"], check=True,
                       capture_output=True)
    lc = LocalCluster(BIN, "bramble-gwkill-")
    gw_log = os.path.join(lc.dir, "gateway.log")
    hap = None
    try:
        lc.submit(f"name: llm\nkind: service\ncommand: /usr/bin/python3 {FAKE} --model m\n"
                  "resources: {cpus: 0}\nservice:\n  replicas: 2\n  model: m\n"
                  "  public: true\n  health: {http: /health, interval: 1s}\n")

        def two_replicas():
            eps = json.loads(lc.run("endpoints", "llm", "--json").stdout)
            return eps if len(eps) == 2 and all(answers(e["port"]) for e in eps) else None

        for rnd in range(1, ROUNDS + 1):
            for name in ("haproxy", "gateway"):
                eps = wait(two_replicas, 60, "2 replicas answering")
                wait(lambda: answers(lc.gw_port), 30, "the gateway to route")
                victim = eps[0]
                if name == "haproxy":
                    port = 20000 + os.getpid() % 20000
                    cfg = os.path.join(lc.tmp, "haproxy.cfg")
                    sock = os.path.join(lc.tmp, "haproxy.sock")
                    with open(cfg, "w") as f:
                        f.write(f"global\n  maxconn 4096\n  stats socket {sock} level admin\n"
                                "defaults\n  mode http\n  timeout connect 5s\n"
                                "  timeout client 60s\n  timeout server 600s\n  retries 2\n"
                                "  option redispatch\n"
                                "  retry-on conn-failure empty-response 503\n"
                                f"frontend f\n  bind 127.0.0.1:{port}\n  default_backend b\n"
                                "backend b\n  balance leastconn\n  http-reuse always\n" +
                                "".join(f"  server r{e['replica']} {e['host']}:{e['port']} "
                                        "check inter 1s fall 1 rise 1\n" for e in eps))
                    hap = subprocess.Popen(["haproxy", "-f", cfg], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL,
                                           start_new_session=True)  # (as gateway.py)
                    wait(lambda: answers(port), 30, "haproxy")
                    server = f"r{victim['replica']}"
                    before = hap_stat(sock, server)
                    ok, bad, _ = under_fire(port, victim["port"])
                    sent_after = None  # (haproxy does not say)
                    after = hap_stat(sock, server)
                    d = {k: int(after[k] or 0) - int(before[k] or 0)
                         for k in ("econ", "eresp", "wretr")}
                    tried = (d["eresp"], d["econ"])
                    hap.terminate()
                    hap.wait(10)
                    hap = None
                else:
                    mark = os.path.getsize(gw_log)
                    ok, bad, killed = under_fire(lc.gw_port, victim["port"])
                    with open(gw_log, errors="replace") as f:
                        f.seek(mark)
                        lines = [ln for ln in f
                                 if f":{victim['port']}) failed" in ln and "taken out" in ln]
                    conn = sum("ouldn't connect" in ln or "onnection refused" in ln
                               for ln in lines)
                    tried = (len(lines) - conn, conn)
                    sent_after = sum(began_after(ln, killed) for ln in lines)
                print(f"round {rnd} {name:8} answered {ok:6}  failed {bad:3}  dead replica: "
                      f"{tried[0]} requests cut (in flight, or on a kept connection), "
                      f"{tried[1]} connections tried after"
                      + (f"; of them {sent_after} sent after the kill"
                         if sent_after is not None else ""),
                      flush=True)
    finally:
        if hap:
            hap.terminate()
        lc.down()


if __name__ == "__main__":
    main()
