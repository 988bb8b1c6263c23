#!/usr/bin/env python3
"""container_start.py BIN [N] - what `image:` adds to a job's start, side by side in one
run on a local cluster (`bramble up --agents 1`), loopback only.

An image of busybox-static is made here (`podman import`, no registry) and is on
the node already (cached). Then N (default 20) bare jobs and N jobs in that image,
alternating, one at a time, each of whose first act is `touch started` in its
working directory (a host directory, mounted into the container): the start is
from just before `bramble submit` to that file's time. The first container job (which finds the limits podman may give) is
not counted. p50 and p90 of each, and what the container adds.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

from benchnet import wait  # noqa: E402 (beside this file)
from localcluster import LocalCluster  # noqa: E402

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
N = int(sys.argv[2]) if len(sys.argv) > 2 else 20

BARE = "name: bare-{i}\nresources: {{cpus: 0}}\nworkdir: {dir}\ncommand: touch started\n"
IMAGE = ("name: ct-{i}\nresources: {{cpus: 0}}\nworkdir: {dir}\nimage: {image}\n"
         "command: touch started\n")


def make_image():
    root = tempfile.mkdtemp(prefix="bramble-ctbench-")
    try:
        os.mkdir(os.path.join(root, "bin"))
        shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
        for cmd in ("sh", "touch"):
            os.symlink("busybox", os.path.join(root, "bin", cmd))
        name = f"localhost/bramble-ctbench:{uuid.uuid4().hex[:8]}"
        tar = subprocess.run(["tar", "-C", root, "-c", "."], capture_output=True, check=True)
        subprocess.run(["podman", "import", "-", name], input=tar.stdout, check=True,
                       capture_output=True)
        return name
    finally:
        shutil.rmtree(root, ignore_errors=True)


def start_ms(lc, template, **kw):
    """ms from submit to the command's first act (the file it makes in its working
    directory, stamped by the host's clock: the container's too)."""
    d = tempfile.mkdtemp(prefix="job-", dir=lc.tmp)
    t0 = time.time_ns()
    job = lc.submit(template.format(dir=d, **kw))
    wait(lambda: '"completed"' in lc.run("job", "show", str(job), "--json").stdout
         or '"failed"' in lc.run("job", "show", str(job), "--json").stdout,
         60, f"job {job} to end")
    path = os.path.join(d, "started")
    assert os.path.exists(path), (job, lc.run("logs", str(job)).stderr)
    return (os.stat(path).st_mtime_ns - t0) / 1e6


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def main():
    image = make_image()
    lc = LocalCluster(BIN, "bramble-ctbench-", agents=1)
    try:
        start_ms(lc, IMAGE, i="first", image=image)
        bare, ct = [], []
        for i in range(N):
            bare.append(start_ms(lc, BARE, i=i))
            ct.append(start_ms(lc, IMAGE, i=i, image=image))
    finally:
        lc.down()
        subprocess.run(["podman", "rmi", "-f", image], capture_output=True)
    print(f"start of a job, {N} each, alternating (ms from submit to its first act)")
    print(f"{'':24} {'p50':>8} {'p90':>8}")
    print(f"{'bare':24} {pct(bare, .5):8.1f} {pct(bare, .9):8.1f}")
    print(f"{'in a cached image':24} {pct(ct, .5):8.1f} {pct(ct, .9):8.1f}")
    print(f"{'added by the container':24} {pct(ct, .5) - pct(bare, .5):+8.1f} "
          f"{pct(ct, .9) - pct(bare, .9):+8.1f}")


if __name__ == "__main__":
    main()
