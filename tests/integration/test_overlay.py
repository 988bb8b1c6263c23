"""The overlay's identities and addresses (docs/overlay.md): each agent makes its
WireGuard key pair, keeps the private half on the node, and says the public half
in its hello; the coordinator hands each node an address of --overlay-net that
stays the node's (across the agent's and the coordinator's restarts, and a new
key), refuses a key that another node reported and a node the net has no room
for, and disturbs no other node when it does. `bramble nodes` shows each node's
place and which WireGuard it runs.

Real agents and wireguard-go (user space here: this kernel has no wireguard
module); no traffic goes over the overlay in these tests."""
import json
import os
import shutil
import signal
import subprocess

import pytest

from conftest import wait_for

pytestmark = pytest.mark.skipif(
    not shutil.which("wireguard-go") or not os.path.exists("/dev/net/tun"),
    reason="needs wireguard-go and /dev/net/tun (tests/run.sh installs wireguard-go)")

NET = "10.77.0.0/30"  # room for two nodes


def overlay(c, name):
    return c.nodes()[name].get("overlay") or {}


def start(c, name, tok, *extra):
    c.start_agent(name, token=tok, extra=("--probe-port", "0", "--replica-port", "0") + extra)


@pytest.fixture
def cluster(make_cluster):
    c = make_cluster(start=False)
    c.start_coordinator(extra=["--overlay-net", NET])
    return c


def test_nodes_get_addresses_that_stay_theirs(cluster):
    c = cluster
    tok = c.token(uses=4)
    start(c, "node-1", tok)
    c.wait_ready("node-1")
    start(c, "node-2", tok)
    c.wait_ready("node-2")
    one, two = overlay(c, "node-1"), overlay(c, "node-2")
    assert (one["address"], one["mode"]) == ("10.77.0.1", "userspace"), one
    assert two["address"] == "10.77.0.2" and two["pubkey"] != one["pubkey"], two
    # the public key is the one of the private key on the node, which never left it
    key = (c.agent_dir("node-1") / "overlay.key").read_text()
    assert oct((c.agent_dir("node-1") / "overlay.key").stat().st_mode & 0o777) == "0o600"
    pub = subprocess.run(["wg", "pubkey"], input=key, capture_output=True, text=True,
                         check=True).stdout.strip() if shutil.which("wg") else one["pubkey"]
    assert pub == one["pubkey"]
    for f in (c.root / "coordinator").rglob("*"):
        if f.is_file():
            assert key.strip().encode() not in f.read_bytes(), f
    _, table, _ = c.cli("nodes")
    assert "OVERLAY" in table.splitlines()[0]
    assert "10.77.0.1 (userspace)" in table and "10.77.0.2 (userspace)" in table, table

    # the net is full: a third node joins and runs jobs, but gets no address, and
    # says why; the others keep theirs
    start(c, "node-3", tok)
    c.wait_ready("node-3")
    three = overlay(c, "node-3")
    assert "address" not in three, three
    assert f"--overlay-net {NET} has no address left" in three["error"], three
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
    if shutil.which("wg"):
        assert subprocess.run(["wg", "pubkey"], input=rotated, capture_output=True,
                              text=True, check=True).stdout.strip() == new["pubkey"]
    two = new

    # the agent and the coordinator started again: the same addresses and keys
    c.agents["node-1"].kill(signal.SIGTERM)
    c.start_agent("node-1", join=False)
    c.wait_ready("node-1")
    assert overlay(c, "node-1") == one
    c.coordinator.kill(signal.SIGKILL)
    c.start_coordinator(extra=["--overlay-net", NET])
    wait_for(lambda: all(c.nodes()[n]["state"] == "ready" for n in ("node-1", "node-2")),
             what="the nodes to say hello again")
    assert overlay(c, "node-1")["address"] == "10.77.0.1"
    assert overlay(c, "node-2")["address"] == "10.77.0.2"


def test_another_nodes_key_is_refused(cluster):
    c = cluster
    tok = c.token(uses=2)
    start(c, "node-1", tok)
    c.wait_ready("node-1")
    one = overlay(c, "node-1")
    # a node whose key file is node-1's (copied, as a cloned disk would have it)
    d = c.agent_dir("copy")
    d.mkdir(parents=True)
    shutil.copy(c.agent_dir("node-1") / "overlay.key", d / "overlay.key")
    start(c, "copy", tok)
    c.wait_ready("copy")
    bad = overlay(c, "copy")
    assert "address" not in bad and "reported the overlay key of node node-1" in bad["error"]
    assert overlay(c, "node-1") == one  # undisturbed


def test_no_overlay_and_bad_choices_say_why(cluster):
    c = cluster
    tok = c.token(uses=3)
    start(c, "plain", tok, "--overlay", "off")
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
    p = c.start_agent("damaged", token=tok)
    assert p.wait_exit() != 0
    assert "overlay.key: not a WireGuard private key" in p.output(), p.output()
    r = subprocess.run([c.bin("brambled"), "--data-dir", str(c.root / "x"), "--overlay-net",
                        "10.0.0.1/16"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "did you mean 10.0.0.0/16?" in r.stderr, r.stderr
