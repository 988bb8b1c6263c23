"""Attacks from inside a node: local users and jobs against the agent's job socket,
against each other, and against the agent's own loop.

Every attacker is a separate uid (setpriv --reuid/--regid --clear-groups) or a
process outside the job; the agents run as root (this file needs root) with the
job user settings each test names. Files the jobs touch live in a world-readable
scratch dir under /tmp (pytest's own tmp dir is root's, mode 0700).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import BIN, DEADLINE, proc_state, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (switches uids)")

NOBODY = 65534
ATTACKER = 64123  # a uid no job runs as
SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"

# A job's own raw request to its agent (what `bramble checkpoint` sends, but with a
# path the CLI would have resolved first): prints the agent's answer.
RAW_CLIENT = r"""
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(20)
s.connect("\0" + os.environ["BRAMBLE_AGENT_SOCK"][1:])
s.send(json.dumps({"type": "checkpoint", "path": sys.argv[1],
                   "step": int(sys.argv[2])}).encode())
print("ANSWER", sys.argv[1], s.recv(8192).decode(), flush=True)
"""


@pytest.fixture
def scratch():
    """A scratch dir every uid may enter (mode 0755, root's)."""
    d = Path(tempfile.mkdtemp(prefix="bramble-node-attacks-", dir="/tmp"))
    os.chmod(d, 0o755)
    (d / "raw_client.py").write_text(RAW_CLIENT)
    os.chmod(d / "raw_client.py", 0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def owned_dir(path, uid, mode=0o755):
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, uid)
    os.chmod(path, mode)
    return path


def as_uid(uid, argv, env=None, timeout=60):
    """Run argv as uid (its gid the same number, no groups)."""
    return subprocess.run([SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                           *map(str, argv)], env=env, capture_output=True, text=True,
                          timeout=timeout)


def proc_uid(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return None


def one_node(make_cluster, extra=(), env=None):
    c = make_cluster()
    saved = c.env
    if env:
        c.env = dict(c.env, **env)
    try:
        c.start_agent("n1", extra=list(extra))
    finally:
        c.env = saved
    c.wait_ready("n1")
    return c


def job_pids(c, jid):
    return sorted(c.job_procs(jid))


def steps(c, jid):
    """The steps of the job's checkpoints (one a job reported itself may be found by
    the watcher too)."""
    return sorted({ck["step"] for ck in c.job(jid)["checkpoints"]})


def last_seen_age(c, name):
    """Seconds since the coordinator last heard node name."""
    n = c.nodes()[name]
    seen = n["last_seen"]
    return time.time() - float(seen)


# ---------------------------------------------------------------------------
# the job socket: who may report what


def test_job_socket_refuses_forged_requests(make_cluster, scratch):
    c = one_node(make_cluster, ["--job-user", "nobody"])
    ckpt = owned_dir(scratch / "ckpt", NOBODY)
    outside = owned_dir(scratch / "outside", NOBODY)
    bramble = BIN / "bramble"
    script = scratch / "job.sh"
    script.write_text(f"""
mkdir -p {ckpt}/checkpoint-1 && touch {ckpt}/checkpoint-1/weights
{bramble} checkpoint {ckpt}/checkpoint-1 --step 1 && echo LEGIT-OK
ln -s /etc {ckpt}/checkpoint-7
python3 {scratch}/raw_client.py {ckpt}/checkpoint-7/shadow 7
mkdir -p {outside}/checkpoint-8
python3 {scratch}/raw_client.py {outside}/checkpoint-8 8
echo "sock=$BRAMBLE_AGENT_SOCK task=$BRAMBLE_TASK"
exec sleep 1000
""")
    os.chmod(script, 0o644)
    # the watcher looks for other names: what counts here is what the socket takes
    jid = c.submit(f"name: victim\ncommand: sh {script}\n"
                   f"checkpoint:\n  dir: {ckpt}\n  pattern: \"watched-*\"\n")
    out = c.wait_logs(jid, "sock=")
    assert "LEGIT-OK" in out, out
    wait_for(lambda: steps(c, jid) == [1], what="the job's own report to count")
    # inside the job, a symlink out of the checkpoint dir and a path outside it
    m = re.search(r"ANSWER \S+/checkpoint-7/shadow (.*)", out)
    assert m and "refused" in m.group(1) and "out of the checkpoint dir" in m.group(1), out
    m = re.search(r"ANSWER \S+/checkpoint-8 (.*)", out)
    assert m and "not inside the job's checkpoint dir" in m.group(1), out
    sock, tag = re.search(r"sock=(\S+) task=(\S+)", out).groups()
    pid = job_pids(c, jid)[0]
    assert proc_uid(pid) == NOBODY

    forged_env = {"PATH": "/usr/bin:/bin", "BRAMBLE_AGENT_SOCK": sock, "BRAMBLE_TASK": tag,
                  "ASAN_OPTIONS": "detect_leaks=0"}
    evil = scratch / "evil.pt"
    evil.write_text("not a checkpoint")
    # another uid, pretending to be the job by its environment
    r = as_uid(ATTACKER, [bramble, "checkpoint", evil, "--step", "100000"], env=forged_env)
    assert r.returncode == 1, r
    assert "refused" in r.stderr and "not inside a running job" in r.stderr, r.stderr
    r = as_uid(ATTACKER, [bramble, "checkpoint", "/etc/shadow", "--step", "5"], env=forged_env)
    assert r.returncode == 1 and "refused" in r.stderr, r
    # the job's own uid, but a process outside the attempt's tree
    r = as_uid(NOBODY, [bramble, "checkpoint", f"{ckpt}/checkpoint-1", "--step", "99"],
               env=forged_env)
    assert r.returncode == 1, r
    assert "not inside a running job" in r.stderr, r.stderr
    # root outside every job, too
    r = subprocess.run([str(bramble), "checkpoint", str(evil), "--step", "77"],
                       env=dict(os.environ, **forged_env), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "refused" in r.stderr, r
    assert steps(c, jid) == [1], c.job(jid)["checkpoints"]
    c.cli("cancel", jid)
    c.wait_job(jid, "cancelled")


def test_job_socket_checks_paths_as_the_job_user(make_cluster, scratch):
    """A root-only file inside the checkpoint dir is refused like a missing one: the
    agent does not tell the job what its user cannot see."""
    c = one_node(make_cluster, ["--job-user", "nobody"])
    ckpt = owned_dir(scratch / "ckpt", NOBODY)
    secret = ckpt / "private"
    secret.mkdir(mode=0o700)  # root's, inside the job's dir
    (secret / "checkpoint-3").write_text("root's")
    script = scratch / "job.sh"
    script.write_text(f"""
python3 {scratch}/raw_client.py {secret}/checkpoint-3 3
python3 {scratch}/raw_client.py {ckpt}/checkpoint-404 4
echo done-asking
exec sleep 1000
""")
    jid = c.submit(f"name: peek\ncommand: sh {script}\n"
                   f"checkpoint:\n  dir: {ckpt}\n")
    out = c.wait_logs(jid, "done-asking")
    m = re.search(r"ANSWER \S+/private/checkpoint-3 (.*)", out)
    assert m and "refused" in m.group(1) and "Permission denied" in m.group(1), out
    m = re.search(r"ANSWER \S+/checkpoint-404 (.*)", out)
    assert m and "No such file" in m.group(1), out
    assert steps(c, jid) == []
    c.cli("cancel", jid)
    c.wait_job(jid, "cancelled")


# ---------------------------------------------------------------------------
# the job socket cannot stall the agent


class IdleConnections:
    """Keeps n connections to the agent's job socket open, sending nothing; reopens
    those the agent closes."""

    def __init__(self, address, n=64):
        self.address = "\0" + address[1:]
        self.n = n
        self.socks = []
        self.stop = threading.Event()
        self.opened = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def fill(self):
        alive = []
        for s in self.socks:
            try:
                if s.recv(1, socket.MSG_DONTWAIT) == b"":
                    s.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                s.close()
                continue
            alive.append(s)
        self.socks = alive
        while len(self.socks) < self.n and not self.stop.is_set():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.settimeout(0.5)
            try:
                s.connect(self.address)
            except OSError:
                s.close()
                return
            s.setblocking(False)  # the check above: a recv that never waits
            self.socks.append(s)
            self.opened += 1

    def run(self):
        while not self.stop.is_set():
            self.fill()
            self.stop.wait(0.1)

    def __enter__(self):
        self.fill()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)
        for s in self.socks:
            s.close()


def test_idle_connections_do_not_freeze_jobs(make_cluster, scratch):
    c = one_node(make_cluster, ["--job-user", "nobody"])
    ckpt = owned_dir(scratch / "ckpt", NOBODY)
    go = scratch / "go"
    bramble = BIN / "bramble"
    script = scratch / "job.sh"
    script.write_text(f"""
echo "sock=$BRAMBLE_AGENT_SOCK"
while [ ! -e {go} ]; do sleep 0.1; done
mkdir -p {ckpt}/checkpoint-5
{bramble} checkpoint {ckpt}/checkpoint-5 --step 5 && echo REPORTED
exec sleep 1000
""")
    jid = c.submit(f"name: busy\ncommand: sh {script}\n"
                   f"checkpoint:\n  dir: {ckpt}\n")
    out = c.wait_logs(jid, "sock=")
    sock = re.search(r"sock=(\S+)", out).group(1)
    with IdleConnections(sock, 64) as idle:
        assert idle.opened >= 64
        end = time.monotonic() + 4.0
        while time.monotonic() < end:  # sampling a period, not waiting for a state
            for pid in job_pids(c, jid):
                assert proc_state(pid) not in ("T", "t"), f"job process {pid} frozen"
            assert last_seen_age(c, "n1") < 2.0, "the agent stopped heartbeating"
            assert c.nodes()["n1"]["state"] == "ready"
            time.sleep(0.2)
        go.write_text("")
        c.wait_logs(jid, "REPORTED")
        wait_for(lambda: steps(c, jid) == [5], what="the report made under load to count")
        for pid in job_pids(c, jid):
            assert proc_state(pid) not in ("T", "t")
    assert c.agents["n1"].alive()
    c.cli("cancel", jid)
    c.wait_job(jid, "cancelled")


# ---------------------------------------------------------------------------
# users' jobs on one node


def make_user(c, name, tmp):
    cred = tmp / f"{name}.credential"
    c.cli("user", "add", name, "--out", cred)
    return cred


def test_two_users_jobs_run_as_different_uids(make_cluster, scratch, tmp_path):
    c = one_node(make_cluster, ["--job-uids", "70000-79999"])
    creds = {u: make_user(c, u, tmp_path) for u in ("alice", "bob")}
    jids = {}
    for user, cred in creds.items():
        spec = c.write_spec(f"name: {user}-job\n"
                            f"command: echo SECRET_OF={user}; exec sleep 1000\n"
                            f"env: {{SECRET_OF: {user}}}\n")
        _, out, _ = c.cli("submit", spec, "--json", credential=cred)
        jids[user] = json.loads(out)["id"]
    for user, jid in jids.items():
        c.wait_logs(jid, f"SECRET_OF={user}")
    pids = {u: job_pids(c, jid)[0] for u, jid in jids.items()}
    uids = {u: proc_uid(p) for u, p in pids.items()}
    assert uids["alice"] != uids["bob"], uids
    assert all(70000 < uid <= 79999 for uid in uids.values()), uids
    # each one's uid cannot read the other's environment
    for me, other in (("alice", "bob"), ("bob", "alice")):
        r = as_uid(uids[me], ["cat", f"/proc/{pids[other]}/environ"])
        assert r.returncode != 0 and f"SECRET_OF={other}" not in r.stdout, r
        r = as_uid(uids[me], ["kill", "-0", str(pids[other])])
        assert r.returncode != 0, r
    # HOME: a private dir per uid the agent made
    for u, p in pids.items():
        env = dict(e.split("=", 1) for e in
                   Path(f"/proc/{p}/environ").read_bytes().decode().split("\0") if "=" in e)
        home = Path(env["HOME"])
        st = home.stat()
        assert st.st_uid == uids[u] and (st.st_mode & 0o777) == 0o700, (u, env["HOME"])
    # a shell into each one's job runs as that job's uid, with its variables
    for u, jid in jids.items():
        rc, out, err = c.cli("shell", jid, "--", "sh", "-c", 'echo "$(id -u) $SECRET_OF"',
                             credential=creds[u])
        assert (rc, out) == (0, f"{uids[u]} {u}\n"), (rc, out, err)
    for jid in jids.values():
        c.cli("cancel", jid)


def test_checkpoint_dir_is_made_for_the_jobs_uid(make_cluster, scratch, tmp_path):
    """--job-uids: a checkpoint.dir below a dir the job's uid may not write (root's,
    0755) is made by the agent and handed to that uid, so the job writes its
    checkpoints there; one the agent may not make for it (below another uid's dir)
    fails the attempt at its start, naming the dir and the uid."""
    c = one_node(make_cluster, ["--job-uids", "70000-79999"])
    cred = make_user(c, "carol", tmp_path)
    ckroot = scratch / "ckpts"
    ckroot.mkdir()
    os.chmod(ckroot, 0o755)  # root's: carol's uid may not write it
    ckdir = ckroot / "carol" / "run-1"
    ck = ckdir / "checkpoint-5"
    spec = c.write_spec(f"name: ck\n"
                        f"command: mkdir {ck} && echo '{{}}' > {ck}/trainer_state.json\n"
                        f"checkpoint:\n  dir: {ckdir}\n  pattern: \"checkpoint-*\"\n")
    _, out, _ = c.cli("submit", spec, "--json", credential=cred)
    jid = json.loads(out)["id"]
    job = c.wait_job(jid)
    assert job["state"] == "completed", job
    wait_for(lambda: steps(c, jid) == [5], what="its checkpoint to be counted")
    uid = os.stat(ck).st_uid
    assert 70000 < uid <= 79999, uid
    for d in (ckroot / "carol", ckdir):
        st = os.stat(d)
        assert (st.st_uid, st.st_gid) == (uid, uid), (d, st)
    assert os.stat(ckroot).st_uid == 0
    # below a dir of another uid: neither the job's uid nor the agent may make it
    nobodys = owned_dir(scratch / "nobodys", NOBODY)
    bad = nobodys / "run-2"
    spec = c.write_spec(f"name: ck-bad\ncommand: \"true\"\ncheckpoint:\n  dir: {bad}\n")
    _, out, _ = c.cli("submit", spec, "--json", credential=cred)
    job = c.wait_job(json.loads(out)["id"])
    assert job["state"] == "failed", job
    assert f"checkpoint.dir {bad}: cannot be made for uid {uid}: Permission denied" in \
        job["reason"], job["reason"]
    assert not bad.exists()


def start_bare_agent(c, name):
    """An agent as root with no job user flag at all (Cluster.start_agent would add
    --allow-root-jobs for a root tester)."""
    argv = [c.bin("bramble-agent"), "--data-dir", c.agent_dir(name), "--join", c.token(1),
            "--name", name, "--probe-port", "0"]
    proc = c.spawn(f"agent-{name}", argv)
    c.agents[name] = proc
    c.wait_ready(name)
    return proc


def test_root_agent_does_not_run_jobs_as_root(make_cluster, scratch):
    c = make_cluster()
    start_bare_agent(c, "n1")  # root, no --job-user / --job-uids / --allow-root-jobs
    jid = c.submit("name: as-root\ncommand: id -u; exec sleep 1000\n"
                   "restart:\n  max: 0\n")

    def decided():
        j = c.job(jid)
        procs = job_pids(c, jid)
        assert all(proc_uid(p) != 0 for p in procs), "a job process runs as root"
        # the agent said in its hello that it refuses every job: nothing is placed
        # there, and the job waits saying why
        if j["state"] == "pending" and "n1 refuses every job: running as root" in (
                j["reason"] or ""):
            return j
        return None

    j = wait_for(decided, what="the job to wait, naming the node's refusal")
    assert not job_pids(c, jid)
    assert "0\n" not in c.logs(jid)
    assert "--allow-root-jobs" in j["reason"], j["reason"]
    assert c.nodes()["n1"]["refuses"], c.nodes()["n1"]
    assert "--allow-root-jobs" in c.agents["n1"].output()


# ---------------------------------------------------------------------------
# the agent's environment is not the job's


def test_job_environment_holds_none_of_the_agents(make_cluster, scratch):
    leaky = {"SUDO_USER": "x", "SUDO_COMMAND": "/bin/sh", "SSH_AUTH_SOCK": "/tmp/x",
             "AWS_SECRET_ACCESS_KEY": "y", "BRAMBLE_JOIN_TOKEN": "z"}
    c = one_node(make_cluster, ["--job-user", "nobody"], env=leaky)
    jid = c.submit("name: env-dump\ncommand: env; echo END-OF-ENV; exec sleep 1000\n"
                   "env: {MINE: kept}\n")
    out = c.wait_logs(jid, "END-OF-ENV")
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert not names & set(leaky), names & set(leaky)
    assert "MINE=kept" in out and "BRAMBLE_JOB_ID=" in out, out
    assert re.search(r"^HOME=", out, re.M) and re.search(r"^USER=nobody$", out, re.M), out
    assert re.search(r"^PATH=", out, re.M), out
    c.cli("cancel", jid)


# ---------------------------------------------------------------------------
# checkpoint dirs the agent must not scan


@pytest.fixture
def many_processes():
    """A few hundred idle processes, so that /proc is as big as on a busy node."""
    procs = [subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
             for _ in range(400)]
    yield procs
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def test_checkpoint_dir_in_proc_does_not_stall_the_agent(make_cluster, scratch,
                                                         many_processes):
    c = one_node(make_cluster, ["--job-user", "nobody"])
    good = owned_dir(scratch / "good", NOBODY)
    link = scratch / "link"
    work = scratch / "work"
    owned_dir(work, NOBODY)
    writer = scratch / "writer.sh"
    writer.write_text(f"""
i=1
while true; do
    mkdir -p {good}/checkpoint-$i && echo '{{}}' > {good}/checkpoint-$i/trainer_state.json
    echo "wrote $i"
    i=$((i + 1))
    sleep 0.5
done
""")
    jid_good = c.submit(f"name: good\ncommand: sh {writer}\n"
                        f"checkpoint:\n  dir: {good}\n  pattern: \"checkpoint-*\"\n")
    wait_for(lambda: len(steps(c, jid_good)) >= 1, what="the good job's first checkpoint")
    # a marker that never comes: every entry stays incomplete and is looked at again
    # at each scan, the costliest case
    jid_proc = c.submit("name: procdir\ncommand: exec sleep 1000\n"
                        "checkpoint:\n  dir: /proc\n  pattern: \"*\"\n"
                        "  complete_file: never-there\n"
                        "restart:\n  max: 0\n")
    # a dir that is a symlink into /proc once the job runs
    os.symlink("/proc", link)
    jid_link = c.submit(f"name: linkdir\ncommand: exec sleep 1000\n"
                        f"checkpoint:\n  dir: {link}\n  pattern: \"*\"\n"
                        f"  complete_file: never-there\n")
    before = len(steps(c, jid_good))
    end = time.monotonic() + 5.0
    while time.monotonic() < end:  # sampling a period, not waiting for a state
        assert last_seen_age(c, "n1") < 2.0, "the agent stopped heartbeating"
        time.sleep(0.25)
    wait_for(lambda: len(steps(c, jid_good)) >= before + 3,
             what="the good job's checkpoints to keep being reported")
    assert c.nodes()["n1"]["state"] == "ready"
    assert "/proc" in json.dumps(c.job(jid_proc)["events"]) or \
        "not watched" in c.agents["n1"].output()
    for jid in (jid_good, jid_proc, jid_link):
        c.cli("cancel", jid, check=False)
