"""Checkpoint replicas, the agents' side (docs/checkpoints.md "Replicas"): each
agent tells the coordinator where it serves checkpoint files (node.hello's
replica_port) and how much room it has (node.heartbeat's disk), with its
--replica-* flags; a node with --replica-port off serves nothing. On ckpt.serve
and ckpt.fetch orders, real agents pull a checkpoint into a replica store and
restore it from there, and resend ckpt.stored until it is answered.
"""

import errno
import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
import zmq.utils.z85

from conftest import DEADLINE, KIND_REQUEST, KIND_RESPONSE, header, parse_header, \
    read_yaml_flat, wait_for


def node(c, name):
    return c.cli_json("node", "show", name)  # --json prints the node object


def test_agents_report_replica_port_and_disk(make_cluster):
    c = make_cluster()
    c.start_agent("node-1")
    c.start_agent("node-2", extra=["--replica-quota", "0",
                                   "--replica-bandwidth", "40MB/s"])
    c.start_agent("node-3", extra=["--replica-port", "off", "--replica-quota", "2GiB"])
    c.wait_ready("node-1", "node-2", "node-3")

    def disks():
        got = {n: node(c, n).get("disk") for n in ("node-1", "node-2", "node-3")}
        return got if all(got.values()) else None

    disk = wait_for(disks, what="disk figures in heartbeats")
    assert disk["node-1"]["replicas"]["quota"] == -1
    assert disk["node-1"]["replicas"]["free"] > 0
    assert disk["node-2"]["replicas"]["quota"] == 0  # opted out
    assert disk["node-3"]["replicas"]["quota"] == 2 << 30
    for n in ("node-1", "node-2", "node-3"):
        assert disk[n]["replicas"]["used"] == 0
        assert disk[n]["checkpoints"] == []

    port = node(c, "node-1")["replica_port"]
    assert 0 < port < 65536 and node(c, "node-2")["replica_port"] != port
    assert "replica_port" not in node(c, "node-3")
    # it listens; a stranger gets a CURVE handshake refused, not a file
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(5)
        s.sendall(b"\xff" + b"\0" * 8 + b"\x7f")  # a ZMTP greeting's signature
        assert s.recv(10)[:1] == b"\xff"
    c.assert_alive()


# ---------------------------------------------------------------------------
# Real agents on the coordinator's orders. Job life does not send ckpt.serve and
# ckpt.fetch yet, so after the agents joined, the coordinator is stopped and this
# test plays it on its endpoint with its key: it answers hellos and heartbeats and
# gives the orders (PROTOCOL.md sections 6 and 11).


def manifest(root):
    """A directory checkpoint's manifest, as docs/checkpoints.md defines it."""
    entries = []
    for dirpath, dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            assert stat.S_ISREG(st.st_mode)
            with open(full, "rb") as f:
                digest = hashlib.blake2b(f.read(), digest_size=32).hexdigest()
            entries.append({"path": rel, "size": st.st_size, "mode": st.st_mode & 0o7777,
                            "hash": digest})
    entries.sort(key=lambda e: e["path"].encode())
    h = hashlib.blake2b(digest_size=32)
    h.update(b"bramble-manifest-1\0dir\0")
    for e in entries:
        for field in (e["path"], "f", str(e["mode"]), str(e["size"]), e["hash"]):
            h.update(field.encode() + b"\0")
    return {"hash": h.hexdigest(), "root": "dir", "files": len(entries),
            "bytes": sum(e["size"] for e in entries), "entries": entries}


class FakeCoordinator:
    """A ROUTER on the coordinator's endpoint with its key, a ZAP handler that
    admits the given node keys (User-Id: the key), and a loop on the test's thread."""

    def __init__(self, endpoint, secret, nodes):
        self.ctx = zmq.Context()
        self.keys = nodes  # public key -> node name
        self.zap = self.ctx.socket(zmq.REP)
        self.zap.bind("inproc://zeromq.zap.01")
        self.stop = False
        self.zap_thread = threading.Thread(target=self.zap_loop, daemon=True)
        self.zap_thread.start()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.curve_server = True
        self.sock.curve_secretkey = secret.encode()
        self.sock.zap_domain = b"bramble"
        self.sock.bind(endpoint)
        self.routes = {}  # node -> routing id
        self.hello = {}   # node -> hello body
        self.seq = 5000

    def zap_loop(self):
        while not self.stop:
            if not self.zap.poll(100):
                continue
            f = self.zap.recv_multipart()
            key = zmq.utils.z85.encode(f[6]).decode() if len(f) > 6 else ""
            ok = key in self.keys
            self.zap.send_multipart([b"1.0", f[1], b"200" if ok else b"400", b"",
                                     key.encode() if ok else b"", b""])

    def close(self):
        self.stop = True
        self.zap_thread.join()
        self.sock.close(0)
        self.zap.close(0)
        self.ctx.term()

    def send(self, node, type_, body):
        self.seq += 1
        self.sock.send_multipart([self.routes[node], header(type_, self.seq),
                                  json.dumps(body).encode()])
        return self.seq

    def answer(self, route, h, body):
        self.sock.send_multipart([route, header(h["type"], h["seq"], kind=KIND_RESPONSE),
                                  json.dumps(body).encode()])

    def serve(self, until, timeout=DEADLINE, skip=None):
        """Answer hellos and heartbeats until until(node, h, body) returns a value
        (for a message that is not one of those); skip(node, h, body) true: that
        message gets no answer. Returns until's value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.sock.poll(100):
                continue
            frames = self.sock.recv_multipart(copy=False)
            node = self.keys.get(frames[1].get("User-Id"))
            h = parse_header(frames[1].bytes)
            body = json.loads(frames[2].bytes)
            route = frames[0].bytes
            if node is None or h is None:
                continue
            self.routes[node] = route
            if h["kind"] != KIND_REQUEST:
                got = until(node, h, body)
            elif h["type"] == "node.hello":
                self.hello[node] = body
                self.answer(route, h, {"name": node, "heartbeat_interval": 250,
                                       "node_timeout": 10000, "fence_timeout": 6000,
                                       "probe_key": "ab" * 32, "probe_interval": 5000})
                got = until(node, h, body)
            elif h["type"] == "node.heartbeat" and node not in self.hello:
                # as a restarted coordinator does: say hello first
                self.answer(route, h, {"errnum": errno.ENOTCONN,
                                       "error": "node is not connected: send node.hello"})
                got = None
            elif h["type"] == "node.heartbeat":
                self.answer(route, h, {})
                got = until(node, h, body)
            else:
                got = until(node, h, body)
                if not (skip and skip(node, h, body)):
                    self.answer(route, h, {})
            if got:
                return got
        raise AssertionError("the fake coordinator waited in vain")


def test_agents_pull_on_orders(make_cluster, tmp_path):
    c = make_cluster()
    c.add_agents(2)
    ck = tmp_path / "ckpt"
    src = ck / "checkpoint-5"
    (src / "optim").mkdir(parents=True)
    (src / "model.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 11))
    (src / "optim" / "state.pt").write_bytes(os.urandom(70000))
    (src / "trainer_state.json").write_bytes(b'{"global_step": 5}')
    m = manifest(src)

    coord = read_yaml_flat(c.data / "coordinator.yaml")
    keys = {read_yaml_flat(c.agent_dir(n) / "credential")["public_key"]: n
            for n in ("node-1", "node-2")}
    key_of = {n: k for k, n in keys.items()}
    c.coordinator.expected_exit = True
    assert c.coordinator.stop() is None
    fake = FakeCoordinator(c.endpoint, coord["secret_key"], keys)
    try:
        fake.serve(lambda n, h, b: len(fake.hello) == 2 or None)
        port = {n: fake.hello[n]["replica_port"] for n in ("node-1", "node-2")}

        # node-2 keeps a replica of node-1's checkpoint
        grant = "1.%s.node-2" % m["hash"][:16]
        fake.send("node-1", "ckpt.serve", {"grant": grant, "job": 1, "peer": "node-2",
                                           "peer_key": key_of["node-2"], "ttl": 60000,
                                           "manifest": m, "path": str(src),
                                           "dir": str(ck)})
        fake.send("node-2", "ckpt.fetch", {
            "job": 1, "step": 5, "grant": grant,
            "from": {"node": "node-1", "addr": "127.0.0.1", "port": port["node-1"],
                     "key": key_of["node-1"]},
            "manifest": m, "path": str(src)})
        seen = []

        def stored(n, h, b):
            if h["kind"] == KIND_RESPONSE and b.get("errnum"):
                raise AssertionError(f"{n} refused {h['type']}: {b['error']}")
            if h["type"] == "ckpt.stored":
                seen.append(h["seq"])
                return b if len(seen) == 2 else None

        # the first report goes unanswered: the agent sends it again
        first = fake.serve(stored, skip=lambda n, h, b: h["type"] == "ckpt.stored"
                           and len(seen) == 1)
        assert seen[0] != seen[1]
        assert "error" not in first, first
        assert first["received"] == m["bytes"] and first["deduped"] == 0
        assert first["job"] == 1 and first["hash"] == m["hash"]
        replica = c.agent_dir("node-2") / "replicas" / "1" / m["hash"] / "checkpoint-5"
        assert manifest(replica)["hash"] == m["hash"]

        # node-1 lost it: it restores the checkpoint from node-2's replica
        (src / "model.bin").write_bytes(b"torn")
        grant2 = "1.%s.node-1" % m["hash"][:16]
        fake.send("node-2", "ckpt.serve", {"grant": grant2, "job": 1, "peer": "node-1",
                                           "peer_key": key_of["node-1"], "ttl": 60000,
                                           "manifest": m, "path": str(src),
                                           "replica": True})
        fake.send("node-1", "ckpt.fetch", {
            "job": 1, "step": 5, "grant": grant2,
            "from": {"node": "node-2", "addr": "127.0.0.1", "port": port["node-2"],
                     "key": key_of["node-2"]},
            "manifest": m, "path": str(src), "restore": True, "dir": str(ck)})
        back = fake.serve(lambda n, h, b: b if h["type"] == "ckpt.stored" else None)
        assert "error" not in back, back
        assert back["restore"] is True
        assert back["received"] == 3 * 1024 * 1024 + 11  # the other files were there
        assert manifest(src)["hash"] == m["hash"]
        assert not [p for p in os.listdir(ck) if p.startswith(".bramble-pull")]
    finally:
        fake.close()
    c.assert_alive()


# ---------------------------------------------------------------------------
# Replicas of ended jobs: dropped at `bramble job purge`, or once the job ended
# longer ago than brambled's --replica-retention.

def short_training(c, ckpt, steps=20, step_time=0.1):
    repo = Path(__file__).resolve().parents[2]
    return c.cli_json("submit", repo / "examples" / "train-checkpoint.yaml",
                      "--set", f"workdir={repo}", "--set", f"checkpoint.dir={ckpt}",
                      "--set", f"command={sys.executable} examples/train_checkpoint.py "
                      f"--steps {steps} --every 5 --step-time {step_time}")["id"]


def replicated(c, jid):
    """The job, once it completed and its newest checkpoint has a verified copy on
    a node other than its writer; else None."""
    j = c.job(jid)
    cps = j.get("checkpoints") or []
    if j["state"] != "completed" or not cps:
        return None
    return j if any(not cp.get("writer") for cp in cps[-1].get("copies") or []) else None


def held(c, jid):
    """{node: job's replica dirs in its store} for the nodes that hold any."""
    out = {}
    for n in ("node-1", "node-2"):
        d = c.agent_dir(n) / "replicas" / str(jid)
        if d.exists() and os.listdir(d):
            out[n] = sorted(os.listdir(d))
    return out


def no_copies(c, jid):
    listing = c.cli_json("checkpoint", "list", jid)
    others = [cp for ck in listing for cp in ck.get("copies") or [] if not cp.get("writer")]
    return not others and not held(c, jid)


def test_ended_jobs_replicas_purged_and_expired(make_cluster, tmp_path):
    # (a short node timeout: a restarted coordinator waits twice that for the
    # nodes to come back before it drops expired replicas)
    c = make_cluster(start=False, heartbeat="200ms", node_timeout="2s")
    c.start_coordinator(extra=["--replica-retention", "0"])  # kept until purged
    c.add_agents(2)
    ckpt = tmp_path / "ckpt"

    # a job that runs: purge is refused
    jid = short_training(c, ckpt / "a", steps=40, step_time=0.1)
    rc, _, err = c.cli("job", "purge", jid, check=False)
    assert rc == 1 and "only a job that has ended can be purged" in err, err
    j = wait_for(lambda: replicated(c, jid), what=f"job {jid} to end with a replica")
    assert held(c, jid), events_of(j)

    # purged: gone from the holder's store and from the list, with an event
    _, out, _ = c.cli("job", "purge", jid)
    assert "dropped" in out, out
    wait_for(lambda: no_copies(c, jid), what=f"job {jid}'s replicas to be dropped")
    assert "the job was purged" in events_of(c.job(jid))

    # kept with retention 0 across a restart, dropped once a retention of 2s passed
    jid2 = short_training(c, ckpt / "b")
    wait_for(lambda: replicated(c, jid2), what=f"job {jid2} to end with a replica")
    assert held(c, jid2)
    c.coordinator.expected_exit = True
    assert c.coordinator.stop() is None
    c.start_coordinator(extra=["--replica-retention", "2s"])
    wait_for(lambda: no_copies(c, jid2), what=f"job {jid2}'s replicas to expire")
    assert "--replica-retention" in events_of(c.job(jid2))
    c.assert_alive()


def events_of(j):
    return "\n".join(e["reason"] or "" for e in j.get("events") or [])


def test_full_target_replaced_by_another(make_cluster, tmp_path):
    """A node whose replica store is full (a tmpfs out of inodes: its free bytes
    still look ample, so the coordinator picks it first) fails the pull with no
    room; another node pulls the copy, and nothing of the failed pull is left."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=3,mode=0700",
                    "tmpfs", str(full)], check=True)
    try:
        c = make_cluster()
        tok = c.token(uses=3)
        off = ["--probe-port", "off"]  # no round trips: the most room goes first
        c.start_agent("node-1", token=tok, extra=off + ["--label", "role=writer",
                                                         "--replica-quota", "0"])
        c.start_agent("node-2", token=tok, extra=off + ["--replica-dir", str(full)])
        c.start_agent("node-3", token=tok, extra=off + ["--replica-quota", "16MiB"])
        c.wait_ready("node-1", "node-2", "node-3")
        wait_for(lambda: all((node(c, n).get("disk") or {}).get("replicas", {}).get("free")
                             for n in ("node-2", "node-3")), what="disk figures")
        repo = Path(__file__).resolve().parents[2]
        jid = c.submit(f"name: full-target\n"
                       f"command: {sys.executable} examples/train_checkpoint.py "
                       f"--steps 20 --every 5 --step-time 0.2\n"
                       f"workdir: {repo}\n"
                       f"checkpoint:\n  dir: {tmp_path / 'ckpt'}\n"
                       f"  pattern: \"checkpoint-*\"\n  complete_file: trainer_state.json\n"
                       f"resources:\n  labels: {{role: writer}}\n")
        j = wait_for(lambda: replicated(c, jid), what=f"job {jid} to end with a replica")
        what = events_of(j)
        assert "failed on node-2" in what and "pulled again by node-3 from node-1" in what, what
        newest = j["checkpoints"][-1]
        assert {cp["node"] for cp in newest["copies"] if not cp.get("writer")} == {"node-3"}
        left = [os.path.join(d, n) for d, dirs, files in os.walk(full) for n in dirs + files]
        assert not [p for p in left if ".bramble-pull" in p or p.endswith(str(jid))], left
        c.assert_alive()
    finally:
        subprocess.run(["umount", "-l", str(full)], check=False)
