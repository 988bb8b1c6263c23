"""benchnet.py - a link for the benches that measure one: a network namespace
joined to the host by a veth pair, one direction shaped with tbf.

    up = Uplink("200mbit", shape="far")   # what leaves the namespace is shaped
    # (subnet="10.252.201": its /24; burst, latency: tbf's; route: a default
    # route through the host)
    ... run things with ["ip", "netns", "exec", up.ns, ...], reach them at up.ns_ip
    up.sent("far"), up.sent("host")       # bytes each end has sent (the kernel's)
    up.remove()
    wait(lambda: ..., 30, "the agent")   # a condition, with a deadline
"""
import os
import subprocess
import time


def wait(pred, timeout=600, what="a condition"):
    """pred()'s first true value, asked every 20 ms; RuntimeError after timeout s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def stop_all(procs, grace=10):
    """SIGTERM every process of procs still running, then SIGKILL what is left after
    grace seconds each."""
    import signal
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()


def sh(*argv):
    subprocess.run(argv, check=True, capture_output=True)


class Uplink:
    """A namespace joined to the host by a veth pair; shape: "far" (the namespace's
    end sends at most rate) or "host" (the host's end does)."""

    def __init__(self, rate, shape="far", subnet=None, burst="256kb", latency="100ms",
                 route=False):
        tag = os.urandom(3).hex()
        self.ns, self.host, self.far = f"brup-{tag}", f"bruh{tag}", f"brun{tag}"
        subnet = subnet or f"10.251.{int(tag[:2], 16) % 250}"  # (A.B.C: its /24)
        self.host_ip, self.ns_ip = f"{subnet}.1", f"{subnet}.2"
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.host, "type", "veth", "peer", "name", self.far)
        sh("ip", "link", "set", self.far, "netns", self.ns)
        sh("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host)
        sh("ip", "link", "set", self.host, "up")
        for cmd in (["ip", "addr", "add", f"{self.ns_ip}/24", "dev", self.far],
                    ["ip", "link", "set", self.far, "up"], ["ip", "link", "set", "lo", "up"]):
            sh("ip", "netns", "exec", self.ns, *cmd)
        if route:  # (the host forwards: other namespaces' links are reached through it)
            sh("ip", "netns", "exec", self.ns, "ip", "route", "add", "default", "via",
               self.host_ip)
        tbf = ["tc", "qdisc", "add", "dev", self.far if shape == "far" else self.host, "root",
               "tbf", "rate", rate, "burst", burst, "latency", latency]
        sh(*(["ip", "netns", "exec", self.ns] if shape == "far" else []), *tbf)

    def sent(self, end="far"):
        """Bytes that end of the link has sent."""
        dev = self.far if end == "far" else self.host
        argv = ["cat", f"/sys/class/net/{dev}/statistics/tx_bytes"]
        if end == "far":
            argv = ["ip", "netns", "exec", self.ns] + argv
        return int(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)

    def remove(self):
        subprocess.run(["ip", "link", "del", self.host], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
