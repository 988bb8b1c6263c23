"""The attack suite: each test plays an attacker (another key, process or uid)
against a real coordinator and real agents, and checks that the cluster holds.
The node-side attacks (job socket, uids, environment) and the fencing attacks
(noisy jobs, a crashed or paused agent) are in test_attacks_node.py and
test_attacks_fence.py."""

import json
import time

import zmq

from conftest import header, proc_state, read_yaml_flat, wait_for


def _user(c, name):
    """A user credential (path) and its keys."""
    cred = c.root / f"{name}.credential"
    c.cli("user", "add", name, "--out", str(cred))
    y = read_yaml_flat(cred)
    return cred, y["public_key"], y["secret_key"], y["server_public_key"]


def _admin_ping_time(c):
    t = time.monotonic()
    c.cli_json("nodes")
    return time.monotonic() - t


def test_flood_that_never_reads_cannot_stall_the_coordinator(make_cluster):
    """A user that sends requests as fast as it can and never reads the replies
    (its queue fills) must not block the coordinator: admin requests answer,
    agents are heard, no job is frozen, and SIGTERM still stops it."""
    c = make_cluster(heartbeat="200ms", node_timeout="2s")
    c.add_agents(1)
    jid = c.submit("name: steady\ncommand: sleep 1000\n")
    c.wait_job(jid, "running")
    _, pub, sec, server = _user(c, "mallory")
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, 1)       # reads nothing, and lets little pile up here
    s.setsockopt(zmq.RCVBUF, 4096)
    s.setsockopt(zmq.SNDHWM, 100000)
    s.curve_serverkey, s.curve_publickey, s.curve_secretkey = (
        server.encode(), pub.encode(), sec.encode())
    s.connect(c.endpoint)
    body = json.dumps({"all": True}).encode()
    try:
        sent = 0
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            try:
                s.send_multipart([header("job.list", sent + 1), body], zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                time.sleep(0.001)
            if sent % 2000 == 0:
                assert _admin_ping_time(c) < 2.0
        assert sent > 5000, sent
        # the coordinator dropped what mallory would not read, and says so
        admin = c.raw_client()
        try:
            wait_for(lambda: admin.request("ping", timeout=2)[1].get("sends_dropped", 0) > 0,
                     what="the coordinator to count dropped replies")
        finally:
            admin.close()
        assert _admin_ping_time(c) < 2.0
        j = c.job(jid)
        assert j["state"] == "running" and j["attempt"] == 1, j
        for pid in c.job_procs(jid):
            assert proc_state(pid) != "T", f"job process {pid} was frozen"
        assert c.nodes()["node-1"]["state"] == "ready"
        assert "dropped" in c.coordinator.output()
    finally:
        s.close(0)
        ctx.term()
    c.coordinator.expected_exit = True
    c.coordinator.send_signal(15)
    assert c.coordinator.wait_exit() == 0
