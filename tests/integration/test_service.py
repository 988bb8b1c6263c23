"""Services (kind: service): replicas placed on their own, a PORT each, health
checked by their agent, restarted with backoff when they exit or fail their check,
moved when their node is lost; `bramble endpoints` lists the healthy ones and
`bramble scale` changes how many run.

The replica is a real HTTP server (Python's standard library): GET / says which
replica, node, port and GPU it is; GET /health answers 500 while a file
`sick-<replica>` exists in its directory, 200 otherwise."""

import collections
import json
import os
import re
import signal
import socket
import time
import urllib.request

from conftest import wait_for

PYTHON = "/usr/bin/python3"
SERVER = r'''
import http.server, json, os, sys
here = sys.argv[1]
me = {"replica": int(os.environ["BRAMBLE_REPLICA"]), "node": os.environ["BRAMBLE_NODE_NAME"],
      "port": int(os.environ["PORT"]), "pid": os.getpid(),
      "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "name": os.environ["BRAMBLE_JOB_NAME"]}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        sick = os.path.exists(os.path.join(here, "sick-%d" % me["replica"]))
        code = 500 if self.path == "/health" and sick else 200
        body = json.dumps(me).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
print("serving", json.dumps(me), flush=True)
http.server.ThreadingHTTPServer(("0.0.0.0", me["port"]), H).serve_forever()
'''

SPEC = """
name: {name}
kind: service
command: {python} {script} {here}
resources: {{cpus: 0{resources}}}
service:
  replicas: {replicas}
  port: {port}
  health: {health}
"""


def service(c, tmp_path, name="web", replicas=2, resources="", port="auto",
            health="{http: /health, interval: 1s, grace: 20s}"):
    here = tmp_path / name
    here.mkdir(exist_ok=True)
    script = here / "server.py"
    script.write_text(SERVER)
    jid = c.submit(SPEC.format(name=name, python=PYTHON, script=script, here=here,
                               replicas=replicas, resources=resources, port=port,
                               health=health))
    return jid, here


def endpoints(c, name):
    return c.cli_json("endpoints", name)


def wait_endpoints(c, name, n, timeout=60, what=None):
    return wait_for(lambda: (lambda e: e if len(e) == n else None)(endpoints(c, name)),
                    timeout, what or f"{n} healthy replicas of {name}")


def get(host, port, path="/"):
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as r:
        return json.loads(r.read())


def replica_job(c, service_id, k):
    s = c.job(service_id)
    return next(r for r in s["replicas"] if r["replica"] == k)


def test_six_7gib_replicas_pack_onto_24_24_12_12_and_answer(cluster, tmp_path):
    tok = cluster.token(uses=2)
    cluster.start_agent("big", token=tok, extra=["--gpus", "RTX 4090:24GiB,RTX 3090:24GiB"])
    cluster.start_agent("small", token=tok, extra=["--gpus", "RTX 3060:12GiB,RTX 3060:12GiB"])
    cluster.wait_ready("big", "small")
    sid, _ = service(cluster, tmp_path, name="llm", replicas=6,
                     resources=", gpus: 1, vram: 7GiB")
    eps = wait_endpoints(cluster, "llm", 6)
    assert len({(e["host"], e["port"]) for e in eps}) == 6, eps
    assert sorted(e["replica"] for e in eps) == list(range(6)), eps
    sizes = {("big", "0"): 24, ("big", "1"): 24, ("small", "0"): 12, ("small", "1"): 12}
    load = collections.Counter()
    for e in eps:  # every endpoint answers HTTP, as the replica it says it is
        me = get(e["host"], e["port"])
        assert me["replica"] == e["replica"] and me["node"] == e["node"], (me, e)
        assert me["port"] == e["port"] and me["name"] == "llm", (me, e)
        assert re.fullmatch(r"\d", me["gpu"]), me  # exactly one GPU
        load[(me["node"], me["gpu"])] += 1
    for gpu, n in load.items():
        assert n * 7 <= sizes[gpu], f"GPU {gpu} over-committed: {dict(load)}"
    shown = cluster.cli("job", "show", str(sid))[1]
    assert shown.count("healthy") >= 6 and "replicas:" in shown, shown
    # the nodes list each replica among their jobs (the service itself is on none)
    on = {n["name"]: n["jobs"] for n in cluster.cli_json("nodes")}
    assert sorted(sum(on.values(), [])) == sorted(e["id"] for e in eps), on
    listed = [j for j in cluster.cli_json("jobs") if j.get("service") == sid]
    assert sorted(j["name"] for j in listed) == [f"llm.{k}" for k in range(6)], listed
    assert all(j["health"] == "healthy" and j["port"] for j in listed), listed


def test_killed_replica_is_healthy_again_after_backoff(cluster, tmp_path):
    cluster.add_agents(2)
    sid, _ = service(cluster, tmp_path, replicas=2)
    eps = wait_endpoints(cluster, "web", 2)
    victim = next(e for e in eps if e["replica"] == 0)
    pid = get(victim["host"], victim["port"])["pid"]
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)

    def back():
        now = {e["replica"]: e for e in endpoints(cluster, "web")}
        e = now.get(0)
        return e if e and e["id"] == victim["id"] and get(e["host"], e["port"])["pid"] != pid \
            else None

    e = wait_for(back, 60, "replica 0 healthy again")
    took = time.monotonic() - t0
    print(f"replica 0 healthy again {took:.2f}s after SIGKILL (interval 1s, backoff 1s)")
    j = cluster.job(victim["id"])
    assert j["attempt"] == 2, j
    reasons = [ev["reason"] for ev in j["events"]]
    # (sh -c runs the server: sh reports the kill as 128 + 9)
    assert any(("killed by signal 9" in r or "exit code 137" in r) and
               "again as attempt 2 in 1.0s" in r for r in reasons), reasons
    assert any(re.match(r"replica 0 healthy on node-\d \(port \d+\)", r) for r in reasons)
    # the service itself stays running, and both replicas answer
    assert cluster.job(sid)["state"] == "running"
    assert len(endpoints(cluster, "web")) == 2


def test_unhealthy_replica_is_restarted(cluster, tmp_path):
    cluster.add_agents(1)
    sid, here = service(cluster, tmp_path, replicas=2,
                        health="{http: /health, interval: 300ms, grace: 1s}")
    wait_endpoints(cluster, "web", 2)
    rid = replica_job(cluster, sid, 1)["id"]
    (here / "sick-1").write_text("")
    wait_for(lambda: [e for e in endpoints(cluster, "web") if e["replica"] == 1] == [],
             what="replica 1 to leave the endpoints")

    def restarted():
        j = cluster.job(rid)
        return j if j["attempt"] >= 2 else None

    j = wait_for(restarted, 60, "replica 1 to be restarted")
    why = [ev["reason"] for ev in j["events"] if ev["state"] == "pending" and ev["reason"]]
    assert any("health check failed 3 times in a row (GET /health: HTTP 500)" in r
               for r in why), why
    (here / "sick-1").unlink()
    wait_endpoints(cluster, "web", 2, what="replica 1 healthy again once it is well")
    assert [e for e in endpoints(cluster, "web") if e["replica"] == 0][0]["id"] != rid


def test_lost_node_moves_replicas_or_leaves_them_waiting(make_cluster, tmp_path):
    c = make_cluster(heartbeat="200ms", node_timeout="2s")
    tok = c.token(uses=3)
    for name in ("g1", "g2", "g3"):
        c.start_agent(name, token=tok, extra=["--gpus", "A100:24GiB"])
    c.wait_ready("g1", "g2", "g3")
    sid, _ = service(c, tmp_path, name="big", replicas=2,
                     resources=", gpus: 1, vram: 20GiB")
    eps = wait_endpoints(c, "big", 2)
    used = sorted(e["node"] for e in eps)
    spare = ({"g1", "g2", "g3"} - set(used)).pop()
    # its node lost, a replica moves to the node with room
    c.kill_node(used[0])
    eps = wait_for(lambda: (lambda e: e if sorted(x["node"] for x in e) ==
                            sorted([used[1], spare]) else None)(endpoints(c, "big")),
                   90, f"the replica on {used[0]} to be healthy on {spare}")
    moved = next(e for e in eps if e["node"] == spare)
    j = c.job(moved["id"])
    assert any("lost" in (ev["reason"] or "") and "again as attempt 2 in 0.0s" in ev["reason"]
               for ev in j["events"]), j["events"]
    # no room left: the next lost node's replica waits, saying why
    c.kill_node(spare)

    def waiting():
        r = replica_job(c, sid, moved["replica"])
        return r if r["state"] == "pending" and "VRAM to spare" in (r["reason"] or "") else None

    r = wait_for(waiting, 60, "the replica to wait for room")
    assert f"{used[1]} has 0 GPUs with 20.0GiB VRAM to spare, the job needs 1" in r["reason"], r
    assert len(endpoints(c, "big")) == 1


def test_scale_and_cancel(cluster, tmp_path):
    cluster.add_agents(2)
    sid, _ = service(cluster, tmp_path, replicas=2)
    wait_endpoints(cluster, "web", 2)
    out = cluster.cli("scale", "web", "4")[1]
    assert out.strip() == "web: 2 -> 4 replicas", out
    eps = wait_endpoints(cluster, "web", 4)
    assert sorted(e["replica"] for e in eps) == [0, 1, 2, 3]
    assert {e["node"] for e in eps} == {"node-1", "node-2"}, eps  # spread over nodes
    cluster.cli("scale", "web", "1")
    wait_endpoints(cluster, "web", 1, what="one replica left")
    assert [e["replica"] for e in endpoints(cluster, "web")] == [0]
    assert cluster.job(sid)["reason"] == "a service of 1 replica"
    # a replica is not cancelled on its own; the service is, with all of them
    rid = replica_job(cluster, sid, 0)["id"]
    rc, _, err = cluster.cli("cancel", str(rid), check=False)
    assert rc == 1 and f"job {rid} is replica 0 of service {sid}" in err, err
    rc, _, err = cluster.cli("scale", "nope", "2", check=False)
    assert rc == 1 and "no running service named 'nope'" in err, err
    cluster.cli("cancel", str(sid))
    wait_for(lambda: not cluster.task_procs(), what="every replica process gone")
    assert cluster.job(sid)["state"] == "cancelled"
    assert cluster.job(rid)["state"] == "cancelled"
    # the service's own job runs no process: nothing of it was killed
    assert cluster.job(sid)["reason"] == "cancelled by request", cluster.job(sid)
    assert cluster.job(rid)["reason"] == "cancelled by request (killed at once)"
    rc, _, err = cluster.cli("endpoints", "web", check=False)
    assert rc == 1 and "no running service named 'web'" in err, err


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fixed_port_and_tcp_health(cluster, tmp_path):
    """Both agents share this host's ports: with a fixed port, the second replica
    finds it taken on each node and waits, saying so."""
    cluster.add_agents(2)
    port = free_port()
    sid, _ = service(cluster, tmp_path, replicas=2, port=port,
                     health="{tcp: true, interval: 500ms}")
    eps = wait_endpoints(cluster, "web", 1)
    assert eps[0]["port"] == port and get("127.0.0.1", port)["port"] == port
    s = cluster.job(sid)
    waiting = [r for r in s["replicas"] if r["state"] == "pending"]
    assert len(waiting) == 1, s["replicas"]

    def told():
        j = cluster.job(waiting[0]["id"])
        texts = [ev["reason"] or "" for ev in j["events"]]
        hits = [t for t in texts if f"port {port} is in use on this node" in t]
        return hits if len(hits) >= 2 else None  # one per node it tried

    wait_for(told, 60, "the second replica to find the port taken on both nodes")
