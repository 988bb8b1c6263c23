"""Finding the coordinator on a LAN (docs/raspberry-pi.md, PROTOCOL.md section 9).

`brambled --announce` broadcasts "bramble-announce/1\\n" + JSON {key, port,
endpoint} on UDP; an agent whose join token names an address where nothing
answers listens for an announcement carrying the token's server key and joins
the sender. The LAN here is a bridge in the host with two network namespaces on
it, one for the coordinator and one for the agent (and the host itself on the
bridge, where the CLI and the tests' UDP sockets live), so no broadcast leaves
the test.
"""

import base64
import contextlib
import json
import socket
import threading
import time
import uuid

import pytest
import zmq

from conftest import DEADLINE, read_yaml_flat, wait_for
from netlan import free_prefix, require_netns, skip_netns_failure, sh as _sh

MAGIC = b"bramble-announce/1\n"

# Token endpoints where no coordinator answers: an address that stays silent (the
# agent gives it 3 s before it listens for announcements as well) and a name that
# cannot be resolved (the agent listens at once). Either way it gives up
# 3 s + --discover-timeout after it tried the token's endpoint.
SILENT = "tcp://192.0.2.1:7700"
UNRESOLVABLE = "tcp://no-such-coordinator.invalid:7700"


class Lan:
    """bridge `br` in the host (HOST_IP), namespace `coord_ns` (COORD_IP) and
    namespace `agent_ns` (AGENT_IP), all in one /24."""

    def __init__(self, sfx, net):
        self.br = f"brb{sfx}"
        self.coord_ns, self.agent_ns = f"brc-{sfx}", f"bra-{sfx}"
        self.net = net
        self.host_ip, self.coord_ip, self.agent_ip = f"{net}.254", f"{net}.1", f"{net}.2"
        self.bcast = f"{net}.255"
        self.links = []

    def wrap(self, ns):
        return ["ip", "netns", "exec", ns]

    def up(self):
        _sh("ip", "link", "add", self.br, "type", "bridge")
        self.links.append(self.br)
        _sh("ip", "addr", "add", f"{self.host_ip}/24", "brd", "+", "dev", self.br)
        _sh("ip", "link", "set", self.br, "up")
        for ns, ip, tag in ((self.coord_ns, self.coord_ip, "c"),
                            (self.agent_ns, self.agent_ip, "a")):
            vh, vn = f"{self.br}{tag}h", f"{self.br}{tag}n"
            _sh("ip", "link", "add", vh, "type", "veth", "peer", "name", vn)
            self.links.append(vh)
            _sh("ip", "link", "set", vn, "netns", ns)
            _sh("ip", "link", "set", vh, "master", self.br)
            _sh("ip", "link", "set", vh, "up")
            _sh(*self.wrap(ns), "ip", "addr", "add", f"{ip}/24", "brd", "+", "dev", vn)
            _sh(*self.wrap(ns), "ip", "link", "set", vn, "up")
            _sh(*self.wrap(ns), "ip", "link", "set", "lo", "up")

    def down(self):
        for link in reversed(self.links):
            _sh("ip", "link", "del", link, check=False)
        for ns in (self.coord_ns, self.agent_ns):
            _sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def lan(request):
    require_netns("LAN discovery test", needs="ip netns, bridge, veth", probe=False)
    sfx = uuid.uuid4().hex[:6]
    lan = Lan(sfx, free_prefix(240, 249))
    request.addfinalizer(lan.down)
    for ns in (lan.coord_ns, lan.agent_ns):
        skip_netns_failure(_sh("ip", "netns", "add", ns, check=False))
    try:
        lan.up()
    except RuntimeError as e:
        pytest.skip(f"cannot set up the bridge and veth pairs: {e}")
    return lan


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def rewrite_token(token, endpoint):
    """The same token ("brt1." + base64url JSON) with its endpoint replaced."""
    assert token.startswith("brt1."), token
    raw = token[5:]
    body = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    body["e"] = endpoint
    text = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return "brt1." + base64.urlsafe_b64encode(text).decode().rstrip("=")


def listener(lan, port):
    """A UDP socket in the host that hears broadcasts on the bridge only."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, lan.br.encode())
    s.bind(("0.0.0.0", port))
    return s


def announcement(key, port, endpoint):
    return MAGIC + json.dumps({"key": key, "port": port, "endpoint": endpoint}).encode()


def start(make_cluster, lan, *extra):
    c = make_cluster(start=False, host=lan.coord_ip)
    c.start_coordinator(extra=extra, wrap=lan.wrap(lan.coord_ns))
    return c


@pytest.mark.parametrize("dead_endpoint", [SILENT, UNRESOLVABLE])
def test_agent_finds_announcing_coordinator(lan, make_cluster, dead_endpoint):
    udp = free_udp_port()
    heard = listener(lan, udp)
    try:
        c = start(make_cluster, lan, "--announce", "--announce-port", udp)
        server_key = read_yaml_flat(c.credential)["server_public_key"]

        # what goes on the wire is the documented datagram
        heard.settimeout(DEADLINE)
        data, src = heard.recvfrom(2048)
        assert data.startswith(MAGIC), data
        body = json.loads(data[len(MAGIC):])
        assert body == {"key": server_key, "port": c.port, "endpoint": c.endpoint}, body
        assert src[0] == lan.coord_ip, src
    finally:
        heard.close()

    token = rewrite_token(c.token(1), dead_endpoint)
    agent = c.start_agent("pi-1", token=token, wrap=lan.wrap(lan.agent_ns),
                          extra=["--discover-port", udp, "--discover-timeout", "30s"])
    c.wait_ready("pi-1")
    out = agent.output()
    assert "listening for the coordinator's announcement" in out, out
    assert "announced itself from " + lan.coord_ip in out, out
    # the credential keeps the address it was found at, not the token's
    cred = read_yaml_flat(c.agent_dir("pi-1") / "credential")
    assert cred["endpoint"] == f"tcp://{lan.coord_ip}:{c.port}", cred
    assert cred["server_public_key"] == server_key

    # and a restart with --data-dir alone goes there at once
    agent.kill(15)
    again = c.start_agent("pi-1", join=False, wrap=lan.wrap(lan.agent_ns))
    wait_for(lambda: f"connected to tcp://{lan.coord_ip}:{c.port}" in again.output(),
             what="the restarted agent to connect to the address it saved")
    c.wait_ready("pi-1")

    jid = c.submit("name: found-it\ncommand: echo found-the-coordinator\n")
    assert c.wait_job(jid)["state"] == "completed"
    assert c.wait_logs(jid, "found-the-coordinator")
    assert c.job(jid)["nodes"] == ["pi-1"]


@contextlib.contextmanager
def broadcasting(lan, datagram, udp):
    """An impostor on the LAN: datagram broadcast to UDP port udp every 250 ms
    while the block runs."""
    stop = threading.Event()

    def send():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, lan.br.encode())
            while not stop.is_set():
                s.sendto(datagram, (lan.bcast, udp))
                stop.wait(0.25)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(10)


@contextlib.contextmanager
def fake_coordinator(lan):
    """An impostor's CURVE server on the host's LAN address with a key pair of its
    own (it cannot prove the real coordinator's key): (socket, port)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
    sock.curve_server = True
    try:
        yield sock, sock.bind_to_random_port(f"tcp://{lan.host_ip}")
    finally:
        sock.close(0)
        ctx.term()


def test_announcement_with_another_key_is_ignored(lan, make_cluster):
    udp = free_udp_port()
    c = start(make_cluster, lan)  # the real coordinator does not announce
    other_key, _ = zmq.curve_keypair()
    # an impostor naming the real coordinator's address, with a key not the token's:
    # were keys not compared, the agent would join it
    fake = announcement(other_key.decode(), c.port, c.endpoint)
    with broadcasting(lan, fake, udp):
        token = rewrite_token(c.token(1), SILENT)
        agent = c.start_agent("pi-2", token=token, wrap=lan.wrap(lan.agent_ns),
                              extra=["--discover-port", udp, "--discover-timeout", "4s"])
        rc = agent.wait_exit(timeout=DEADLINE)
    out = agent.output()
    assert rc == 1, out
    assert out.count("ignoring an announcement") == 1, out  # said once, not per datagram
    assert "another coordinator's key" in out, out
    assert (f"no coordinator announced the token's key on UDP port {udp} within 4s"
            in out), out
    assert "pi-2" not in c.nodes()


def test_no_announcement_without_the_flag(lan, make_cluster):
    udp = free_udp_port()
    socks = [listener(lan, udp), listener(lan, 7702)]
    try:
        c = start(make_cluster, lan, "--announce-port", udp)
        c.assert_alive()
        # the one bounded wait that is the assertion: an announcer sends at once and
        # then every 2s, so 3s of silence on both ports means it is off
        deadline = time.monotonic() + 3.0
        got = []
        while time.monotonic() < deadline:
            for s in socks:
                s.settimeout(max(0.01, min(0.2, deadline - time.monotonic())))
                try:
                    got.append(s.recvfrom(2048))
                except socket.timeout:
                    pass
        assert not [g for g in got if g[0].startswith(MAGIC)], got
    finally:
        for s in socks:
            s.close()


def test_announcement_with_the_right_key_but_not_its_secret_fails(lan, make_cluster):
    """An impostor announcing the token's key, without the secret key behind it,
    fails the CURVE handshake: the agent neither joins it nor hands it the token.
    (After the failed join the agent listens on, the impostor skipped, until it
    gives up: 3 s + --discover-timeout. The token's endpoint cannot be resolved,
    so the agent listens from the start, and hears the impostor, broadcasting every
    250 ms, well within the first 3 s + 2 s; it gives up 5 s after the failed join.)"""
    udp = free_udp_port()
    c = start(make_cluster, lan)  # the real coordinator does not announce
    server_key = read_yaml_flat(c.credential)["server_public_key"]
    with fake_coordinator(lan) as (fake_server, fake_port):
        fake = announcement(server_key, fake_port, f"tcp://0.0.0.0:{fake_port}")
        with broadcasting(lan, fake, udp):
            token = rewrite_token(c.token(1), UNRESOLVABLE)
            agent = c.start_agent("pi-3", token=token, wrap=lan.wrap(lan.agent_ns),
                                  extra=["--discover-port", udp, "--discover-timeout", "2s"])
            rc = agent.wait_exit(timeout=DEADLINE + 15)
            received = fake_server.poll(0)
    assert not received, "the impostor received a message"
    out = agent.output()
    assert rc == 1, out
    assert f"announced itself from {lan.host_ip}" in out, out
    assert (f"join failed: tcp://{lan.host_ip}:{fake_port} announced the token's key, "
            "but no coordinator holding it answered there" in out), out
    assert "pi-3" not in c.nodes()


def test_impostor_announcing_first_does_not_hide_the_real_coordinator(lan, make_cluster):
    """An impostor announcing the token's key before the real coordinator does
    fails the handshake; the agent skips it, listens on, and joins the real one."""
    udp = free_udp_port()
    c = start(make_cluster, lan)
    server_key = read_yaml_flat(c.credential)["server_public_key"]
    token = rewrite_token(c.token(1), SILENT)
    c.coordinator.kill(15)  # silent until the impostor has been heard
    with fake_coordinator(lan) as (fake_server, fake_port):
        fake = announcement(server_key, fake_port, f"tcp://0.0.0.0:{fake_port}")
        with broadcasting(lan, fake, udp):
            agent = c.start_agent("pi-4", token=token, wrap=lan.wrap(lan.agent_ns),
                                  extra=["--discover-port", udp, "--discover-timeout", "60s"])
            wait_for(lambda: f"announced itself from {lan.host_ip}" in agent.output(),
                     what="the agent to hear the impostor first")
            c.start_coordinator(extra=("--announce", "--announce-port", udp),
                                wrap=lan.wrap(lan.coord_ns))
            wait_for(lambda: "listening on for the coordinator" in agent.output(),
                     timeout=DEADLINE + 15, what="the agent to give up on the impostor")
            c.wait_ready("pi-4")
        assert not fake_server.poll(0), "the impostor received a message"
    out = agent.output()
    assert f"announced itself from {lan.coord_ip}" in out, out
    cred = read_yaml_flat(c.agent_dir("pi-4") / "credential")
    assert cred["endpoint"] == f"tcp://{lan.coord_ip}:{c.port}", cred
