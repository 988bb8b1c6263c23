"""`bramble up` / `bramble down`: a whole cluster on loopback in one command; a
second one beside it; a pull of a checkpoint that is gone; the quickstart's next
steps."""

import http.client
import json
import os
import re
import shlex
import shutil
import subprocess
import urllib.parse
import urllib.request

from conftest import BIN, CLI_TIMEOUT, REPO, pid_alive, sanitizer_lines, tail, wait_for


class Home:
    """A user's own $HOME (no credential, no XDG dirs of the real one) and the
    bramble command run in it, from cwd."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("BRAMBLE_CREDENTIAL", "XDG_DATA_HOME", "XDG_CONFIG_HOME")}
        self.env["HOME"] = str(self.home)
        self.env["PATH"] = f"{BIN}:{self.env.get('PATH', '/usr/bin:/bin')}"
        self.cred = self.home / ".config" / "bramble" / "credential"
        self.record = self.home / ".config" / "bramble" / "local-cluster"

    def run(self, *args, check=True, timeout=CLI_TIMEOUT + 60):
        r = subprocess.run([str(BIN / "bramble"), *map(str, args)], capture_output=True,
                           text=True, env=self.env, cwd=self.tmp, timeout=timeout)
        san = sanitizer_lines(r.stderr)
        assert not san, r.stderr
        if check:
            assert r.returncode == 0, (args, r.returncode, r.stdout, r.stderr)
        return r


def pids_in(d):
    """The pids of d's pid files, by file name."""
    return {pf.stem: int(pf.read_text().split()[0]) for pf in d.glob("*.pid")}


def logs_of(*dirs):
    return "\n".join(f"--- {f}\n{tail(f)}" for d in dirs for f in sorted(d.glob("*.log")))


def no_sanitizer_reports(*dirs):
    found = []
    for d in dirs:
        for f in d.glob("*.log"):
            found += sanitizer_lines(f.read_text(errors="replace"))
    assert not found, "sanitizer reports:\n" + "\n".join(found) + "\n" + logs_of(*dirs)


def stop(h, *dirs):
    """bramble down --dir for each of dirs, and their processes gone."""
    pids = [p for d in dirs for p in pids_in(d).values()]
    for d in dirs:
        h.run("down", "--dir", d, check=False)
    wait_for(lambda: not any(pid_alive(p) for p in pids),
             what="the local clusters' processes to exit after bramble down")


def test_up_and_down(tmp_path):
    h = Home(tmp_path)
    home = h.home
    d = tmp_path / "local"
    run = h.run

    def logs():
        return logs_of(d)

    pids = []
    try:
        r = run("up", "--agents", 2, "--dir", d, check=False)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{logs()}"
        # the dashboard is on by default, on a free loopback port, and said so
        shown = re.search(r"bramble dashboard .*at (http://127\.0\.0\.1:\d+)\)", r.stdout)
        assert shown, r.stdout
        cred = home / ".config" / "bramble" / "credential"
        assert cred.exists(), f"no credential at {cred}"
        assert (cred.stat().st_mode & 0o077) == 0, oct(cred.stat().st_mode)
        for pf in d.glob("*.pid"):
            pids.append(int(pf.read_text().split()[0]))
        # the coordinator, two agents and the gateway (docs/gateway.md)
        assert len(pids) == 4, list(d.glob("*.pid"))
        assert all(pid_alive(p) for p in pids)
        gw = re.search(r"gateway\s+\d+\s+(http://127\.0\.0\.1:\d+)", r.stdout)
        assert gw, r.stdout
        st, body = None, None
        def models():
            nonlocal st, body
            try:
                with urllib.request.urlopen(gw.group(1) + "/v1/models", timeout=5) as resp:
                    st, body = resp.status, json.loads(resp.read())
                return True
            except OSError:
                return False
        wait_for(models, what="the gateway up started to answer")
        assert st == 200 and body == {"object": "list", "data": []}, (st, body)
        assert [g["name"] for g in json.loads(run("gateway", "list", "--json").stdout)] == \
            ["local"]

        nodes = json.loads(run("nodes", "--json").stdout)
        assert sorted(n["name"] for n in nodes) == ["node-1", "node-2"], nodes
        assert all(n["state"] == "ready" for n in nodes), nodes

        spec = tmp_path / "hi.yaml"
        spec.write_text("name: hi\ncommand: echo hi from $BRAMBLE_NODE_NAME\n")
        r = run("submit", spec, "--wait")
        jid = r.stdout.split()[0]
        wait_for(lambda: "hi from node-" in run("logs", jid).stdout,
                 what="the job's output in bramble logs")

        # the dashboard's login link works, at the address up printed
        link = run("dashboard").stdout.strip().splitlines()[0]
        assert link.startswith(shown.group(1) + "/login?t="), (link, shown.group(1))
        conn = http.client.HTTPConnection(*urllib.parse.urlsplit(link).netloc.split(":"))
        conn.request("GET", link[link.index("/login"):])
        resp = conn.getresponse()
        assert resp.status == 303 and "HttpOnly" in (resp.getheader("Set-Cookie") or ""), \
            (resp.status, resp.getheaders())
        conn.close()

        # a second `up` on the same dir is refused while it runs
        r = run("up", "--agents", 2, "--dir", d, check=False)
        assert r.returncode == 1, (r.stdout, r.stderr)
    finally:
        r = run("down", "--dir", d, check=False)
        down_rc = (r.returncode, r.stdout, r.stderr)
        wait_for(lambda: not any(pid_alive(p) for p in pids),
                 what="the local cluster's processes to exit after bramble down")
    assert down_rc[0] == 0, down_rc
    no_sanitizer_reports(d)


def node_names(h, *cred):
    nodes = json.loads(h.run(*cred, "nodes", "--json").stdout)
    return sorted(n["name"] for n in nodes)


def test_second_up_elsewhere_does_not_take_over_the_first(tmp_path):
    """A second `bramble up` in another dir while one runs is refused, naming the
    running one and how to stop it or run one beside it; the one beside it (its own
    credential and node names) leaves the first its credential and `bramble down`."""
    h = Home(tmp_path)
    d1, d2 = tmp_path / "first", tmp_path / "second"
    try:
        r = h.run("up", "--agents", 2, "--dir", d1, check=False)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{logs_of(d1)}"
        first = pids_in(d1)
        cred, record = h.cred.read_bytes(), h.record.read_bytes()

        r = h.run("up", "--agents", 1, "--dir", d2, check=False)
        assert r.returncode == 1, (r.stdout, r.stderr)
        err = r.stderr
        assert f"already running in {d1} (coordinator pid {first['coordinator']})" in err, err
        assert f"{h.cred} is its admin credential" in err, err
        assert "stop that one first:   bramble down\n" in err, err
        beside = re.search(r"or run one beside it:  bramble (.*)$", err, re.M)
        assert beside, err
        assert not list(d2.glob("*.pid")), "the refused up started something"
        assert h.cred.read_bytes() == cred and h.record.read_bytes() == record
        assert node_names(h) == ["node-1", "node-2"]

        # beside it with its own credential but the same node names: refused too
        r = h.run("--credential", tmp_path / "third.credential", "up", "--agents", 1,
                  "--dir", tmp_path / "third", check=False)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "has a node named node-1 too" in r.stderr and "--node-prefix" in r.stderr, \
            r.stderr

        # the command it suggested runs a second cluster beside the first
        args = shlex.split(beside.group(1))
        assert args == ["--credential", f"{d2}/admin.credential", "up", "--dir", str(d2),
                        "--node-prefix", "second"], args
        r = h.run(*args, "--agents", 1, check=False)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{logs_of(d2)}"
        assert f"bramble down --dir {d2}\n" in r.stdout, r.stdout
        assert f"beside the local cluster in {d1}" in r.stdout, r.stdout
        second = pids_in(d2)
        assert h.cred.read_bytes() == cred and h.record.read_bytes() == record
        assert node_names(h) == ["node-1", "node-2"]  # the default still reaches the first
        assert node_names(h, "--credential", d2 / "admin.credential") == ["second-1"]

        # plain `bramble down` stops the first, and only the first
        r = h.run("down")
        assert f"local cluster in {d1} is down" in r.stdout, r.stdout
        wait_for(lambda: not any(pid_alive(p) for p in first.values()),
                 what="the first cluster's processes to exit")
        assert all(pid_alive(p) for p in second.values()), second
        assert node_names(h, "--credential", d2 / "admin.credential") == ["second-1"]
        r = h.run("down", "--dir", d2)
        assert "stopped second-1" in r.stdout, r.stdout
    finally:
        stop(h, d1, d2)
    no_sanitizer_reports(d1, d2)


WRITE_CHECKPOINT = (
    "import os\n"
    "c = os.path.join(os.environ['BRAMBLE_CHECKPOINT_DIR'], 'checkpoint-1')\n"
    "os.makedirs(c)\n"
    "open(os.path.join(c, 'model.bin'), 'wb').write(os.urandom(4096))\n"
    "open(os.path.join(c, 'trainer_state.json'), 'w').write('{}')\n")


def test_pull_of_a_checkpoint_gone_everywhere_says_so(tmp_path):
    h = Home(tmp_path)
    d, ckpt, dest = tmp_path / "local", tmp_path / "ckpt", tmp_path / "dest"
    (tmp_path / "write.py").write_text(WRITE_CHECKPOINT)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: writer\ncommand: /usr/bin/python3 {tmp_path}/write.py\n"
                    f"checkpoint:\n  dir: {ckpt}\n  complete_file: trainer_state.json\n")
    try:
        r = h.run("up", "--agents", 1, "--dir", d, check=False)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{logs_of(d)}"
        jid = h.run("submit", spec, "--wait").stdout.split()[0]

        def counted():
            return json.loads(h.run("job", "show", jid, "--json").stdout)["checkpoints"]
        wait_for(counted, what="the job's checkpoint to be counted")
        shutil.rmtree(ckpt)
        r = h.run("checkpoint", "pull", jid, dest, check=False)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert (f"no copy of job {jid}'s checkpoint step 1 is left: {ckpt}/checkpoint-1 is "
                f"gone on node-1, which wrote it, and no other node holds a replica") \
            in r.stderr, r.stderr
        assert "No such file or directory" in r.stderr, r.stderr  # node-1's own words
        assert os.listdir(dest) == [], os.listdir(dest)  # nothing half-made is left
    finally:
        stop(h, d)
    no_sanitizer_reports(d)


def quickstart(h):
    """deploy/quickstart.sh on the binaries under test (no install, no build), in h:
    its output, once it succeeded."""
    env = dict(h.env, QUICKSTART_BIN=str(BIN))
    r = subprocess.run([str(REPO / "deploy" / "quickstart.sh")], capture_output=True,
                       text=True, env=env, timeout=600)
    out = r.stdout + r.stderr
    assert not sanitizer_lines(out), out
    assert r.returncode == 0, out
    return r.stdout


def next_steps(out):
    """The commands the quickstart printed last, by what they do: {"pull": argv, ...}."""
    steps = {}
    for line in out[out.index("\nNext steps"):].splitlines()[1:]:
        argv = shlex.split(line, comments=True)
        if argv and argv[0] == str(BIN / "bramble"):
            steps[" ".join(argv[1:3])] = argv
    return steps


def test_quickstart_next_steps_work_after_it_and_on_a_second_run(tmp_path):
    """What the quickstart prints last runs as printed (from the repository's root,
    where README runs it: here from another dir), after the quickstart has cleaned up,
    and names the training job of this run, also when the cluster is used again."""
    h = Home(tmp_path)
    d = h.home / ".local" / "share" / "bramble" / "local"
    ids = []
    try:
        for run in (1, 2):
            steps = next_steps(quickstart(h))
            pull = steps["checkpoint pull"]
            jid, where = pull[3], pull[4]
            job = json.loads(h.run("job", "show", jid, "--json").stdout)
            assert job["name"] == "train-checkpoint" and job["state"] == "completed", job
            assert steps["logs " + jid] == [str(BIN / "bramble"), "logs", jid]
            assert steps["checkpoint list"][3] == jid
            r = h.run(*pull[1:])
            assert "verified" in r.stdout, r.stdout
            pulled = tmp_path / where / "checkpoint-60"
            assert (pulled / "trainer_state.json").is_file(), list((tmp_path / where).iterdir())
            assert '"step": 60' in h.run("logs", jid).stdout
            ids.append(jid)
            h.run(*steps["down"][1:])
            wait_for(lambda: not any(pid_alive(p) for p in pids_in(d).values()),
                     what=f"the quickstart's cluster (run {run}) to stop")
        assert ids[0] != ids[1], ids  # the second run's jobs came after the first's
    finally:
        if d.exists():
            stop(h, d)
    no_sanitizer_reports(d)
