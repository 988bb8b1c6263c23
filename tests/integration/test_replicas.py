"""Checkpoint replicas, the agents' side (docs/checkpoints.md "Replicas"): each
agent tells the coordinator where it serves checkpoint files (node.hello's
replica_port) and how much room it has (node.heartbeat's disk), with its
--replica-* flags; a node with --replica-port off serves nothing, and its port is
closed to a key the coordinator never granted.
"""

import socket

from conftest import wait_for


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
