#!/usr/bin/env python3
"""gateway_cold.py BIN [ROUNDS] [LOAD_MS] - a cold start through the gateway against
the replica's own start time, side by side in one run.

A local cluster (`bramble up --agents 1`) runs an autoscaled service (min 0, max 1,
down_after 1s) of fake OpenAI replicas (tests/integration/fake_openai.py) that take
LOAD_MS (default 2000) to load their model before they listen. In each of ROUNDS
(default 5) rounds:

  * the replica's start time: the same command started directly on a free port,
    through /bin/sh -c as a job's command is, from the spawn until its /health
    answers (polled every 5 ms);
  * the cold start: once the service is back at zero replicas, one chat request
    to the gateway, from the send until its answer (200, or the round fails).

Prints both and what the cold start adds (target: at most 1 s)."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

from benchnet import wait  # noqa: E402 (beside this file)
from localcluster import LocalCluster  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
LOAD_MS = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "..", "tests", "integration", "fake_openai.py")
CMD = ["/usr/bin/python3", FAKE, "--model", "m", "--start-delay-ms", str(LOAD_MS)]
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/health")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


def start_time():
    """Seconds from spawning the replica's command until its /health answers."""
    port = free_port()
    t0 = time.monotonic()
    p = subprocess.Popen(["/bin/sh", "-c", " ".join(CMD)], env=dict(os.environ, PORT=str(port)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        while not healthy(port):
            time.sleep(0.005)
        return time.monotonic() - t0
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # (sh and the server it started)
        p.wait()


def chat(port, timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/chat/completions", body=BODY,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = r.read()
    conn.close()
    return r.status, out


def replicas(lc, jid):
    show = json.loads(lc.run("job", "show", str(jid), "--json").stdout)
    return [r for r in show["replicas"] if r["state"] in ("pending", "starting", "running")]


def main():
    lc = LocalCluster(BIN, "bramble-coldbench-")
    gw_port = lc.gw_port
    try:
        jid = lc.submit(f"name: llm\nkind: service\ncommand: {' '.join(CMD)}\n"
                        "resources: {cpus: 0}\nservice:\n  model: m\n  public: true\n"
                        "  health: {http: /health, interval: 1s}\n"
                        "  autoscale: {min: 0, max: 1, down_after: 1s}\n")
        wait(lambda: b"\"m\"" in subprocess.run(
            ["curl", "-s", f"http://127.0.0.1:{gw_port}/v1/models"],
            capture_output=True).stdout, 30, "the gateway to list the model")
        print(f"a replica that loads for {LOAD_MS} ms; {ROUNDS} rounds")
        print("  start alone (s)  cold start through the gateway (s)  added (s)")
        added = []
        for _ in range(ROUNDS):
            wait(lambda: not replicas(lc, jid), 60, "the service to be at 0 replicas")
            alone = start_time()
            t0 = time.monotonic()
            status, body = chat(gw_port)
            cold = time.monotonic() - t0
            assert status == 200, body
            added.append(cold - alone)
            print(f"  {alone:15.3f}  {cold:34.3f}  {cold - alone:+9.3f}")
        added.sort()
        print(f"added: median {added[len(added) // 2]:+.3f} s, most {added[-1]:+.3f} s "
              f"(target: at most +1 s)")
    finally:
        lc.down()


if __name__ == "__main__":
    main()
