#!/usr/bin/python3
"""shell_many.py - many `bramble shell`s open at once: all answered, and what they
cost the coordinator's memory.

Starts a local cluster (`bramble up --agents NODES`, loopback only). The
coordinator allows 32 shells and forwards per user and 512 in all, so the shells
are shared among USERS users (`bramble user add`), each with a long job of its own
(`sleep 3600`, cpus: 0), the jobs pinned round-robin to the nodes
(resources.nodelist). Once every job runs, SHELLS clients are started at once,
user i % USERS taking shell i:

    bramble --credential USER shell JOB -- sh -c 'echo ready; read x; echo bye'

each with its stdin a pipe the bench holds open. Measured:

  * time to ready: from a client's start until "ready" arrives on its stdout
    (p50, p95, max), and the time from the first start until all are open at
    once (deadline --deadline s, default 120; how many made it if not);
  * the coordinator's memory (VmRSS, VmHWM of /proc/PID/status, its open fds
    and threads): idle before the shells start, with all of them open, and
    after they closed; the difference per shell; the same RSS for each agent
    (its own processes, not the job's);
  * then every stdin is closed: each shell must print "bye" and exit 0.

Usage:
  /usr/bin/python3 bench/shell_many.py [--bin build/bin] [--shells 100]
      [--users 4] [--nodes 3] [--deadline 120] [--json]
Prints a table, or with --json one JSON object. Exits 1 when not every shell
was answered and closed cleanly.
"""
import argparse
import json
import math
import os
import selectors
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchnet import wait  # noqa: E402 (beside this file)
from localcluster import LocalCluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REMOTE = ["sh", "-c", "echo ready; read x; echo bye"]
PER_USER, IN_ALL = 32, 512  # the coordinator's bounds (docs/shell.md)


def log(msg):
    print(f"[shell_many] {msg}", file=sys.stderr, flush=True)


def proc_status(pid):
    """VmRSS and VmHWM (KiB), threads and open fds of pid; None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            st = dict(line.split(":", 1) for line in f if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    kib = lambda k: int(st[k].split()[0]) if k in st else 0  # noqa: E731
    return {"rss_kib": kib("VmRSS"), "hwm_kib": kib("VmHWM"),
            "threads": int(st.get("Threads", "0")), "fds": fds}


def children_map():
    """ppid -> [(pid, comm)] over /proc."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        fields = s[s.rindex(")") + 2:].split()
        if fields[0] == "Z":
            continue
        kids.setdefault(int(fields[1]), []).append((int(d), comm))
    return kids


def agent_rss(pid):
    """RSS (KiB) of an agent: its own process and its bramble-* descendants
    (helpers), not the job's commands or the shells' remote commands."""
    kids = children_map()
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        st = proc_status(p)
        total += st["rss_kib"] if st else 0
        todo += [c for c, comm in kids.get(p, []) if comm.startswith("bramble")]
    return total


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))] if xs else float("nan")


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


class Shell:
    def __init__(self, i, user, cred, job):
        self.i, self.user, self.cred, self.job = i, user, cred, job
        self.p = None
        self.out = b""
        self.eof = False
        self.t0 = self.t_ready = None
        self.rc = None

    def start(self, bin_dir, env, errdir):
        self.err = open(os.path.join(errdir, f"shell-{self.i}.err"), "w+b")
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen(
            [os.path.join(bin_dir, "bramble"), "--credential", self.cred, "shell",
             str(self.job), "--", *REMOTE],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, env=env,
            bufsize=0, start_new_session=True)
        os.set_blocking(self.p.stdout.fileno(), False)

    def feed(self):
        """Reads what is there on stdout; False at EOF."""
        try:
            b = os.read(self.p.stdout.fileno(), 65536)
        except BlockingIOError:
            return True
        if not b:
            self.eof = True
            return False
        self.out += b
        if self.t_ready is None and b"ready\n" in self.out:
            self.t_ready = time.perf_counter()
        return True

    def stderr_text(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace").strip()

    def kill(self):
        if self.p and self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def pump(shells, until, deadline):
    """Reads the shells' stdouts until until() or the deadline (monotonic)."""
    sel = selectors.DefaultSelector()
    for s in shells:
        if not s.eof:
            sel.register(s.p.stdout, selectors.EVENT_READ, s)
    try:
        while not until() and time.monotonic() < deadline and sel.get_map():
            for key, _ in sel.select(timeout=min(0.5, max(0, deadline - time.monotonic()))):
                if not key.data.feed():
                    sel.unregister(key.fileobj)
    finally:
        sel.close()


def kill_leftovers(tag):
    """Kills (by pid) what still runs with tag (the cluster's directory) in its
    command line: agents, the coordinator, the gateway, shells."""
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if tag.encode() in cmd:
            try:
                os.kill(int(d), signal.SIGKILL)
            except OSError:
                pass


def fmt_mib(kib):
    return f"{kib / 1024:.1f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                    help="where bramble, brambled and bramble-agent are (default build/bin)")
    ap.add_argument("--shells", type=int, default=100)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--deadline", type=float, default=120.0,
                    help="seconds for all the shells to be open at once (default 120)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="open and close them this many times; the coordinator's RSS "
                         "after each round is reported (the figures are the last round's)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    bin_dir = os.path.abspath(a.bin)
    per_user = math.ceil(a.shells / a.users)
    if per_user > PER_USER or a.shells > IN_ALL:
        log(f"warning: {per_user} shells per user / {a.shells} in all is over the "
            f"coordinator's bounds ({PER_USER} per user, {IN_ALL} in all): expect refusals")

    log(f"starting a local cluster of {a.nodes} nodes")
    lc = LocalCluster(bin_dir, "bramble-shellmany-", agents=a.nodes)
    shells = []
    res = {"shells": a.shells, "users": a.users, "nodes": a.nodes}
    try:
        coord = read_pid(os.path.join(lc.dir, "coordinator.pid"))
        if coord is None or proc_status(coord) is None:
            raise RuntimeError("no coordinator pid in " + lc.dir)
        agents = {f"node-{n}": read_pid(os.path.join(lc.dir, f"node-{n}.pid"))
                  for n in range(1, a.nodes + 1)}

        users = []
        for u in range(a.users):
            name = f"u{u + 1}"
            cred = os.path.join(lc.tmp, name + ".cred")
            lc.run("user", "add", name, "--out", cred)
            node = f"node-{u % a.nodes + 1}"
            spec = os.path.join(lc.tmp, f"hold-{name}.yaml")
            with open(spec, "w") as f:
                f.write(f"name: hold-{name}\nresources: {{cpus: 0, nodelist: [{node}]}}\n"
                        "command: sleep 3600\n")
            job = int(lc.run("--credential", cred, "submit", spec).stdout.strip())
            users.append((name, cred, job, node))
        for name, cred, job, node in users:
            wait(lambda: json.loads(lc.run("job", "show", str(job), "--json").stdout)
                 .get("state") == "running", 60, f"job {job} of {name} to run")
        log("jobs running: " + ", ".join(f"{n} job {j} on {nd}" for n, _, j, nd in users))

        time.sleep(1)  # let the coordinator settle after the submissions
        idle = proc_status(coord)
        agents_idle = {n: agent_rss(p) for n, p in agents.items()}

        rounds_after = []
        for rnd in range(a.rounds):
            shells = [Shell(i, *users[i % a.users][:3]) for i in range(a.shells)]
            errdir = os.path.join(lc.tmp, f"shells-{rnd}")
            os.makedirs(errdir)
            log(f"starting {a.shells} shells")
            t_first = time.perf_counter()
            for s in shells:
                s.start(bin_dir, lc.env, errdir)
            spawn_s = time.perf_counter() - t_first
            end = time.monotonic() + a.deadline
            pump(shells, lambda: all(s.t_ready for s in shells), end)
            ready = [s for s in shells if s.t_ready]
            # All ready and still open at the same moment?
            open_now = [s for s in ready if s.p.poll() is None and not s.eof]
            all_open = len(open_now) == a.shells
            t_all = (max(s.t_ready for s in ready) - t_first) if all_open else None
            with_open = proc_status(coord)
            agents_open = {n: agent_rss(p) for n, p in agents.items()}
            log(f"{len(ready)} of {a.shells} ready ({len(open_now)} open at once); closing")

            for s in shells:
                try:
                    s.p.stdin.close()
                except OSError:
                    pass
            pump(shells, lambda: all(s.eof for s in shells), time.monotonic() + 60)
            end = time.monotonic() + 10
            for s in shells:
                try:
                    s.rc = s.p.wait(timeout=max(0.1, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    s.kill()
                    s.rc = "hung"
            time.sleep(1)  # let the coordinator free what the shells held
            after = proc_status(coord)
            agents_after = {n: agent_rss(p) for n, p in agents.items()}
            rounds_after.append(after["rss_kib"])
            if rnd + 1 < a.rounds:
                for s in shells:
                    s.kill()
        good = [s for s in shells if s.t_ready and s.rc == 0 and b"bye\n" in s.out]
        bad = [s for s in shells if s not in good]
        lat = [(s.t_ready - s.t0) * 1000 for s in ready]
        errors = {}
        for s in bad:
            e = s.stderr_text().splitlines()
            key = f"rc {s.rc}: " + (e[-1] if e else "(no stderr)")
            errors[key] = errors.get(key, 0) + 1
        res.update({
            "answered": len(ready), "open_at_once": len(open_now), "all_open": all_open,
            "closed_ok": len(good), "spawn_s": round(spawn_s, 3),
            "ready_ms": {"p50": round(pct(lat, 0.5), 1), "p95": round(pct(lat, 0.95), 1),
                         "max": round(max(lat), 1) if lat else None},
            "all_open_s": round(t_all, 3) if t_all is not None else None,
            "coordinator": {"idle": idle, "open": with_open, "after": after,
                            "per_shell_kib": round((with_open["rss_kib"] - idle["rss_kib"])
                                                   / max(1, len(open_now)), 1)},
            "agents_rss_kib": {n: {"idle": agents_idle[n], "open": agents_open[n],
                                   "after": agents_after[n]} for n in agents},
            "errors": errors,
            "after_each_round_kib": rounds_after,
        })
    finally:
        for s in shells:
            s.kill()
        lc.down()
        kill_leftovers(lc.tmp)

    if a.json:
        print(json.dumps(res, indent=2))
    else:
        c = res["coordinator"]
        r = res["ready_ms"]
        print(f"{a.shells} shells at once, {a.users} users, {a.nodes} nodes (local cluster)")
        print(f"  shells answered        {res['answered']} of {a.shells} "
              f"({res['open_at_once']} open at once)")
        print(f"  closed cleanly         {res['closed_ok']} of {a.shells} (bye, exit 0)")
        print(f"  clients started in     {res['spawn_s'] * 1000:.0f} ms")
        print(f"  time to ready (ms)     p50 {r['p50']:.1f}  p95 {r['p95']:.1f}  max {r['max']}")
        print("  all open after         " + (f"{res['all_open_s'] * 1000:.0f} ms"
                                             if res["all_open"] else "never (deadline)"))
        print("  coordinator            VmRSS       VmHWM       fds   threads")
        for k in ("idle", "open", "after"):
            st = c[k] or {"rss_kib": 0, "hwm_kib": 0, "fds": 0, "threads": 0}
            print(f"    {k:<20} {fmt_mib(st['rss_kib']):>10}  {fmt_mib(st['hwm_kib']):>10}"
                  f"  {st['fds']:>4}  {st['threads']:>4}")
        print(f"    per open shell       {c['per_shell_kib']:+.1f} KiB RSS")
        print("  agents RSS             idle        open        after")
        for n, v in res["agents_rss_kib"].items():
            print(f"    {n:<20} {fmt_mib(v['idle']):>10}  {fmt_mib(v['open']):>10}"
                  f"  {fmt_mib(v['after']):>10}")
        if len(res["after_each_round_kib"]) > 1:
            print("  coordinator RSS after each round: " +
                  ", ".join(fmt_mib(k) for k in res["after_each_round_kib"]))
        for e, n in res["errors"].items():
            print(f"  failed: {n} x {e}")
    ok = res.get("closed_ok") == a.shells and res.get("all_open")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
