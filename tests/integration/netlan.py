"""A small LAN of network namespaces for the gang tests (test_gang.py).

    lan = make_lan(3)   # fixture factory
    c = make_cluster(host=lan.host_ip)
    lan.start_agents(c, ["n1", "n2", "n3"])   # one agent per namespace

On the host: a Linux bridge with address 10.A.B.1/24 (A in 200..249 and B chosen at
random, unused on this host), and K namespaces, each joined to the bridge by a veth
pair whose namespace end has 10.A.B.(10+i)/24 and `lo` up. Every link, the bridge
and the namespaces are removed at teardown, also when the test failed. Request the
fixture before make_cluster, so the cluster (and the agents in the namespaces) is
stopped first.

Skips (with the reason) when not root, when `ip` is missing or when namespaces,
veths or bridges cannot be made here.
"""

import os
import random
import shutil
import socket
import subprocess
import sys
import uuid

import pytest

from conftest import DEADLINE, wait_for

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def sh(*argv, check=True, timeout=30):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))}: exit {r.returncode}: "
                           f"{r.stderr.strip()}")
    return r


def used_prefixes():
    """The 10.A.B prefixes of the IPv4 addresses and routes on this host."""
    text = sh("ip", "-4", "-o", "addr", "show", check=False).stdout
    text += sh("ip", "-4", "route", "show", "table", "all", check=False).stdout
    out = set()
    for word in text.split():
        parts = word.split("/")[0].split(".")
        if len(parts) == 4 and parts[0] == "10":
            out.add(".".join(parts[:3]))
    return out


class Lan:
    def __init__(self, k):
        self.k = k
        self.tag = uuid.uuid4().hex[:6]
        used = used_prefixes()
        for _ in range(200):
            prefix = f"10.{random.randint(200, 249)}.{random.randint(0, 255)}"
            if prefix not in used:
                break
        self.prefix = prefix
        self.host_ip = f"{prefix}.1"
        self.bridge = f"bgb{self.tag}"
        # role (n1..nK) -> namespace / address / host-side veth
        self.roles = [f"n{i}" for i in range(1, k + 1)]
        self.ns = {r: f"brg-{self.tag}-{r}" for r in self.roles}
        self.addr = {r: f"{prefix}.{10 + i}" for i, r in enumerate(self.roles, 1)}
        self.host_veth = {r: f"bgh{self.tag}{i}" for i, r in enumerate(self.roles, 1)}
        self.made_ns = []
        self.made_links = []

    # ---- setup / teardown

    def setup(self):
        r = sh("ip", "link", "add", self.bridge, "type", "bridge", "forward_delay", "0",
               "nf_call_iptables", "0", check=False)
        if r.returncode != 0:  # older iproute2 / kernel without the per-bridge knob
            r = sh("ip", "link", "add", self.bridge, "type", "bridge", check=False)
        if r.returncode != 0:
            raise RuntimeError(f"cannot make a bridge: {r.stderr.strip()}")
        self.made_links.append(self.bridge)
        sh("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i, role in enumerate(self.roles, 1):
            ns, vh, vn = self.ns[role], self.host_veth[role], f"bgn{self.tag}{i}"
            sh("ip", "netns", "add", ns)
            self.made_ns.append(ns)
            sh("ip", "link", "add", vh, "type", "veth", "peer", "name", vn)
            self.made_links.append(vh)
            sh("ip", "link", "set", vn, "netns", ns)
            sh("ip", "link", "set", vh, "master", self.bridge)
            sh("ip", "link", "set", vh, "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr[role]}/24", "dev", vn)
            sh("ip", "-n", ns, "link", "set", vn, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def teardown(self):
        problems = []
        for link in reversed(self.made_links):
            r = sh("ip", "link", "del", link, check=False)
            if r.returncode != 0 and "Cannot find" not in r.stderr:
                problems.append(f"ip link del {link}: {r.stderr.strip()}")
        for ns in self.made_ns:
            r = sh("ip", "netns", "del", ns, check=False)
            if r.returncode != 0:
                problems.append(f"ip netns del {ns}: {r.stderr.strip()}")

        def links_gone():  # the kernel may drop them a little later
            text = sh("ip", "-o", "link", "show", check=False).stdout
            return not any(f"{link}:" in text or f"{link}@" in text
                           for link in self.made_links)

        try:
            wait_for(links_gone, DEADLINE, f"links {', '.join(self.made_links)} to go")
        except AssertionError as e:
            problems.append(str(e))
        return problems

    def check_reachable(self):
        """Every namespace reaches the bridge address and the other namespaces
        over TCP (a bridged firewall would break the gang tests in odd ways)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
            srv.bind((self.host_ip, 0))
            srv.listen(16)
            port = srv.getsockname()[1]
            for role in self.roles:
                r = sh("ip", "netns", "exec", self.ns[role], PYTHON, "-c",
                       "import socket,sys; socket.create_connection((sys.argv[1], "
                       "int(sys.argv[2])), timeout=10).close()", self.host_ip, port,
                       check=False, timeout=60)
                if r.returncode != 0:
                    raise AssertionError(f"namespace {self.ns[role]} cannot reach "
                                       f"{self.host_ip}:{port}: {r.stderr.strip()}")
                srv.accept()[0].close()
        if self.k >= 2:  # namespace to namespace, across the bridge
            a, b = self.roles[0], self.roles[1]
            listener = subprocess.Popen(
                ["ip", "netns", "exec", self.ns[a], PYTHON, "-c",
                 "import socket,sys\ns=socket.socket(); s.bind((sys.argv[1], 0)); s.listen(1)\n"
                 "print(s.getsockname()[1], flush=True); s.settimeout(60); s.accept()",
                 self.addr[a]], stdout=subprocess.PIPE, text=True)
            try:
                port = int(listener.stdout.readline())
                r = sh("ip", "netns", "exec", self.ns[b], PYTHON, "-c",
                       "import socket,sys; socket.create_connection((sys.argv[1], "
                       "int(sys.argv[2])), timeout=10).close()", self.addr[a], port,
                       check=False, timeout=60)
                if r.returncode != 0:
                    raise AssertionError(f"namespace {self.ns[b]} cannot reach "
                                       f"{self.addr[a]}:{port} in {self.ns[a]} across the "
                                       f"bridge: {r.stderr.strip()}")
                listener.wait(60)
            finally:
                if listener.poll() is None:
                    listener.kill()
                    listener.wait(10)

    # ---- use

    def wrap(self, role):
        return ["ip", "netns", "exec", self.ns[role]]

    def ns_inode(self, role):
        """The inode of role's network namespace (what /proc/PID/ns/net of a
        process inside it shows as net:[INODE])."""
        return os.stat(f"/run/netns/{self.ns[role]}").st_ino

    def role_of_inode(self, ino):
        for role in self.roles:
            if self.ns_inode(role) == ino:
                return role
        return None

    def start_agents(self, cluster, nodes, extra=(), wait=True):
        """Start one agent per role in its namespace: nodes maps role -> node name
        (or is a list of roles, used as node names). Waits until all are ready."""
        if not isinstance(nodes, dict):
            nodes = {r: r for r in nodes}
        tok = cluster.token(uses=len(nodes))
        for role, name in nodes.items():
            cluster.start_agent(name, token=tok, extra=extra, wrap=self.wrap(role))
        if wait:
            cluster.wait_ready(*nodes.values())
        return nodes


@pytest.fixture
def make_lan(request):
    """Factory: make_lan(k) -> Lan with k namespaces on one bridge (see above)."""
    if os.geteuid() != 0:
        pytest.skip("the gang LAN tests need root (ip netns, veth, bridge)")
    if not shutil.which("ip"):
        pytest.skip("the gang LAN tests need iproute2's `ip`")
    made = []

    def make(k):
        lan = Lan(k)
        made.append(lan)
        probe = f"brg-{lan.tag}-probe"
        r = sh("ip", "netns", "add", probe, check=False)
        if r.returncode != 0:
            pytest.skip(f"`ip netns add` does not work here: {r.stderr.strip()}")
        sh("ip", "netns", "del", probe, check=False)
        try:
            lan.setup()
        except RuntimeError as e:
            pytest.skip(f"cannot set up the bridge and veth pairs: {e}")
        try:
            wait_for(lambda: lan.check_reachable() or True, DEADLINE,
                     "the namespaces to reach each other over the bridge")
        except AssertionError as e:
            pytest.skip(f"the LAN does not carry traffic here: {e}")
        return lan

    yield make
    problems = []
    for lan in made:
        problems += lan.teardown()
    if problems:
        pytest.fail("LAN teardown: " + "; ".join(problems), pytrace=False)
