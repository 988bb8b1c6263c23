"""The network map and gang placement by it.

Agents probe each other over UDP and report round trips with their heartbeats;
`bramble probe --json` shows the matrix; a gang goes to the nodes closest
together and never mixes sites while a set within one site fits.

The far node's distance is real: it lives in its own network namespace and
advertises the address of a relay that holds every datagram for DELAY seconds
each way before passing it on, so what the other agents measure to it is the
relay's delay on the path (the kernel here has no netem for `tc`).
"""

import heapq
import json
import re
import os
import socket
import threading
import time

import pytest

from conftest import wait_for
from netlan import free_prefix, veth_ns

DELAY = 0.020  # each way: the far node is >= 40 ms away
GANG = """
name: {name}
command: echo "rank $NODE_RANK on $BRAMBLE_NODE_NAME"
resources: {{nodes: {nodes}{extra}}}
"""


class DelayRelay(threading.Thread):
    """UDP relay: what arrives on (listen, port) goes to (target, port) after delay,
    and the answers go back to their sender after delay too."""

    def __init__(self, listen, target, port, delay):
        super().__init__(daemon=True)
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind((listen, port))
        self.target = (target, port)
        self.delay = delay
        self.backs = {}  # client address -> socket towards the target
        self.queue = []  # (due, seq, sock, data, addr)
        self.seq = 0
        self.halt = threading.Event()

    def later(self, sock, data, addr):
        self.seq += 1
        heapq.heappush(self.queue, (time.monotonic() + self.delay, self.seq, sock, data, addr))

    def run(self):
        import select
        while not self.halt.is_set():
            socks = [self.front] + list(self.backs.values())
            wait = 0.05
            if self.queue:
                wait = max(0.0, min(wait, self.queue[0][0] - time.monotonic()))
            ready, _, _ = select.select(socks, [], [], wait)
            for s in ready:
                data, addr = s.recvfrom(2048)
                if s is self.front:
                    back = self.backs.get(addr)
                    if back is None:
                        back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                        back.bind((self.front.getsockname()[0], 0))
                        self.backs[addr] = back
                    self.later(back, data, self.target)
                else:
                    client = next(a for a, b in self.backs.items() if b is s)
                    self.later(self.front, data, client)
            now = time.monotonic()
            while self.queue and self.queue[0][0] <= now:
                _, _, sock, data, addr = heapq.heappop(self.queue)
                sock.sendto(data, addr)

    def stop(self):
        self.halt.set()
        self.join(5)
        for s in [self.front] + list(self.backs.values()):
            s.close()


@pytest.fixture
def far_ns(request):
    """A namespace joined to the host by a veth pair: host 10.N.M.1/24 (and the
    relay's 10.N.M.9), namespace 10.N.M.2/24. Yields (ns, host_ip, ns_ip, relay_ip)."""
    net = free_prefix(200, 249)
    v = veth_ns(request, [f"{net}.1/24", f"{net}.9/24"], [f"{net}.2/24"], prefix="brp",
                what="the far node")
    yield v.ns, f"{net}.1", f"{net}.2", f"{net}.9"


def probe(c):
    return c.cli_json("probe")


def matrix_of(c):
    m = probe(c)
    return {a: dict(zip(m["nodes"], row)) for a, row in zip(m["nodes"], m["rtt_ms"])}


def full(c, names):
    """The matrix once every node has measured every other one."""
    def ready():
        m = probe(c)
        assert sorted(m["nodes"]) == sorted(names), m
        rows = dict(zip(m["nodes"], m["rtt_ms"]))
        for a in names:
            for b, v in zip(m["nodes"], rows[a]):
                assert isinstance(v, (int, float)), f"{a} -> {b} not measured: {m}"
        assert all(isinstance(v, (int, float)) for v in m["coordinator_ms"]), m
        return m
    return wait_for(ready, what="a full round-trip matrix")


SITE_RTT_MS = 10.0  # coordinator/core/netmap.h BR_SITE_RTT_MS: a pair farther apart is two sites


def near(c, names):
    """The full matrix once every pair is measured nearer than two sites are
    taken to be apart, so that only the nodes' site labels set them apart (a
    loaded machine can hold a loopback round trip past it for a while)."""
    def ready():
        m = full(c, names)
        far = [(a, b, v) for a, row in zip(m["nodes"], m["rtt_ms"])
               for b, v in zip(m["nodes"], row) if v >= SITE_RTT_MS]
        assert not far, f"pairs measured as far apart as two sites: {far}"
        return m
    return wait_for(ready, what="every pair measured near")


def gang(c, name, nodes, extra=""):
    return c.submit(GANG.format(name=name, nodes=nodes, extra=extra))


def test_probe_matrix_for_three_nodes(cluster):
    names = cluster.add_agents(3)
    m = full(cluster, names)
    assert m["nodes"] == sorted(names)
    for i, row in enumerate(m["rtt_ms"]):
        assert row[i] == 0
        for j, v in enumerate(row):
            if i != j:  # loopback: well under a millisecond or so, never zero
                assert 0 < v < 50, m
    text = cluster.cli("probe")[1]
    for n in names:
        assert n in text
    assert "COORDINATOR" in text


def test_gang_placed_by_measured_latency(far_ns, make_cluster):
    ns, host_ip, ns_ip, relay_ip = far_ns
    c = make_cluster(host=host_ip)
    tok = c.token(uses=3)
    c.start_agent("a", token=tok)
    c.start_agent("b", token=tok)
    # "c" answers probes on 7703 inside its namespace; the others reach it only
    # through the relay, which it advertises as its address
    relay = DelayRelay(relay_ip, ns_ip, 7703, DELAY)
    relay.start()
    try:
        c.start_agent("c", token=tok, wrap=["ip", "netns", "exec", ns],
                      extra=["--advertise-addr", relay_ip, "--probe-port", "7703"])
        c.wait_ready("a", "b", "c")
        full(c, ["a", "b", "c"])
        # the far node is measured as far by the others, the near ones as near
        m = wait_for(lambda: (lambda x: x if x["a"]["c"] >= 2 * DELAY * 1000 and
                              x["b"]["c"] >= 2 * DELAY * 1000 else None)(matrix_of(c)),
                     what="a and b to measure c through the relay")
        assert m["a"]["b"] < 2 * DELAY * 1000 / 4, m
        print("matrix:", json.dumps(m))

        # a gang of 2 goes to the close pair, and says why
        jid = gang(c, "near", 2)
        j = c.wait_job(jid, "completed")
        assert j["nodes"] == ["a", "b"], j
        assert "max rtt" in j["placement"] and "c not chosen: rtt" in j["placement"], j
        shown = c.cli("job", "show", str(jid))[1]
        assert "c not chosen" in shown, shown

        # when only a set across the far link fits, it is used, and says so
        c.cli("node", "drain", "b")
        wait_for(lambda: c.nodes()["b"]["state"] == "draining", what="b draining")
        jid = gang(c, "across", 2)
        j = c.wait_job(jid, "completed")
        assert sorted(j["nodes"]) == ["a", "c"], j
        assert "across sites" in j["placement"], j
    finally:
        relay.stop()


def test_gang_keeps_to_one_site_unless_spread_any(cluster):
    tok = cluster.token(uses=3)
    for name, site in (("a", "home"), ("b", "cloud"), ("c", "home")):
        cluster.start_agent(name, token=tok, extra=["--label", f"site={site}"])
    cluster.wait_ready("a", "b", "c")
    near(cluster, ["a", "b", "c"])
    jid = gang(cluster, "one-site", 2)
    j = cluster.wait_job(jid, "completed")
    assert j["nodes"] == ["a", "c"], j
    assert "b not chosen: site cloud" in j["placement"], j

    # spread: any lets sites mix: with c drained only a and b fit, and that is used
    # both with and without it (no single-site set fits); with a 3-gang all mix
    jid = gang(cluster, "any-site", 3, extra=", spread: any")
    j = cluster.wait_job(jid, "completed")
    assert sorted(j["nodes"]) == ["a", "b", "c"], j


def test_nodelist_pins_a_job_to_named_nodes(cluster):
    cluster.add_agents(3)
    jid = gang(cluster, "pinned", 2, extra=", nodelist: [node-3, node-1]")
    j = cluster.wait_job(jid, "completed")
    assert sorted(j["nodes"]) == ["node-1", "node-3"], j
    jid = cluster.submit("name: one\ncommand: 'true'\nresources: {nodelist: node-2}\n")
    assert cluster.wait_job(jid, "completed")["nodes"] == ["node-2"]
    # a named node that cannot take it: the job waits, naming only its own nodes
    cluster.cli("node", "drain", "node-2")
    jid = cluster.submit("name: wait\ncommand: 'true'\nresources: {nodelist: [node-2]}\n")
    j = wait_for(lambda: (lambda x: x if "node-2 is draining" in (x.get("reason") or "")
                          else None)(cluster.job(jid)), what="the pinned job to wait")
    assert j["state"] == "pending" and "node-1" not in j["reason"], j


def test_probe_nccl_runs_a_gang_over_the_gpus(cluster):
    probe_bin = cluster.bin("bramble-nccl-probe")
    if not os.path.exists(probe_bin):
        pytest.skip("bramble-nccl-probe was not built (no CUDA toolkit with NCCL)")
    tok = cluster.token(uses=3)
    for name in ("g1", "g2"):
        cluster.start_agent(name, token=tok, extra=["--gpus", "X:24GiB,X:24GiB"])
    cluster.start_agent("cpu", token=tok)
    cluster.wait_ready("g1", "g2", "cpu")
    rc, out, err = cluster.cli("probe", "--nccl", "g1,cpu", check=False)
    assert rc == 1 and "node cpu has no GPUs" in err, (rc, err)
    rc, out, err = cluster.cli("probe", "--nccl", "g1,g2", "--command", probe_bin,
                               "--max-bytes", "1M", "--json", check=False)
    jobs = [j for j in cluster.cli_json("jobs", "--all") if j["name"].startswith("probe-")]
    assert len(jobs) == 1 and sorted(jobs[0]["nodes"]) == ["g1", "g2"], jobs
    spec = cluster.job(jobs[0]["id"])["spec"]["resources"]
    assert spec["tasks_per_node"] == "gpus" and spec["gpus"] == 2, spec
    if rc == 0:  # a machine with two GPUs per node: a real measurement
        r = json.loads(out)
        assert r["result"]["result"] == "ok" and r["result"]["ranks"] == 4, r
        assert r["sizes"] and all(s["busbw_gbs"] >= 0 for s in r["sizes"]), r
    else:  # no GPU here: the ranks say so (those not stopped first), and the CLI shows it
        assert rc == 1, (rc, out, err)
        said = re.findall(r"^(\d): bramble-nccl-probe: no CUDA device visible", err, re.M)
        assert said and set(said) <= {"0", "1", "2", "3"}, err
        assert "failed: on g" in err and "exit code 2" in err, err


def test_probe_bandwidth_measures_every_pair(cluster):
    probe_bin = cluster.bin("bramble-net-probe")
    cluster.add_agents(3)
    _, out, err = cluster.cli("probe", "--bandwidth", "--bytes", "4M", "--command", probe_bin)
    assert "runs a TCP throughput test on node-1,node-2,node-3" in err, err
    lines = out.splitlines()
    assert lines[0].split() == ["FROM", "\\", "TO", "(Gbit/s)", "node-1", "node-2", "node-3"]
    for row in lines[1:4]:
        cells = row.split()
        assert cells.count(".") == 1 and all(float(c) > 0 for c in cells[1:] if c != "."), row
    r = json.loads(cluster.cli("probe", "--bandwidth", "--nodes", "node-3,node-1", "--bytes",
                               "4M", "--command", probe_bin, "--json")[1])
    assert r["result"] == "ok" and sorted(r["nodes"]) == ["node-1", "node-3"], r
    m = r["gbit_s"]
    assert m[0][0] is None and m[1][1] is None and m[0][1] > 0 and m[1][0] > 0, r
    # fewer than two nodes: nothing to measure
    rc, _, err = cluster.cli("probe", "--bandwidth", "--nodes", "node-1", check=False)
    assert rc == 1 and "at least 2" in err, err
