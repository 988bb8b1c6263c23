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

For a single namespace joined straight to the host (no bridge), from a fixture:

    v = veth_ns(request, ["10.N.M.1/24"], ["10.N.M.2/24"], prefix="brx", what="...")
    c.start_agent("x", wrap=v.wrap())   # v.ns, v.host_veth, v.ns_veth

The namespace and the veth pair are removed when the test (or the fixture's setup)
ends, also when it failed.
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


def free_prefix(lo=200, hi=249):
    """A random 10.A.B prefix (A in lo..hi) that no address or route here uses."""
    used = used_prefixes()
    for _ in range(200):
        prefix = f"10.{random.randint(lo, hi)}.{random.randint(0, 255)}"
        if prefix not in used:
            break
    return prefix


def skip_netns_failure(r):
    """Skip the test if r, the result of an `ip netns add`, failed."""
    if r.returncode != 0:
        pytest.skip(f"`ip netns add` does not work here: {r.stderr.strip()}")


def require_netns(what, needs="ip netns, veth", probe=True):
    """Skip the test unless it can make network namespaces here: root, iproute2's
    `ip` and (probe) a working `ip netns add`. what names the test in the skip
    reason, needs what it needs root for."""
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root ({needs})")
    if not shutil.which("ip"):
        pytest.skip(f"{what} needs iproute2's `ip`")
    if probe:
        name = f"brq-{uuid.uuid4().hex[:6]}"
        skip_netns_failure(sh("ip", "netns", "add", name, check=False))
        sh("ip", "netns", "del", name, check=False)


class VethNs:
    """A namespace `ns` joined to the host by a veth pair: `host_veth` in the host,
    `ns_veth` in the namespace (see veth_ns)."""

    def __init__(self, prefix, host_addrs, ns_addrs):
        tag = uuid.uuid4().hex[:6]
        self.ns = f"{prefix}-{tag}"
        self.host_veth, self.ns_veth = f"{prefix}h{tag}", f"{prefix}n{tag}"
        self.host_addrs, self.ns_addrs = list(host_addrs), list(ns_addrs)

    def wrap(self):
        return ["ip", "netns", "exec", self.ns]

    def setup(self):
        sh("ip", "link", "add", self.host_veth, "type", "veth", "peer", "name", self.ns_veth)
        sh("ip", "link", "set", self.ns_veth, "netns", self.ns)
        for a in self.host_addrs:
            sh("ip", "addr", "add", a, "dev", self.host_veth)
        sh("ip", "link", "set", self.host_veth, "up")
        for a in self.ns_addrs:
            sh("ip", "-n", self.ns, "addr", "add", a, "dev", self.ns_veth)
        sh("ip", "-n", self.ns, "link", "set", self.ns_veth, "up")
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")

    def teardown(self):
        sh("ip", "link", "del", self.host_veth, check=False)
        sh("ip", "netns", "del", self.ns, check=False)


def veth_ns(request, host_addrs, ns_addrs, *, prefix="brv", what="this test"):
    """Make a VethNs for the test behind request: a namespace `{prefix}-XXXXXX` with
    `lo` up, joined to the host by a veth pair; host_addrs (CIDR strings, e.g.
    ["10.9.8.1/24", "10.9.8.9/24"]) go on the host end, ns_addrs on the namespace
    end. prefix: at most 4 characters (the link names are prefix+h/n+6). Removed at
    the test's teardown, also when it (or this setup) failed. Skips with the reason,
    naming what, when namespaces or veths cannot be made here."""
    assert len(prefix) <= 4, prefix
    require_netns(what, probe=False)  # the namespace itself is the probe
    v = VethNs(prefix, host_addrs, ns_addrs)
    skip_netns_failure(sh("ip", "netns", "add", v.ns, check=False))
    request.addfinalizer(v.teardown)
    try:
        v.setup()
    except RuntimeError as e:
        pytest.skip(f"cannot set up the veth pair: {e}")
    return v


class Lan:
    def __init__(self, k):
        self.k = k
        self.tag = uuid.uuid4().hex[:6]
        prefix = free_prefix()
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
    require_netns("the gang LAN tests", needs="ip netns, veth, bridge")
    made = []

    def make(k):
        lan = Lan(k)
        made.append(lan)
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
