"""The overlay (docs/overlay.md): each agent makes its WireGuard key pair, keeps
the private half on the node and says the public half in its hello; the
coordinator hands each node an address of --overlay-net that stays the node's
(across the agent's and the coordinator's restarts, and a new key), refuses a key
that another node reported and a node the net has no room for, and disturbs no
other node when it does. Each agent brings up its interface (bramble0) with its
key and address, and the coordinator pushes each node its peers, so that nodes
reach each other over WireGuard; a removed node is dropped from its peers within
a heartbeat and reaches no node after.

Each agent runs in a network namespace of its own (one WireGuard interface per
namespace, as per host), on one bridge, or at two "homes" behind routers that
masquerade and accept nothing inbound, where a 2-node gloo gang runs across
them over the overlay; real wireguard-go (this kernel has no wireguard module),
`wg` and iptables."""
import json
import os
import shutil
import signal
import subprocess

import pytest

from conftest import wait_for
from netlan import PYTHON, make_lan, sh  # noqa: F401  (make_lan is a fixture)

pytestmark = pytest.mark.skipif(
    not shutil.which("wireguard-go") or not shutil.which("wg") or
    not os.path.exists("/dev/net/tun"),
    reason="needs wireguard-go, wg and /dev/net/tun (tests/run.sh installs them)")

NET = "10.77.0.0/30"  # room for two nodes


def overlay(c, name):
    return c.nodes()[name].get("overlay") or {}


@pytest.fixture
def lan_cluster(make_lan, make_cluster):
    """(cluster, lan): three namespaces n1..n3 on a bridge, the coordinator on the
    bridge's address with --overlay-net NET. (make_lan first: the LAN goes only
    after the cluster has stopped.)"""
    lan = make_lan(3)
    c = make_cluster(host=lan.host_ip, start=False)
    c.start_coordinator(extra=["--overlay-net", NET])
    return c, lan


def wrap(c, lan, role):
    """Into namespace role, and a mount namespace whose /run/wireguard (where
    wireguard-go keeps its control socket, by the interface's name) is the
    namespace's own, the same for each agent started there: as on a host of its
    own."""
    run = c.root / f"wireguard-{role}"
    os.makedirs(run, exist_ok=True)
    return lan.wrap(role) + ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             f"mkdir -p /run/wireguard && mount --bind {run} /run/wireguard"
                             " && exec \"$@\"", "sh"]


def start(c, lan, role, name, tok, *extra, join=True):
    """The agent of node name in namespace role, with the overlay in user space
    unless extra says otherwise."""
    if "--overlay" not in extra:
        extra = ("--overlay", "userspace") + extra
    if not join:
        return c.start_agent(name, join=False, wrap=wrap(c, lan, role), extra=extra)
    return c.start_agent(name, token=tok, wrap=wrap(c, lan, role), extra=extra)


def iface(lan, role):
    """The addresses of bramble0 in namespace role (empty: no such interface)."""
    r = sh("ip", "-n", lan.ns[role], "-4", "-o", "addr", "show", "dev", "bramble0",
           check=False)
    return [w for w in r.stdout.split() if "/" in w and w[0].isdigit()]


def wg(c, name, *args):
    """`wg ARGS` as node name's agent sees it (its namespaces): the result."""
    return sh("nsenter", "-t", c.agents[name].pid, "-m", "-n", "wg", *args, check=False)


def wg_peers(c, name):
    r = wg(c, name, "show", "bramble0", "peers")
    return set(r.stdout.split()) if r.returncode == 0 else None


def tcp(lan, src, dst, addr):
    """Whether a TCP connection from namespace src reaches a listener on addr in
    namespace dst (within 2 s)."""
    return tcp_ns(lan.ns[src], lan.ns[dst], addr)


def tcp_ns(src, dst, addr):
    """tcp(), between namespaces by their names."""
    listener = subprocess.Popen(
        ["ip", "netns", "exec", dst, PYTHON, "-c",
         "import socket,sys\ns=socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)\n"
         "print(s.getsockname()[1], flush=True); s.settimeout(5); s.accept()", addr],
        stdout=subprocess.PIPE, text=True)
    try:
        port = int(listener.stdout.readline())
        r = sh("ip", "netns", "exec", src, PYTHON, "-c",
               "import socket,sys; socket.create_connection((sys.argv[1], "
               "int(sys.argv[2])), timeout=2).close()", addr, port, check=False)
        return r.returncode == 0
    finally:
        listener.kill()
        listener.wait(10)


def test_nodes_get_addresses_that_stay_theirs(lan_cluster):
    c, lan = lan_cluster
    tok = c.token(uses=4)
    start(c, lan, "n1", "node-1", tok)
    c.wait_ready("node-1")
    start(c, lan, "n2", "node-2", tok)
    c.wait_ready("node-2")
    one, two = overlay(c, "node-1"), overlay(c, "node-2")
    assert (one["address"], one["mode"]) == ("10.77.0.1", "userspace"), one
    assert two["address"] == "10.77.0.2" and two["pubkey"] != one["pubkey"], two
    # the public key is the one of the private key on the node, which never left it
    key = (c.agent_dir("node-1") / "overlay.key").read_text()
    assert oct((c.agent_dir("node-1") / "overlay.key").stat().st_mode & 0o777) == "0o600"
    assert subprocess.run(["wg", "pubkey"], input=key, capture_output=True, text=True,
                          check=True).stdout.strip() == one["pubkey"]
    for f in (c.root / "coordinator").rglob("*"):
        if f.is_file():
            assert key.strip().encode() not in f.read_bytes(), f
    wait_for(lambda: iface(lan, "n1") == ["10.77.0.1/30"], what="node-1's interface")
    _, table, _ = c.cli("nodes")
    assert "OVERLAY" in table.splitlines()[0]
    assert "10.77.0.1 (userspace)" in table and "10.77.0.2 (userspace)" in table, table

    # the net is full: a third node joins and runs jobs, but gets no address (nor
    # an interface), and says why; the others keep theirs
    start(c, lan, "n3", "node-3", tok)
    c.wait_ready("node-3")
    three = overlay(c, "node-3")
    assert "address" not in three, three
    assert f"--overlay-net {NET} has no address left" in three["error"], three
    assert iface(lan, "n3") == []
    _, out, _ = c.cli("node", "show", "node-3")
    assert "overlay:" in out and "refused: --overlay-net" in out, out
    _, out, _ = c.cli("events", "--json")
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert any(e["node"] == "node-3" and "node node-3 gets no overlay address" in
               (e["reason"] or "") for e in events), events
    assert c.wait_job(c.submit("name: on-3\nresources: {cpus: 0, nodelist: [node-3]}\n"
                               "command: \"true\"\n"))["state"] == "completed"

    # node rotate-key: a new overlay key too, made on the node; the same address
    c.cli("node", "rotate-key", "node-2")
    wait_for(lambda: overlay(c, "node-2").get("pubkey") not in (None, two["pubkey"]),
             what="node-2's new overlay key")
    new = overlay(c, "node-2")
    assert new["address"] == two["address"] and "error" not in new, new
    rotated = (c.agent_dir("node-2") / "overlay.key").read_text()
    assert subprocess.run(["wg", "pubkey"], input=rotated, capture_output=True,
                          text=True, check=True).stdout.strip() == new["pubkey"]
    # (node-1's interface has node-2's new key, not the old one)
    wait_for(lambda: wg_peers(c, "node-1") == {new["pubkey"]}, what="node-1 to have the new key")

    # the agent and the coordinator started again: the same addresses and keys; an
    # agent that stops takes its interface down
    c.agents["node-1"].kill(signal.SIGTERM)
    assert iface(lan, "n1") == []
    start(c, lan, "n1", "node-1", None, join=False)
    c.wait_ready("node-1")
    # (what peers have seen of it, its endpoints, may have grown meanwhile)
    who = ("address", "pubkey", "mode", "port", "relay")
    assert {k: overlay(c, "node-1").get(k) for k in who} == {k: one.get(k) for k in who}
    c.coordinator.kill(signal.SIGKILL)
    c.start_coordinator(extra=["--overlay-net", NET])
    wait_for(lambda: all(c.nodes()[n]["state"] == "ready" for n in ("node-1", "node-2")),
             what="the nodes to say hello again")
    assert overlay(c, "node-1")["address"] == "10.77.0.1"
    assert overlay(c, "node-2")["address"] == "10.77.0.2"


def test_nodes_reach_each_other_over_it_and_a_removed_node_is_dropped(lan_cluster):
    c, lan = lan_cluster
    tok = c.token(uses=2)
    start(c, lan, "n1", "node-1", tok)
    start(c, lan, "n2", "node-2", tok)
    c.wait_ready("node-1", "node-2")
    one, two = overlay(c, "node-1"), overlay(c, "node-2")
    wait_for(lambda: wg_peers(c, "node-1") == {two["pubkey"]} and
             wg_peers(c, "node-2") == {one["pubkey"]}, what="each node to have the other")
    # over WireGuard: each reaches the other's overlay address (TCP, as a gang's)
    wait_for(lambda: tcp(lan, "n1", "n2", two["address"]), what="node-1 to reach node-2")
    assert tcp(lan, "n2", "n1", one["address"])
    r = wg(c, "node-1", "show", "bramble0", "endpoints")
    assert f"{lan.addr['n2']}:51820" in r.stdout, r.stdout  # (its address on the LAN)

    # the agent stops for the next one (SIGUSR2, as for an upgrade: its jobs go on):
    # the overlay goes on too, and the next agent takes it over as it is
    index = sh("ip", "-n", lan.ns["n1"], "-o", "link", "show", "bramble0").stdout.split(":")[0]
    assert c.agents["node-1"].kill(signal.SIGUSR2) == 0
    assert iface(lan, "n1") == [f"{one['address']}/30"]
    assert tcp(lan, "n2", "n1", one["address"])
    agent = start(c, lan, "n1", "node-1", None, join=False)
    wait_for(lambda: "connected to" in agent.output(), what="the new agent's hello")
    wait_for(lambda: "overlay" in agent.output(), what="the new agent to take the overlay")
    assert "`" not in agent.output(), agent.output()  # (no step failed)
    assert tcp(lan, "n2", "n1", one["address"]) and tcp(lan, "n1", "n2", two["address"])
    # (the same interface, not one made anew)
    assert sh("ip", "-n", lan.ns["n1"], "-o", "link", "show",
              "bramble0").stdout.split(":")[0] == index

    # removed: node-1 drops it within a heartbeat or so, and it reaches node-1 no more
    c.agents["node-2"].expected_exit = True
    c.cli("node", "remove", "node-2")
    wait_for(lambda: wg_peers(c, "node-1") == set(), what="node-1 to drop node-2")
    assert not tcp(lan, "n2", "n1", one["address"])


def test_another_nodes_key_and_bad_choices_are_refused(lan_cluster):
    c, lan = lan_cluster
    tok = c.token(uses=5)
    start(c, lan, "n1", "node-1", tok)
    c.wait_ready("node-1")
    one = overlay(c, "node-1")
    # a node whose key file is node-1's (copied, as a cloned disk would have it)
    d = c.agent_dir("copy")
    d.mkdir(parents=True)
    shutil.copy(c.agent_dir("node-1") / "overlay.key", d / "overlay.key")
    start(c, lan, "n2", "copy", tok)
    c.wait_ready("copy")
    bad = overlay(c, "copy")
    assert "address" not in bad and "reported the overlay key of node node-1" in bad["error"]
    assert overlay(c, "node-1") == one  # undisturbed
    assert iface(lan, "n2") == []

    start(c, lan, "n3", "plain", tok, "--overlay", "off")
    c.wait_ready("plain")
    ov = overlay(c, "plain")
    assert ov["mode"] is None and ov["why"] == "off (--overlay off)", ov
    assert not (c.agent_dir("plain") / "overlay.key").exists()
    _, table, _ = c.cli("nodes")
    row = next(ln for ln in table.splitlines() if ln.startswith("plain "))
    assert row.rstrip().endswith("none"), table

    # WireGuard in the kernel, asked for by name where the kernel has none
    if not os.path.exists("/sys/module/wireguard"):
        p = c.start_agent("kern", token=tok, extra=("--overlay", "kernel"))
        assert p.wait_exit() != 0
        assert "--overlay kernel: the kernel has no wireguard module" in p.output()
    # a key file that is not a key: the agent says so and does not start
    d = c.agent_dir("damaged")
    d.mkdir(parents=True)
    (d / "overlay.key").write_text("not a key\n")
    p = c.start_agent("damaged", token=tok, extra=("--overlay", "auto"))
    assert p.wait_exit() != 0
    assert "overlay.key: not a WireGuard private key" in p.output(), p.output()
    r = subprocess.run([c.bin("brambled"), "--data-dir", str(c.root / "x"), "--overlay-net",
                        "10.0.0.1/16"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "did you mean 10.0.0.0/16?" in r.stderr, r.stderr


GLOO = r'''
import os, sys
import torch, torch.distributed as dist
e = os.environ
print("ENV", e["RANK"], e["MASTER_ADDR"], e.get("BRAMBLE_OVERLAY_ADDR"),
      e.get("GLOO_SOCKET_IFNAME"), flush=True)
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("SUM", int(t.item()), flush=True)
dist.destroy_process_group()
'''


def test_a_gang_runs_over_the_overlay_when_asked(lan_cluster, tmp_path):
    """resources.network: overlay: MASTER_ADDR and BRAMBLE_OVERLAY_ADDR are the
    overlay's, gloo talks over bramble0, and a 2-node gloo gang (a plain script)
    all-reduces across it; a node without a place in the overlay takes no such
    gang, and the reason says so."""
    c, lan = lan_cluster
    tok = c.token(uses=3)
    start(c, lan, "n1", "node-1", tok)
    start(c, lan, "n2", "node-2", tok)
    start(c, lan, "n3", "node-3", tok, "--overlay", "off")
    c.wait_ready("node-1", "node-2", "node-3")
    addrs = {n: overlay(c, n).get("address") for n in ("node-1", "node-2")}
    wait_for(lambda: wg_peers(c, "node-1") and wg_peers(c, "node-2"),
             what="the nodes to have their peers")
    script = tmp_path / "gloo.py"
    script.write_text(GLOO)
    jid = c.submit(f"name: over\ncommand: {PYTHON} {script}\n"
                   "resources: {nodes: 2, cpus: 0, network: overlay, "
                   "nodelist: [node-1, node-2, node-3]}\n")
    j = c.wait_job(jid, timeout=180)
    out = c.logs(jid, stream="both")
    assert j["state"] == "completed", (j["reason"], out)
    assert set(j["nodes"]) == {"node-1", "node-2"}, j["nodes"]  # not node-3
    master = addrs[j["nodes"][0]]
    for r in range(2):
        log = c.logs(jid, "--rank", r)
        env = next(ln.split() for ln in log.splitlines() if ln.startswith("ENV "))
        assert env[1:] == [str(r), master, addrs[j["nodes"][r]], "bramble0"], env
        assert "SUM 3" in log, log

    # three ranks, one node without the overlay: it waits, saying why
    jid = c.submit(f"name: three\ncommand: {PYTHON} {script}\n"
                   "resources: {nodes: 3, cpus: 0, network: overlay}\n")
    wait_for(lambda: "node-3 has no place in the overlay (off (--overlay off))" in
             (c.job(jid)["reason"] or ""), what="the gang to say why it waits")
    c.cli("cancel", jid)


class HomeSites:
    """"Home" sites behind routers that masquerade and accept nothing inbound: for
    each site s, a router namespace whose WAN end (10.P.i.2) is joined to the host
    (10.P.i.1, which forwards between the sites and runs the coordinator) and
    whose LAN end, a bridge (192.168.7.1), joins the site's node namespaces
    (192.168.7.2, .3, ...: every site uses the same private net, as homes do). And
    a "cloud" namespace joined to the host with a reachable address, which takes
    anything."""

    def __init__(self, tag, prefix):
        self.tag, self.p = tag, prefix
        self.ns, self.links = [], []

    def _wan(self, ns, i):
        wan_h, wan_r = f"bhw{self.tag}{i}", f"bhx{self.tag}{i}"
        wan = f"{self.p}.{i}"
        sh("ip", "link", "add", wan_h, "type", "veth", "peer", "name", wan_r)
        self.links.append(wan_h)
        sh("ip", "link", "set", wan_r, "netns", ns)
        sh("ip", "addr", "add", f"{wan}.1/24", "dev", wan_h)
        sh("ip", "link", "set", wan_h, "up")
        for cmd in (["ip", "addr", "add", f"{wan}.2/24", "dev", wan_r],
                    ["ip", "link", "set", wan_r, "up"], ["ip", "link", "set", "lo", "up"],
                    ["ip", "route", "add", "default", "via", f"{wan}.1"]):
            sh("ip", "netns", "exec", ns, *cmd)
        return wan_r, f"{wan}.1", f"{wan}.2"

    def site(self, s, i, nodes=1):
        """Site s (WAN 10.P.i.0/24) with its nodes: ([node namespace...], the host's
        end of its uplink, its router's public address)."""
        r = f"brh-{self.tag}-r{s}"
        sh("ip", "netns", "add", r)
        self.ns.append(r)
        wan_r, gw, wan = self._wan(r, i)
        for cmd in (["ip", "link", "add", "lanbr", "type", "bridge"],
                    ["ip", "addr", "add", "192.168.7.1/24", "dev", "lanbr"],
                    ["ip", "link", "set", "lanbr", "up"],
                    ["sysctl", "-qw", "net.ipv4.ip_forward=1"],
                    ["iptables", "-t", "nat", "-A", "POSTROUTING", "-o", wan_r,
                     "-j", "MASQUERADE"],
                    ["iptables", "-A", "FORWARD", "-i", wan_r, "-m", "conntrack",
                     "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                    ["iptables", "-A", "FORWARD", "-i", wan_r, "-j", "DROP"],
                    ["iptables", "-A", "INPUT", "-i", wan_r, "-m", "conntrack",
                     "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                    ["iptables", "-A", "INPUT", "-i", wan_r, "-j", "DROP"]):
            sh("ip", "netns", "exec", r, *cmd)
        out = []
        for k in range(nodes):
            n = f"brh-{self.tag}-n{s}{k}"
            lan_r, lan_n = f"bhl{self.tag}{i}{k}", f"bhm{self.tag}{i}{k}"
            sh("ip", "netns", "add", n)
            self.ns.append(n)
            sh("ip", "link", "add", lan_r, "type", "veth", "peer", "name", lan_n)
            sh("ip", "link", "set", lan_r, "netns", r)
            sh("ip", "link", "set", lan_n, "netns", n)
            sh("ip", "-n", r, "link", "set", lan_r, "master", "lanbr")
            sh("ip", "-n", r, "link", "set", lan_r, "up")
            for cmd in (["ip", "addr", "add", f"192.168.7.{2 + k}/24", "dev", lan_n],
                        ["ip", "link", "set", lan_n, "up"], ["ip", "link", "set", "lo", "up"],
                        ["ip", "route", "add", "default", "via", "192.168.7.1"]):
                sh("ip", "netns", "exec", n, *cmd)
            out.append(n)
        return out, gw, wan

    def cloud(self, i):
        """A rented box: (its namespace, its public address 10.P.i.2)."""
        ns = f"brh-{self.tag}-cloud"
        sh("ip", "netns", "add", ns)
        self.ns.append(ns)
        _, _, addr = self._wan(ns, i)
        return ns, addr

    def move(self, s, i):
        """Site s's router (WAN 10.P.i.0/24) gets another public address, 10.P.i.3,
        as when a provider gives a home a new one: the old one goes, and with it
        the router's mappings. Its new address."""
        r, wan_r = f"brh-{self.tag}-r{s}", f"bhx{self.tag}{i}"
        for cmd in (["ip", "addr", "del", f"{self.p}.{i}.2/24", "dev", wan_r],
                    ["ip", "addr", "add", f"{self.p}.{i}.3/24", "dev", wan_r],
                    ["ip", "route", "replace", "default", "via", f"{self.p}.{i}.1"]):
            sh("ip", "netns", "exec", r, *cmd)
        return f"{self.p}.{i}.3"

    def block_udp(self, s, to):
        """Site s's router drops the UDP its nodes send to address to (no direct
        path between two sites)."""
        sh("ip", "netns", "exec", f"brh-{self.tag}-r{s}", "iptables", "-I", "FORWARD",
           "-p", "udp", "-d", to, "-j", "DROP")

    def teardown(self):
        for link in self.links:
            sh("ip", "link", "del", link, check=False)
        for ns in self.ns:
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def home_sites(request):
    from netlan import free_prefix, require_netns
    require_netns("the NAT tests", needs="ip netns, veth, iptables")
    if not shutil.which("iptables"):
        pytest.skip("needs iptables")
    prefix = free_prefix(150, 199)
    h = HomeSites(os.urandom(2).hex(), prefix.rsplit(".", 1)[0])
    forward = open("/proc/sys/net/ipv4/ip_forward").read().strip()
    request.addfinalizer(lambda: open("/proc/sys/net/ipv4/ip_forward", "w").write(forward))
    request.addfinalizer(h.teardown)
    open("/proc/sys/net/ipv4/ip_forward", "w").write("1")
    return h


def start_in(c, name, ns, tok, *extra):
    """Node name's agent in namespace ns (a host of its own: its /run/wireguard
    too), with the overlay in user space; tok None: the node joined before."""
    run = c.root / f"wireguard-{name}"
    os.makedirs(run, exist_ok=True)
    return c.start_agent(name, token=tok, join=tok is not None,
                         extra=("--overlay", "userspace") + extra,
                         wrap=["ip", "netns", "exec", ns, "unshare", "--mount",
                               "--propagation", "private", "sh", "-c",
                               f"mount --bind {run} /run/wireguard && exec \"$@\"", "sh"])


def built(make):
    """make() (which builds sites): what it returns, or the test skipped, saying why,
    when this machine cannot build them."""
    try:
        return make()
    except RuntimeError as e:
        pytest.skip(f"cannot build the home sites here: {e}")


def test_a_gang_spans_two_home_routers_over_the_overlay(home_sites, make_cluster, tmp_path):
    """Two nodes, each behind its own masquerading router that accepts nothing
    inbound, the same private address at both homes: neither reaches the other
    directly, yet over the overlay (both sending first, through their routers'
    mappings) a 2-node gloo gang all-reduces across them."""
    ((na,), gw_a, wan_a), ((nb,), gw_b, wan_b) = built(
        lambda: (home_sites.site("a", 1), home_sites.site("b", 2)))
    # the coordinator on the host's end of home a's uplink: home b reaches it through
    # the host, as both reach a rented box
    c = make_cluster(host=gw_a, start=False)
    c.start_coordinator(extra=["--overlay-net", "10.79.0.0/24"])
    # no direct path: a listener at home a is out of home b's reach (its router takes
    # nothing inbound), though home a itself reaches it
    listener = subprocess.Popen(
        ["ip", "netns", "exec", na, PYTHON, "-c",
         "import socket\ns=socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(4)\n"
         "print(s.getsockname()[1], flush=True)\nwhile True: s.accept()[0].close()"],
        stdout=subprocess.PIPE, text=True)
    try:
        port = int(listener.stdout.readline())
        dial = "import socket,sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), " \
               "timeout=2).close()"
        assert sh("ip", "netns", "exec", na, PYTHON, "-c", dial, "127.0.0.1", port,
                  check=False).returncode == 0
        assert sh("ip", "netns", "exec", nb, PYTHON, "-c", dial, wan_a, port,
                  check=False).returncode != 0
    finally:
        listener.kill()
        listener.wait(10)
    tok = c.token(uses=2)
    start_in(c, "home-a", na, tok)
    start_in(c, "home-b", nb, tok)
    c.wait_ready("home-a", "home-b")
    assert c.nodes()["home-a"]["address"] == wan_a, c.nodes()["home-a"]  # its router's
    script = tmp_path / "gloo.py"
    script.write_text(GLOO)
    jid = c.submit(f"name: homes\ncommand: {PYTHON} {script}\n"
                   "resources: {nodes: 2, cpus: 0, network: overlay}\n")
    j = c.wait_job(jid, timeout=180)
    out = c.logs(jid, stream="both")
    assert j["state"] == "completed", (j["reason"], out)
    for r in range(2):
        log = c.logs(jid, "--rank", r)
        assert "SUM 3" in log, out
        env = next(ln.split() for ln in log.splitlines() if ln.startswith("ENV "))
        assert env[2].startswith("10.79.0.") and env[4] == "bramble0", env  # the overlay's
    a_addr, b_addr = overlay(c, "home-a")["address"], overlay(c, "home-b")["address"]

    # home-b's agent is killed and started again: the interface it left (the same
    # key) is taken over, and the homes still reach each other over it
    c.agents["home-b"].kill(signal.SIGKILL)
    agent = start_in(c, "home-b", nb, None)
    wait_for(lambda: "connected to" in agent.output(), what="the new agent's hello")
    wait_for(lambda: tcp_ns(na, nb, b_addr) and tcp_ns(nb, na, a_addr),
             what="the homes to reach each other after the agent's restart")
    assert "`" not in agent.output(), agent.output()  # (no step failed)

    # roaming: home b's router gets another public address (its mappings go with
    # the old one); home-b connects again from it, home-a is told, and the overlay
    # works again
    wan_b2 = home_sites.move("b", 2)
    wait_for(lambda: c.nodes()["home-b"]["address"] == wan_b2, timeout=60,
             what="home-b to connect from its router's new address")
    wait_for(lambda: f"{wan_b2}:51820" in wg(c, "home-a", "show", "bramble0",
                                             "endpoints").stdout,
             what="home-a to send to home-b's new address")
    wait_for(lambda: tcp_ns(na, nb, b_addr) and tcp_ns(nb, na, a_addr), timeout=60,
             what="the homes to reach each other after home b moved")

    # home-b removed while a job runs on both: home-a drops it at once, and home-b
    # reaches home-a over the overlay no more
    jid = c.submit("name: long\ncommand: sleep 600\n"
                   "resources: {nodes: 2, cpus: 0, network: overlay}\n")
    wait_for(lambda: c.job(jid)["state"] == "running", what="the job to run")
    c.agents["home-b"].expected_exit = True
    c.cli("node", "remove", "home-b")
    wait_for(lambda: wg_peers(c, "home-a") == set(), what="home-a to drop home-b")
    assert not tcp_ns(nb, na, a_addr)


TRAIN = r"""
import os
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
e = os.environ
print("ENV", e["RANK"], e["MASTER_ADDR"], e.get("BRAMBLE_OVERLAY_ADDR"),
      e.get("GLOO_SOCKET_IFNAME"), flush=True)
dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(1)
x = torch.randn(64, 8, generator=g)
y = x.sum(1, keepdim=True)
for step in range(30):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x[rank::world]), y[rank::world]).backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
print("PARAMS", ",".join(repr(v) for v in flat.tolist()), flush=True)
dist.destroy_process_group()
"""


def overlay_paths(c):
    """`bramble probe --json`'s overlay part."""
    return c.cli_json("probe")["overlay"]


def test_one_router_two_nodes_and_a_relay_between_homes(home_sites, make_cluster, tmp_path):
    """Two homes, two nodes behind each router, and a rented box started with
    --relay; the routers drop all UDP between the homes (no direct path). The
    nodes behind one router find each other at their LAN addresses, every node
    reaches the rented box, and each pair across the homes goes through it, as
    `bramble probe` says. A 2-node DDP gang (a plain script) across the homes,
    relayed, trains to exactly the parameters of the same run at one home."""
    h = home_sites
    (a_ns, gw_a, wan_a), (b_ns, gw_b, wan_b), (cloud_ns, cloud_addr) = built(
        lambda: (h.site("a", 1, nodes=2), h.site("b", 2, nodes=2), h.cloud(3)))
    h.block_udp("a", wan_b)
    h.block_udp("b", wan_a)
    c = make_cluster(host=gw_a, start=False)
    c.start_coordinator(extra=["--overlay-net", "10.79.0.0/24"])
    tok = c.token(uses=5)
    nodes = {"a1": a_ns[0], "a2": a_ns[1], "b1": b_ns[0], "b2": b_ns[1]}
    for name, ns in nodes.items():
        start_in(c, name, ns, tok)
    start_in(c, "cloud", cloud_ns, tok, "--relay")
    c.wait_ready(*nodes, "cloud")
    assert c.nodes()["cloud"]["overlay"]["relay"] is True
    # a1-a2, b1-b2 and each with the cloud: direct; the four pairs across: relayed
    try:
        wait_for(lambda: (lambda ov: ov["relayed"] == 4 and ov["direct"] == 6)(
            overlay_paths(c)), timeout=120, what="6 pairs direct and 4 relayed")
    except AssertionError as e:
        raise AssertionError(f"{e}: {overlay_paths(c)}; a2's WireGuard: "
                             f"{wg(c, 'a2', 'show', 'bramble0').stdout}") from None
    ov = overlay_paths(c)
    assert ov["unreachable"] == 0 and ov["trying"] == 0, ov
    relayed = {(p["a"], p["b"]) for p in ov["pairs"]}
    assert relayed == {("a1", "b1"), ("a1", "b2"), ("a2", "b1"), ("a2", "b2")}, ov
    assert all(p["via"] == "cloud" for p in ov["pairs"]), ov
    text = c.cli("probe")[1]
    assert "overlay: 6 pairs direct, 4 relayed, 0 unreachable" in text, text
    assert "a2 <-> b2: relayed via cloud" in text, text
    show = c.cli("node", "show", "a2")[1]
    assert "2 direct, 0 not tried yet; relayed: b1 via cloud, b2 via cloud" in show, show
    # where the cloud's WireGuard reaches each node behind router a: the router's
    # address, with a port of its own for each (a candidate for the others)
    mapped = wait_for(lambda: (lambda m: len(set(m)) == 2 and all(m) and m)(
        [overlay(c, n).get("mapped") for n in ("a1", "a2")]),
        what="the cloud to say where it reaches a1 and a2")
    assert all(m.startswith(f"{wan_a}:") for m in mapped), mapped
    # ... and the cloud sends to each where it answers (not to the other's mapping)
    keys = {overlay(c, n)["pubkey"]: n for n in ("a1", "a2")}
    wait_for(lambda: all(f"{k}\t{overlay(c, keys[k])['mapped']}" in
                         wg(c, "cloud", "show", "bramble0", "endpoints").stdout for k in keys),
             what="the cloud to send to a1 and a2 at their own mappings")
    # behind one router, each found the other at its LAN address
    eps = wg(c, "a1", "show", "bramble0", "endpoints").stdout
    a2_key = c.nodes()["a2"]["overlay"]["pubkey"]
    assert f"{a2_key}\t192.168.7.3:51820" in eps, eps
    # the relay carries the pair: at a2, b2's overlay address is the cloud's peer's
    cloud_key = c.nodes()["cloud"]["overlay"]["pubkey"]
    b2_addr = overlay(c, "b2")["address"]
    wait_for(lambda: any(ln.startswith(cloud_key) and f"{b2_addr}/32" in ln for ln in
                         wg(c, "a2", "show", "bramble0", "allowed-ips").stdout.splitlines()),
             what="a2 to route b2's overlay address through the cloud's peer")

    # the network map probes the overlay's paths too: a2 to b2, through the cloud
    def overlay_ms(m, a, b):
        rows = m.get("overlay_rtt_ms")
        return rows and rows[m["nodes"].index(a)][m["nodes"].index(b)]
    wait_for(lambda: overlay_ms(c.cli_json("probe"), "a2", "b2"),
             what="the network map to measure a2 to b2 over the overlay")
    assert "OVERLAY (ms)" in c.cli("probe")[1]

    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    params = {}
    for tag, pair in (("home", ["a1", "a2"]), ("across", ["a2", "b2"])):
        jid = c.submit(f"name: {tag}\ncommand: {PYTHON} {script}\n"
                       f"resources: {{nodes: 2, cpus: 0, network: overlay, "
                       f"nodelist: [{pair[0]}, {pair[1]}]}}\n")
        j = c.wait_job(jid, timeout=240)
        out = c.logs(jid, stream="both")
        assert j["state"] == "completed", (j["reason"], out)
        assert set(j["nodes"]) == set(pair), j["nodes"]
        got = [ln for ln in c.logs(jid, "--rank", 0).splitlines() if ln.startswith("PARAMS ")]
        assert got, out
        params[tag] = got[0]
    assert params["across"] == params["home"], params

    # resources.network left as auto: over the overlay, since the network map found
    # that a1 and b1 answer no direct probe
    wait_for(lambda: ["a1", "b1"] in c.cli_json("probe")["no_answer"],
             what="the network map to find that a1 and b1 answer no direct probe")
    gloo = tmp_path / "gloo.py"
    gloo.write_text(GLOO)
    jid = c.submit(f"name: auto\ncommand: {PYTHON} {gloo}\n"
                   "resources: {nodes: 2, cpus: 0, nodelist: [a1, b1]}\n")
    j = c.wait_job(jid, timeout=240)
    assert j["state"] == "completed", (j["reason"], c.logs(jid, stream="both"))
    for r in range(2):
        log = c.logs(jid, "--rank", r)
        env = next(ln.split() for ln in log.splitlines() if ln.startswith("ENV "))
        assert env[2].startswith("10.79.0.") and env[4] == "bramble0", env
        assert "SUM 3" in log, log
