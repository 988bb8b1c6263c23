#!/usr/bin/env python3
"""dataset.py BIN [SIZE_MIB] [RATE] [--image] - one data set (or, with --image, one
image loaded with `bramble image load`: a docker-archive of SIZE_MIB made here,
run by jobs whose spec says image:) to three nodes: what the
coordinator's link (the "home uplink", a veth shaped to RATE, default 200mbit, out
of the coordinator's own network namespace) carries, side by side in one run:

  * a gang of 3 that mounts it (`data:`): its first rank's node reads it from the
    coordinator, the two others from that node (the nearest holder);
  * three separate jobs placed at the same moment on three other nodes, before
    any holds it: the first's node reads it from the coordinator, and the two
    others wait for it and read it there.

The uplink's bytes are the kernel's count of what left the coordinator's end of
the veth (tx_bytes), not bramble's reports; the nodes reach each other on the
host, off the uplink.
Each case runs on three fresh agents (empty caches). Needs root (the agents
mount the data set) and SIZE_MIB of disk four times over (the store, and a cache
per node). Default 1024 MiB, in 64 MiB files."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchnet import Uplink, wait  # noqa: E402 (beside this file)

IMAGE = "--image" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--image"]
BIN = os.path.abspath(ARGS[0] if len(ARGS) > 0 else "build/bin")
SIZE_MIB = int(ARGS[1]) if len(ARGS) > 1 else 1024
RATE = ARGS[2] if len(ARGS) > 2 else "200mbit"
FILE_MIB = 64


def make_image(path, ds):
    """A docker-archive at path whose one layer holds the files of directory ds
    (random bytes) and busybox as /bin/sh: what `podman save` writes. Its config's
    sha256 (podman's ID for it)."""
    import hashlib
    import io
    import tarfile
    layer = f"{path}.layer"
    with tarfile.open(layer, "w") as t:
        t.add("/bin/busybox", "bin/sh")
        t.add(ds, "weights")
    h = hashlib.sha256()
    with open(layer, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers",
                                    "diff_ids": [f"sha256:{h.hexdigest()}"]}}).encode()
    cid = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{"Config": f"{cid}.json", "RepoTags": ["localhost/weights:1"],
                            "Layers": [f"{h.hexdigest()}.tar"]}]).encode()
    with tarfile.open(path, "w") as t:
        t.add(layer, f"{h.hexdigest()}.tar")
        for name, data in ((f"{cid}.json", config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    os.unlink(layer)
    return cid



class Cluster:
    def __init__(self, tmp, up):
        self.tmp = tmp
        self.up = up
        self.procs = []
        self.named = {}
        self.env = dict(os.environ,
                        BRAMBLE_CREDENTIAL=f"{tmp}/coord/admin.credential")
        subprocess.run([f"{BIN}/brambled", "init", "--data-dir", f"{tmp}/coord", "--listen",
                        f"tcp://{up.ns_ip}:7700"], check=True, capture_output=True)
        self.coord = self.spawn("brambled", ["ip", "netns", "exec", up.ns, f"{BIN}/brambled",
                                             "--data-dir", f"{tmp}/coord",
                                             "--heartbeat-interval", "250ms"])
        wait(lambda: self.cli("nodes", "--json", check=False) is not None, 30,
             "the coordinator")

    def spawn(self, name, argv):
        log = open(f"{self.tmp}/{name}.log", "w")
        p = subprocess.Popen(argv, stdout=log, stderr=log)
        self.procs.append(p)
        self.named[name] = p
        return p

    def stop_agents(self, names):
        """Stop these agents, and wait until the coordinator no longer counts them
        ready (so no later job reads from their caches)."""
        for n in names:
            self.named[n].send_signal(signal.SIGTERM)
            self.named[n].wait(30)
        wait(lambda: not any(x["state"] == "ready" for x in json.loads(self.cli("nodes", "--json"))
                             if x["name"] in names), 60, "the stopped agents to leave")

    def cli(self, *args, check=True):
        r = subprocess.run([f"{BIN}/bramble", *map(str, args)], capture_output=True,
                           text=True, env=self.env, timeout=600)
        if r.returncode != 0:
            if check:
                raise RuntimeError(f"bramble {' '.join(map(str, args))}: {r.stderr}")
            return None
        return r.stdout

    def agents(self, names):
        tok = self.cli("token", "create", "--uses", len(names)).strip()
        for n in names:
            self.spawn(n, [f"{BIN}/bramble-agent", "--data-dir", f"{self.tmp}/{n}", "--join",
                           tok, "--name", n, "--probe-port", "0", "--replica-port", "0",
                           "--allow-root-jobs"])
        wait(lambda: all(x["state"] == "ready" for x in json.loads(self.cli("nodes", "--json"))
                         if x["name"] in names) and
             len([x for x in json.loads(self.cli("nodes", "--json"))
                  if x["name"] in names]) == len(names), 60, "the agents")

    def probed(self, names):
        m = json.loads(self.cli("probe", "--json"))
        idx = [m["nodes"].index(n) for n in names]
        return all(m["rtt_ms"][i][j] is not None and m["rtt_ms"][i][j] >= 0
                   for i in idx for j in idx if i != j)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def run_case(c, spec_text, ids_wanted):
    """Submit what spec_text (one or more specs) says; (uplink bytes, seconds)."""
    before, t0 = c.up.sent(), time.monotonic()
    ids = []
    for i, text in enumerate(spec_text):
        path = f"{c.tmp}/spec{i}-{time.monotonic_ns()}.yaml"
        with open(path, "w") as f:
            f.write(text)
        ids.append(json.loads(c.cli("submit", path, "--json"))["id"])
    for jid in ids:
        j = wait(lambda: (lambda x: x if x["state"] in ("completed", "failed") else None)(
            json.loads(c.cli("job", "show", jid, "--json"))), 1800, f"job {jid}")
        assert j["state"] == "completed", j
    return c.up.sent() - before, time.monotonic() - t0, ids


def main():
    if os.geteuid() != 0:
        print("dataset.py: needs root (agents mount data sets); skipped")
        return
    tmp = tempfile.mkdtemp(prefix="bramble-bench-data-", dir="/var/tmp")
    c = None
    up = Uplink(RATE, shape="far")
    try:
        ds = f"{tmp}/weights"
        os.makedirs(ds)
        for i in range(SIZE_MIB // FILE_MIB):
            with open(f"{ds}/shard-{i:03d}.bin", "wb") as f:
                for _ in range(FILE_MIB):
                    f.write(os.urandom(1 << 20))
        size = SIZE_MIB << 20
        c = Cluster(tmp, up)
        mnt = f"{tmp}/mnt"
        os.makedirs(mnt, exist_ok=True)
        cmd = f"cat {mnt}/shard-000.bin > /dev/null"
        uses = f"data: {{weights: {mnt}}}"
        if IMAGE:
            image_id = make_image(f"{tmp}/weights.tar", ds)
            shutil.rmtree(ds)
            size = os.path.getsize(f"{tmp}/weights.tar")
            t0 = time.monotonic()
            c.cli("image", "load", f"{tmp}/weights.tar", "weights:1")
            uses = "image: weights:1"
            cmd = "cat /weights/shard-000.bin > /dev/null"
        else:
            t0 = time.monotonic()
            c.cli("data", "push", ds, "weights")
        push_s = time.monotonic() - t0
        what = "the image" if IMAGE else "the data set"

        def forget_image():  # (the nodes share the host's podman: each case loads it)
            if IMAGE:
                subprocess.run(["podman", "rmi", "-f", image_id], capture_output=True)

        gang = ["g1", "g2", "g3"]
        c.agents(gang)
        wait(lambda: c.probed(gang), 60, "the gang's nodes to probe each other")
        forget_image()
        g_bytes, g_s, gids = run_case(
            c, [f"name: gang\nresources: {{nodes: 3, cpus: 0}}\n"
                f"{uses}\ncommand: {cmd}\n"], 1)
        sources = [e["reason"] for e in json.loads(c.cli("job", "show", gids[0], "--json"))
                   ["events"] if "fetched to" in (e["reason"] or "")]

        solo = ["s1", "s2", "s3"]
        c.stop_agents(gang)  # (their caches hold it now)
        c.agents(solo)
        wait(lambda: c.probed(solo), 60, "the three nodes to probe each other")
        forget_image()
        s_bytes, s_s, sids = run_case(
            c, [f"name: solo{i}\nresources: {{nodelist: [{n}], cpus: 0}}\n"
                f"{uses}\ncommand: {cmd}\n" for i, n in enumerate(solo)], 3)
        forget_image()

        mib = lambda b: b / (1 << 20)
        print(f"{'image' if IMAGE else 'data set'}: {mib(size):.0f} MiB "
              f"({SIZE_MIB // FILE_MIB} files); {'load' if IMAGE else 'push'} {push_s:.1f} s; "
              f"uplink {RATE}")
        print(f"gang of 3 (nodes read from the nearest holder): uplink {mib(g_bytes):.0f} MiB "
              f"= {g_bytes / size:.2f}x {what}, submit -> done {g_s:.1f} s")
        for s in sources:
            print(f"  {s}")
        print(f"3 jobs placed at once (the first's node reads the coordinator, the others "
              f"wait for it and read it there): uplink {mib(s_bytes):.0f} MiB = "
              f"{s_bytes / size:.2f}x, submit -> done {s_s:.1f} s")
        for jid in sids:
            for e in json.loads(c.cli("job", "show", jid, "--json"))["events"]:
                if "fetched to" in (e["reason"] or "") or "waits for" in (e["reason"] or ""):
                    print(f"  job {jid}: {e['reason']}")
    finally:
        if c:
            c.stop()
        up.remove()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
