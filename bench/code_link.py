#!/usr/bin/env python3
"""code_link.py BIN [SIZE_MIB] [FILES] [RATE] - a job's code over a slow link, side
by side with rsync in one run: a tree of FILES files (default 10,000) of SIZE_MIB
in all (default 1024) on the host (the "laptop"), and the coordinator with one
agent in a network namespace behind a veth whose host end sends at most RATE
(default 200mbit):

  * bramble: `bramble submit --code TREE` of a job that runs `true`, from the
    command's start until the job is running (the tree uploaded over the link,
    then fetched by the agent beside the coordinator);
  * rsync: `rsync -a TREE/ rsync://FAR/m/` to an rsync daemon in the namespace,
    into an empty directory.

Prints each one's seconds, the bytes the link carried (the kernel's count at the
host's end) and the share of the link's rate they made use of. Needs root and
rsync."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from benchnet import stop_all, Uplink, wait  # noqa: E402 (beside this file)

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/bin")
SIZE_MIB = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
FILES = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
RATE = sys.argv[4] if len(sys.argv) > 4 else "200mbit"


def rate_bits(text):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for u, k in units.items():
        if text.endswith(u):
            return float(text[: -len(u)]) * k
    return float(text)



def main():
    if os.geteuid() != 0 or not shutil.which("rsync"):
        print("code_link.py: needs root and rsync; skipped")
        return
    tmp = tempfile.mkdtemp(prefix="bramble-bench-code-", dir="/var/tmp")
    up = Uplink(RATE, shape="host")
    procs = []
    try:
        tree = f"{tmp}/tree"
        per = (SIZE_MIB << 20) // FILES
        for i in range(FILES):
            d = f"{tree}/d{i % 100:02d}"
            os.makedirs(d, exist_ok=True)
            with open(f"{d}/f{i:05d}.bin", "wb") as f:
                f.write(os.urandom(per))
        size = per * FILES
        env = dict(os.environ, BRAMBLE_CREDENTIAL=f"{tmp}/coord/admin.credential")
        ns = ["ip", "netns", "exec", up.ns]
        subprocess.run([f"{BIN}/brambled", "init", "--data-dir", f"{tmp}/coord", "--listen",
                        f"tcp://{up.ns_ip}:7700"], check=True, capture_output=True)

        def spawn(name, argv):
            log = open(f"{tmp}/{name}.log", "w")
            procs.append(subprocess.Popen(ns + argv, stdout=log, stderr=log))

        def cli(*args):
            r = subprocess.run([f"{BIN}/bramble", *map(str, args)], capture_output=True,
                               text=True, env=env, timeout=3600)
            if r.returncode != 0:
                raise RuntimeError(f"bramble {' '.join(map(str, args))}: {r.stderr}")
            return r.stdout

        spawn("brambled", [f"{BIN}/brambled", "--data-dir", f"{tmp}/coord"])
        wait(lambda: subprocess.run([f"{BIN}/bramble", "nodes"], env=env,
                                    capture_output=True).returncode == 0, 30, "brambled")
        tok = cli("token", "create").strip()
        spawn("agent", [f"{BIN}/bramble-agent", "--data-dir", f"{tmp}/node", "--join", tok,
                        "--name", "far", "--allow-root-jobs"])
        wait(lambda: any(n["state"] == "ready" for n in json.loads(cli("nodes", "--json"))),
             30, "the agent")

        spec = f"{tmp}/job.yaml"
        with open(spec, "w") as f:
            f.write("name: code\ncommand: 'true'\nresources: {cpus: 0}\n")
        before, t0 = up.sent("host"), time.monotonic()
        jid = json.loads(cli("submit", spec, "--code", tree, "--json"))["id"]
        up_s = time.monotonic() - t0  # uploaded and acknowledged
        wait(lambda: json.loads(cli("job", "show", jid, "--json"))["started"], 3600,
             "the job to run")
        b_s, b_bytes = time.monotonic() - t0, up.sent("host") - before
        fetched = [e["reason"] for e in json.loads(cli("job", "show", jid, "--json"))["events"]
                   if "fetched to" in (e["reason"] or "")]

        os.makedirs(f"{tmp}/dest")
        with open(f"{tmp}/rsyncd.conf", "w") as f:
            f.write(f"pid file = {tmp}/rsyncd.pid\nuse chroot = no\n[m]\n"
                    f"path = {tmp}/dest\nread only = no\nuid = root\ngid = root\n")
        spawn("rsyncd", ["rsync", "--daemon", "--no-detach", f"--config={tmp}/rsyncd.conf",
                         f"--address={up.ns_ip}"])
        wait(lambda: subprocess.run(["rsync", f"rsync://{up.ns_ip}/"],
                                    capture_output=True).returncode == 0, 30, "rsyncd")
        before, t0 = up.sent("host"), time.monotonic()
        subprocess.run(["rsync", "-a", f"{tree}/", f"rsync://{up.ns_ip}/m/"], check=True)
        r_s, r_bytes = time.monotonic() - t0, up.sent("host") - before

        link = rate_bits(RATE) / 8
        print(f"tree: {FILES} files, {size / (1 << 20):.0f} MiB; link {RATE} "
              f"({link / (1 << 20):.1f} MiB/s), the ideal {size / link:.1f} s")
        for name, s, b in (("bramble submit --code, to running", b_s, b_bytes),
                           ("  of which the upload, to the submit's answer", up_s, b_bytes),
                           ("rsync -a to an empty dir", r_s, r_bytes)):
            print(f"{name}: {s:.1f} s, link carried {b / (1 << 20):.0f} MiB, "
                  f"{size / s / link * 100:.1f} % of the link's rate for the tree's bytes")
        for e in fetched:
            print(f"  then {e}")
    finally:
        stop_all(procs, 10)
        up.remove()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
