#!/usr/bin/env python3
"""gangs.py BIN [TRIALS] - gang and service figures on a local cluster of 3 agents
(default 1s heartbeat, 5s node timeout):

  * gang start: `bramble submit` of a 3-node gang until every rank has started
    (the job is `running`), and until it has completed (each rank runs `true`);
  * replica recovery: SIGKILL to a service replica's server until the service's
    endpoints list that replica, healthy, again (health interval 1s: the 1s
    restart backoff plus the first check);
  * probes: `bramble probe --bandwidth --bytes 64M` across the 3 agents.

Prints median and max per figure. Uses `bramble up`, so it needs nothing else."""

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
TRIALS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
SERVER = r'''
import http.server, json, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"pid": os.getpid()}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), H).serve_forever()
'''


def cli(*args, env):
    r = subprocess.run([f"{BIN}/bramble", *args], capture_output=True, text=True, env=env,
                       timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"bramble {' '.join(args)}: {r.stderr}")
    return r.stdout


def wait(pred, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.01)
    raise RuntimeError("timed out")


def summary(name, xs):
    print(f"{name}: median {statistics.median(xs):.3f}s, max {max(xs):.3f}s "
          f"({len(xs)} trials)")


def main():
    tmp = tempfile.mkdtemp(prefix="bramble-bench-gangs-")
    env = dict(os.environ, BRAMBLE_CREDENTIAL=f"{tmp}/c/coordinator/admin.credential")
    subprocess.run([f"{BIN}/bramble", "up", "--agents", "3", "--dir", f"{tmp}/c"],
                   check=True, capture_output=True, env=env)
    try:
        start, done = [], []
        for i in range(TRIALS):
            spec = f"name: g{i}\ncommand: 'true'\nresources: {{nodes: 3, cpus: 0}}\n"
            with open(f"{tmp}/g.yaml", "w") as f:
                f.write(spec)
            t0 = time.monotonic()
            jid = cli("submit", f"{tmp}/g.yaml", env=env).strip()
            ran = None
            while True:
                j = json.loads(cli("job", "show", jid, "--json", env=env))
                if ran is None and j["started"]:
                    ran = j["started"] - j["submitted"]
                if j["state"] in ("completed", "failed"):
                    break
            assert j["state"] == "completed", j
            start.append(ran)
            done.append(j["ended"] - j["submitted"])
        summary("gang of 3: submit -> every rank running (coordinator clock)", start)
        summary("gang of 3: submit -> every rank exited 0 (coordinator clock)", done)

        with open(f"{tmp}/server.py", "w") as f:
            f.write(SERVER)
        spec = (f"name: web\nkind: service\ncommand: /usr/bin/python3 {tmp}/server.py\n"
                "resources: {cpus: 0}\nservice: {replicas: 1, health: "
                "{http: /, interval: 1s, grace: 10s}}\n")
        with open(f"{tmp}/s.yaml", "w") as f:
            f.write(spec)
        cli("submit", f"{tmp}/s.yaml", env=env)

        def endpoint():
            e = json.loads(cli("endpoints", "web", "--json", env=env))
            return e[0] if e else None

        back = []
        for _ in range(TRIALS):
            e = wait(endpoint)
            with urllib.request.urlopen(f"http://{e['host']}:{e['port']}/") as r:
                pid = json.loads(r.read())["pid"]
            t0 = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            wait(lambda: (lambda x: x and x["port"] != e["port"])(endpoint()))
            back.append(time.monotonic() - t0)
            time.sleep(1.5)  # healthy for a while: the backoff starts again at 1s
        summary("service replica: SIGKILL -> healthy endpoint again", back)

        out = cli("probe", "--bandwidth", "--bytes", "64M", "--command",
                  f"{BIN}/bramble-net-probe", "--json", env=env)
        m = json.loads(out)["gbit_s"]
        vals = [v for row in m for v in row if v is not None]
        print(f"TCP throughput between agents on loopback (64 MiB per pair): "
              f"min {min(vals):.1f}, median {statistics.median(vals):.1f}, "
              f"max {max(vals):.1f} Gbit/s")
    finally:
        subprocess.run([f"{BIN}/bramble", "down", "--dir", f"{tmp}/c"], capture_output=True,
                       env=env)


if __name__ == "__main__":
    main()
