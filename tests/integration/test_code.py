"""Code that travels with the job: `code: DIR` (or `submit --code DIR`) is packed on
the submitting machine as git would list it, only the files the coordinator lacks
are sent, and each node fetches the tree from the coordinator into its cache, once,
verified, and runs every attempt in a fresh copy of it. The agents run in mount
namespaces where the "laptop" directory is an empty tmpfs: they see only what was
sent. A resumed attempt runs the code as submitted, whatever the laptop holds now."""
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import wait_for
from treefiles import blob, events, hidden, hidden_node, laptop_cluster, write
from netlan import PYTHON, free_prefix, veth_ns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for mount namespaces")




def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)



def probed(c, a, b):
    """Whether the network map has a round trip between nodes a and b."""
    m = c.cli_json("probe")
    i, j = m["nodes"].index(a), m["nodes"].index(b)
    return m["rtt_ms"][i][j] is not None and m["rtt_ms"][i][j] >= 0


def submit(c, spec_path, *args):
    """bramble submit as a user types it: the id, and what it said on stderr."""
    rc, out, err = c.cli("submit", spec_path, *args)
    return int(out.strip()), err



def test_code_from_a_git_repo_runs_where_it_was_never_copied(make_cluster, tmp_path):
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path)
    repo = laptop / "proj"
    write(repo / "train.py", 'print("train.py says", open("VERSION").read().strip())\n')
    write(repo / "VERSION", "v1\n")
    write(repo / "pkg" / "util.py", "X = 41\n")
    write(repo / "data" / "big.bin", "git-ignored\n")
    write(repo / ".gitignore", "data/\n*.log\n")
    write(repo / "run.log", "ignored too\n")
    os.symlink("pkg/util.py", repo / "util_link.py")
    git(repo, "init", "-q")
    git(repo, "add", "train.py", "VERSION", ".gitignore")
    git(repo, "commit", "-qm", "first")
    write(repo / "job.yaml", f"""name: trainer
code: .
resources: {{nodelist: [node-1]}}
command: |
  test -e "{repo}/train.py" && echo "the laptop is visible" || echo "laptop hidden"
  test "$PWD" = "$BRAMBLE_CODE_DIR" && echo "runs in its code dir"
  python3 train.py
  python3 -c 'import sys; sys.path.insert(0, "pkg"); import util; print("util", util.X + 1)'
  readlink util_link.py
  ls data run.log .git 2>&1 | sed 's/.*cannot access/missing/'
  echo scribble > train.py && echo "its own copy is writable"
""")
    job, err = submit(c, repo / "job.yaml", "--wait")
    left = re.search(r"left out by .gitignore/.brambleignore: (.*)", err)
    assert left and sorted(left.group(1).split(", ")) == ["data/", "run.log"], err
    # train.py, VERSION, .gitignore, job.yaml, pkg/util.py and the link (untracked,
    # not ignored: git ls-files --others lists them)
    assert re.search(r"code: \S+, 6 files, .*; sent 5 files", err), err
    out = c.logs(job)
    for line in ("laptop hidden", "runs in its code dir", "train.py says v1", "util 42",
                 "pkg/util.py", "its own copy is writable"):
        assert line in out, (line, out)
    assert out.count("missing") == 3, out  # data, run.log and .git never sent
    assert any("its code fetched to node-1" in e for e in events(c, job)), events(c, job)
    _, shown, _ = c.cli("job", "show", job)
    assert re.search(r"code:\s+\.: 6 files, \d+B \(manifest [0-9a-f]{12}\)", shown), shown

    # the same code again on the same node: nothing sent, nothing fetched, and a
    # fresh copy (the scribble of the first run is not there)
    job2, err = submit(c, repo / "job.yaml", "--wait")
    assert "sent 0 files, 0B" in err, err
    assert "train.py says v1" in c.logs(job2)
    assert any("its code was in node-1's cache" in e for e in events(c, job2)), events(c, job2)

    # one file changed: only it is sent, and the node fetches only it
    write(repo / "VERSION", "v2\n")
    job3, err = submit(c, repo / "job.yaml", "--wait")
    assert "sent 1 files, 3B" in err, err
    assert "train.py says v2" in c.logs(job3)
    fetched = [e for e in events(c, job3) if "its code fetched" in e]
    assert fetched and ": 3B sent" in fetched[0], fetched

    # --code names another directory, in place of the spec's
    other = laptop / "other"
    write(other / "hello.sh", "echo hello from other\n")
    spec = laptop / "plain.yaml"
    write(spec, "name: plain\ncommand: sh hello.sh\n")
    rc, out, err = c.cli("submit", spec, "--code", other, "--wait")
    assert "hello from other" in c.logs(int(out.strip()))


def test_a_resumed_attempt_runs_the_code_as_submitted(make_cluster, tmp_path):
    c, laptop, names = laptop_cluster(make_cluster, tmp_path, heartbeat="250ms",
                                      node_timeout="2s")
    proj = laptop / "proj"
    write(proj / "VERSION", "as submitted\n")
    write(proj / "job.yaml", """name: resumed
code: .
restart: {max: 2, on: [node_lost]}
command: |
  echo "attempt $BRAMBLE_ATTEMPT on $BRAMBLE_NODE_NAME: $(cat VERSION)"
  if [ "$BRAMBLE_ATTEMPT" = 1 ]; then sleep 600; fi
""")
    job, _ = submit(c, proj / "job.yaml")
    first = c.wait_logs(job, "attempt 1 on")
    node = re.search(r"attempt 1 on (\S+):", first).group(1)
    write(proj / "VERSION", "changed on the laptop since\n")
    c.kill_node(node)
    done = c.wait_job(job)
    assert done["state"] == "completed" and done["attempt"] == 2, done
    out = c.logs(job)
    other = [n for n in names if n != node][0]
    assert f"attempt 2 on {other}: as submitted" in out, out
    assert "changed on the laptop" not in out


def test_jobs_of_other_uids_reach_their_code_and_nothing_else(make_cluster, tmp_path, request):
    # the cache where other uids may pass (pytest's own tmp dirs are root's alone)
    cache = tempfile.mkdtemp(prefix="bramble-cache-")
    os.chmod(cache, 0o711)
    request.addfinalizer(lambda: shutil.rmtree(cache, ignore_errors=True))
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1,
                                  extra=("--job-uids", "70000-79999", "--cache-dir",
                                         f"{cache}/c"))
    alice = c.root / "alice.credential"
    c.cli("user", "add", "alice", "--out", alice)
    proj = laptop / "proj"
    write(proj / "secret.txt", "alice's\n")
    write(proj / "job.yaml", """name: mine
code: .
command: |
  echo "uid $(id -u)"
  cat secret.txt
  touch made-here && echo "made a file"
  ls .. 2>&1 | head -1
  ls ../../trees 2>&1 | head -1
""")
    rc, out, err = c.cli("submit", proj / "job.yaml", "--wait", credential=alice)
    job = int(out.strip())
    log = c.logs(job)
    assert re.search(r"uid 7\d{4}", log) and "alice's" in log and "made a file" in log, log
    assert log.count("Permission denied") == 2, log  # work/ is not listable, trees/ closed
    # alice's next job runs on; bob's job, another uid, knows every path of the cache
    # (a guessed working dir, the tree and file of alice's secret) and reaches none
    write(proj / "job.yaml", "name: mine2\ncode: .\ncommand: echo up; sleep 600\n")
    rc, out, err = c.cli("submit", proj / "job.yaml", credential=alice)
    mine = int(out.strip())
    c.wait_logs(mine, "up")
    top = f"{cache}/c"
    tree = next(p for p in os.listdir(f"{top}/trees") if not p.startswith("."))
    file = hashlib.blake2b(b"alice's\n", digest_size=32).hexdigest()
    assert os.path.exists(f"{top}/work/{mine}.1/secret.txt")
    bob = c.root / "bob.credential"
    c.cli("user", "add", "bob", "--out", bob)
    tries = [f"cat {top}/work/{mine}.1/secret.txt", f"cat {top}/trees/{tree}/secret.txt",
             f"cat {top}/.by-hash/{file}", f"echo x >> {top}/trees/{tree}/secret.txt",
             f"echo x >> {top}/.by-hash/{file}", f"touch {top}/trees/x",
             f"touch {top}/.by-hash/x", f"touch {top}/work/x", f"touch {top}/x"]
    write(laptop / "bobs" / "job.yaml", "name: theirs\ncode: .\ncommand: |\n" +
          "".join(f"  {t} 2>/dev/null && echo 'REACHED {t}' || echo denied\n" for t in tries))
    rc, out, err = c.cli("submit", laptop / "bobs" / "job.yaml", "--wait", credential=bob)
    theirs = c.logs(int(out.strip()))
    assert theirs.split() == ["denied"] * len(tries), theirs
    with open(f"{top}/trees/{tree}/secret.txt") as f:
        assert f.read() == "alice's\n"
    assert c.job(mine)["state"] == "running"
    c.cli("cancel", mine)


def test_code_that_cannot_travel_is_refused_naming_it(cluster, tmp_path):
    c = cluster
    proj = tmp_path / "proj"
    write(proj / "ok.py", "print(1)\n")
    spec = proj / "job.yaml"
    write(spec, "name: bad\ncode: nowhere\ncommand: true\n")
    rc, _, err = c.cli("submit", spec, check=False)
    assert rc == 1 and "nowhere" in err, err
    write(spec, "name: bad\ncode: .\ncommand: true\n")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(proj / "agent.sock"))
    try:
        rc, _, err = c.cli("submit", spec, check=False)
    finally:
        sock.close()
    assert rc == 1 and "agent.sock" in err and "socket" in err, err
    os.unlink(proj / "agent.sock")
    os.symlink("/etc/passwd", proj / "passwd")
    rc, _, err = c.cli("submit", spec, check=False)
    assert rc == 1 and "passwd" in err and "out of the tree" in err, err
    os.unlink(proj / "passwd")
    # a file still being written: named, never sent as whatever it held then
    growing = proj / "growing.log"
    growing.write_bytes(blob(32 << 20, 3))
    writer = subprocess.Popen([PYTHON, "-c", "import os, sys\n"
                               "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
                               "while True: os.write(fd, b'x')\n", str(growing)])
    try:
        wait_for(lambda: growing.stat().st_size > (32 << 20), what="the writer to begin")
        rc, _, err = c.cli("submit", spec, check=False)
    finally:
        writer.kill()
        writer.wait()
    # (hashed while it grew, or grown since: either way it is named and said)
    assert rc == 1 and "growing.log changed" in err and "hashed" in err, err
    assert c.jobs() == [], "a refused job was stored"
    # a client that sends the spec's code: without the tree is refused
    cl = c.raw_client()
    try:
        _, r, _ = cl.request("job.submit", {"spec": "name: bad\ncode: .\ncommand: true\n",
                                            "sets": []})
    finally:
        cl.close()
    assert r["errnum"] == 22 and "brought none" in r["error"], r


def test_a_damaged_cached_file_is_fetched_again_never_run(make_cluster, tmp_path):
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1)
    proj = laptop / "proj"
    write(proj / "run.sh", "echo the real script\n")
    write(proj / "job.yaml", "name: cached\ncode: .\ncommand: sh run.sh\n")
    first, _ = submit(c, proj / "job.yaml", "--wait")
    assert "the real script" in c.logs(first)
    trees = list((c.agent_dir("node-1") / "cache" / "trees").iterdir())
    assert len(trees) == 1, trees
    (trees[0] / "run.sh").write_text("echo DAMAGED\n")  # the disk, or a hand, changed it
    again, _ = submit(c, proj / "job.yaml", "--wait")
    out = c.logs(again)
    assert "the real script" in out and "DAMAGED" not in out, out
    said = events(c, again)
    assert any("its code fetched to node-1" in e for e in said), said
    assert (trees[0] / "run.sh").read_text() == "echo the real script\n"
    # changed in place with its size kept, then a new version of the code (another
    # file added) that holds the same run.sh: the node's copy of it is not taken on
    # trust for the new tree
    real = "echo the real script\n"
    with open(trees[0] / "run.sh", "r+") as f:  # (the same file, shared by hash)
        f.write("echo " + "X" * (len(real) - 6) + "\n")
    write(proj / "notes.txt", "v2\n")
    third, _ = submit(c, proj / "job.yaml", "--wait")
    out = c.logs(third)
    assert "the real script" in out and "XXXX" not in out, out


def test_a_gangs_ranks_read_the_code_from_the_first_ones_node(make_cluster, tmp_path):
    """A gang of 3 with code: one node reads the tree from the coordinator, the two
    others from that node (the coordinator's link carries it once), and no rank
    starts before every node has it."""
    c, laptop, names = laptop_cluster(make_cluster, tmp_path, n=3, heartbeat="250ms",
                                      node_timeout="60s")  # (the agents stopped below)
    proj = laptop / "proj"
    write(proj / "model.bin", os.urandom(1 << 20))
    write(proj / "run.py", "import time; print(time.time())\n")
    write(proj / "job.yaml", "name: gang\ncode: .\nresources: {nodes: 3}\n"
                             "command: /usr/bin/python3 run.py\n")
    for a in names:
        for b in names:
            if a < b:
                wait_for(lambda: probed(c, a, b), what=f"{a} and {b} to probe each other")
    # job show lists each fetch from its order on, with where it reads: the agents
    # stopped (well inside their fence timeout), the first node ordered goes on alone,
    # and the others are ordered once it has the tree, to read it there
    def listed(n):
        xs = [x for x in c.cli_json("job", "show", str(job)).get("transfers", [])
              if x["kind"] == "code"]
        return len(xs) == n and {x["to"]: x["from"] for x in xs}

    stopped = set(names)
    for a in names:
        c.agents[a].send_signal(signal.SIGSTOP)
    try:
        job, _ = submit(c, proj / "job.yaml")
        one = wait_for(lambda: listed(1), what="job show to list the first fetch")
        (to, src), = one.items()
        assert src == "the coordinator", one
        c.agents[to].send_signal(signal.SIGCONT)
        stopped.discard(to)
        shown = wait_for(lambda: listed(3), what="job show to list the gang's three fetches")
    finally:
        for a in stopped:
            c.agents[a].send_signal(signal.SIGCONT)
    assert c.wait_job(job)["state"] == "completed", c.logs(job, stream="both")
    fetched = [e for e in events(c, job) if "its code fetched to" in e]
    assert len(fetched) == 3, fetched
    assert sum(" from " not in e for e in fetched) == 1, fetched
    first = next(e for e in fetched if " from " not in e).split("fetched to ")[1].split()[0]
    assert sum(f" from {first}" in e for e in fetched) == 2, fetched
    # job show said where each node would read it: the first the coordinator, the
    # others the first
    assert sorted(shown) == sorted(names), shown
    assert all(f == ("the coordinator" if to == first else first) for to, f in shown.items()), \
        (shown, first)
    # no rank started before every node had it (the coordinator heard the last)
    evs = c.cli_json("job", "show", str(job))["events"]
    last_fetch = max(e["time"] for e in evs if "its code fetched to" in (e["reason"] or ""))
    starts = [float(line.split()[-1]) for line in c.logs(job).splitlines() if line.strip()]
    assert len(starts) == 3 and min(starts) >= last_fetch, (starts, last_fetch)


def test_the_cache_keeps_to_its_quota(make_cluster, tmp_path):
    """The node's cache keeps to --cache-quota, the tree used least recently going
    first, and an ended attempt's own copy of the code leaves the node at its end."""
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1, extra=("--cache-quota", "1MiB"))
    cache = c.agent_dir("node-1") / "cache"
    trees, work = cache / "trees", cache / "work"

    def project(name, size):
        proj = laptop / name
        (proj / "blob.bin").parent.mkdir(parents=True, exist_ok=True)
        (proj / "blob.bin").write_bytes(os.urandom(size))
        write(proj / "job.yaml", f"name: {name}\ncode: .\ncommand: wc -c blob.bin\n")
        return proj / "job.yaml"

    def run(spec, size):
        job, _ = submit(c, spec, "--wait")
        assert f"{size} blob.bin" in c.logs(job)
        # its copy of the code goes once it ended, and nothing is left set aside
        wait_for(lambda: not (work / f"{job}.1").exists() and
                 not [p for p in work.iterdir() if p.name.startswith(".trash-")],
                 what=f"job {job}'s working dir to leave the cache")
        said = events(c, job)
        return ("was in node-1's cache" if any("was in node-1's cache" in e for e in said)
                else "fetched" if any("its code fetched to node-1" in e for e in said)
                else said)

    specs = {n: project(n, 300_000) for n in ("first", "second", "third", "fourth")}
    for n in ("first", "second", "third"):  # three fit: 900,000 bytes of 1 MiB
        assert run(specs[n], 300_000) == "fetched"
    assert len(list(trees.iterdir())) == 3
    assert run(specs["first"], 300_000) == "was in node-1's cache"  # used again
    # a fourth does not fit beside them: the one used least recently (second) goes
    assert run(specs["fourth"], 300_000) == "fetched"
    assert len(list(trees.iterdir())) == 3
    assert run(specs["first"], 300_000) == "was in node-1's cache"
    assert run(specs["third"], 300_000) == "was in node-1's cache"
    assert run(specs["second"], 300_000) == "fetched"
    # one bigger than the whole quota cannot start, and says why
    rc, out, err = c.cli("submit", project("big", 2_000_000), "--wait", check=False)
    assert rc == 1 and "do not fit in the node's cache (--cache-quota 1.0MiB)" in err, err


def test_each_attempt_gets_a_fresh_copy_of_the_code(make_cluster, tmp_path):
    """An attempt that failed after changing its code dir is restarted on the same
    node in a fresh copy: it sees the code as submitted, not what attempt 1 left."""
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1)
    write(laptop / "proj" / "main.sh",
          'echo "attempt $BRAMBLE_ATTEMPT: $(cat state.txt) $(ls left.txt 2>&1)"\n'
          'echo changed > state.txt; touch left.txt\n'
          '[ "$BRAMBLE_ATTEMPT" -ge 2 ]\n')
    write(laptop / "proj" / "state.txt", "as-submitted\n")
    write(laptop / "proj" / "job.yaml", "name: twice\ncode: .\n"
                                        "restart: {max: 1, on: [nonzero_exit]}\n"
                                        "command: sh main.sh\n")
    job, _ = submit(c, laptop / "proj" / "job.yaml", "--wait")
    j = c.job(job)
    assert j["state"] == "completed" and j["attempt"] == 2, j
    lines = c.logs(job).splitlines()
    assert len(lines) == 2 and all("as-submitted" in ln and "No such file" in ln
                                   for ln in lines), lines


def far_node(make_cluster, tmp_path, request, rate, extra=(), **kw):
    """A cluster (make_cluster's kw) whose one node, "far", is in a network namespace
    behind a veth that carries rate (tbf) towards it, and sees no laptop: (cluster,
    laptop, veth)."""
    net = free_prefix(200, 249)
    v = veth_ns(request, [f"{net}.1/24"], [f"{net}.2/24"], prefix="brc", what="the far node")
    subprocess.run(["tc", "qdisc", "add", "dev", v.host_veth, "root", "tbf", "rate", rate,
                    "burst", "32kbit", "latency", "400ms"], check=True)
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    c = make_cluster(host=f"{net}.1", **kw)
    c.start_agent("far", wrap=v.wrap() + hidden(laptop, c.data), extra=extra)
    c.wait_ready("far")
    return c, laptop, v


def test_pulls_ordered_at_once_keep_to_the_cache_quota(make_cluster, tmp_path, request):
    """Two jobs whose code trees fit the node's --cache-quota one at a time but not
    together, ordered at once, the first coming over a slow link: the second
    waits for room (the first job's tree leaves once its copy is made), both run,
    and the cache never holds more than its quota."""
    c, laptop, _ = far_node(make_cluster, tmp_path, request, "4mbit",
                            ("--cache-quota", "1MiB"),
                            node_timeout="60s")  # (longer than the agent is stopped)
    jobs = []
    for name in ("one", "two"):
        write(laptop / name / "blob.bin", os.urandom(600_000))
        write(laptop / name / "job.yaml", f"name: {name}\ncode: .\ncommand: wc -c blob.bin\n")
    # both orders reach the node at once: its agent is stopped until both are placed
    # (well inside its fence timeout), so the second comes while the first is fetched
    agent = c.agents["far"]
    agent.send_signal(signal.SIGSTOP)
    try:
        for name in ("one", "two"):
            jobs.append(submit(c, laptop / name / "job.yaml")[0])
        wait_for(lambda: all(c.job(j)["state"] == "starting" for j in jobs),
                 what="both jobs to be placed on the far node")
    finally:
        agent.send_signal(signal.SIGCONT)
    cache = c.agent_dir("far") / "cache" / ".by-hash"
    most, stop = [0], threading.Event()

    def sample():  # the cache's size, looked at as often as it can be
        while not stop.is_set():
            try:
                most[0] = max(most[0], sum(f.stat().st_size for f in cache.iterdir()))
            except OSError:  # (a file left between the listing and its stat)
                pass
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        wait_for(lambda: all(c.job(j)["state"] in ("completed", "failed") for j in jobs),
                 what="both jobs to end")
    finally:
        stop.set()
        sampler.join()
    for j in jobs:
        assert c.job(j)["state"] == "completed", c.logs(j, stream="both")
        assert "600000 blob.bin" in c.logs(j)
    assert most[0] <= 1 << 20, f"the cache held {most[0]} bytes (--cache-quota 1MiB)"
    assert "waits for room in the node's cache" in c.agents["far"].output()


def test_job_show_says_how_far_its_code_is(make_cluster, tmp_path, request):
    """A node behind a 16 Mbit/s link: while it fetches 6 MB of code, the job is
    starting and job show lists the fetch, with the bytes in place so far. The
    agent killed part way and started again fetches on from there, and the job
    starts (its first attempt: nothing was lost)."""
    c, laptop, v = far_node(make_cluster, tmp_path, request, "16mbit")
    proj = laptop / "proj"
    proj.mkdir()
    (proj / "weights.bin").write_bytes(os.urandom(6_000_000))
    sets = tmp_path / "sets"
    write(sets / "vocab.txt", "a b c\n" * 1000)
    c.cli("data", "push", sets, "vocab")
    write(proj / "job.yaml", "name: far\ncode: .\ndata: {vocab: /mnt/vocab}\n"
                             "command: wc -c weights.bin\n")
    job, _ = submit(c, proj / "job.yaml")
    seen = []

    def partway():
        j = c.cli_json("job", "show", str(job))
        assert j["state"] in ("pending", "starting"), ("it ran before a fetch was seen", seen)
        xs = j.get("transfers", [])
        seen.extend(xs)
        return any(x["kind"] == "code" and 0 < x["done"] < x["bytes"] and x["to"] == "far"
                   for x in xs) and xs

    xs = wait_for(partway, what="job show to list the code's fetch part way")
    # the data set's fetch is listed beside it, by name, from the order on
    assert [(x["name"], x["from"], x["to"], x["bytes"]) for x in xs if x["kind"] == "data"] \
        == [("admin/vocab:v1", "the coordinator", "far", 6000)], xs
    _, shown, _ = c.cli("job", "show", job)
    assert "copies under way" in shown and "the coordinator" in shown, shown
    assert "admin/vocab:v1" in shown and "WHAT" in shown, shown
    c.agents["far"].kill()
    c.start_agent("far", join=False, wrap=v.wrap() + hidden(laptop, c.data))
    done = c.wait_job(job)
    assert done["state"] == "completed" and done["attempt"] == 1, done
    assert "6000000 weights.bin" in c.logs(job)
    assert [x for x in c.cli_json("job", "show", str(job))["transfers"]
            if x["kind"] == "code"] == []


def test_files_put_more_paths_into_the_code_dir(make_cluster, tmp_path):
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1)
    write(laptop / "proj" / "main.sh", "cat data/a.txt notes/n.txt\n")
    write(laptop / "shared" / "data" / "a.txt", "from the shared data dir\n")
    write(laptop / "notes.txt", "a note from elsewhere\n")
    spec = laptop / "proj" / "job.yaml"
    write(spec, """name: with-files
code: .
files:
  - {from: ../shared/data, to: data}
  - {from: ../notes.txt, to: notes/n.txt}
command: sh main.sh
""")
    job, err = submit(c, spec, "--wait")
    out = c.logs(job)
    assert "from the shared data dir" in out and "a note from elsewhere" in out, out
    # files alone make the tree
    write(laptop / "only.yaml", """name: only-files
files: [{from: notes.txt, to: n.txt}]
command: cat n.txt
""")
    job, _ = submit(c, laptop / "only.yaml", "--wait")
    assert "a note from elsewhere" in c.logs(job)
    # a destination outside the code dir, or a path in it twice, is refused
    write(laptop / "bad.yaml", "name: bad\nfiles: [{from: notes.txt, to: ../n}]\ncommand: x\n")
    rc, _, err = c.cli("submit", laptop / "bad.yaml", check=False)
    assert rc == 1 and "files[0].to: '../n' is not a path inside the code dir" in err, err
    write(laptop / "twice.yaml", """name: twice
code: proj
files: [{from: notes.txt, to: main.sh}]
command: x
""")
    rc, _, err = c.cli("submit", laptop / "twice.yaml", check=False)
    assert rc == 1 and "main.sh" in err, err
    # a files: dir is held to code:'s checks: a link out of it, a socket, each named
    os.symlink("/etc/passwd", laptop / "shared" / "data" / "passwd")
    rc, _, err = c.cli("submit", spec, check=False)
    assert rc == 1 and "passwd: a link out of the tree (to /etc/passwd)" in err, err
    os.unlink(laptop / "shared" / "data" / "passwd")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(laptop / "shared" / "data" / "agent.sock"))
        rc, _, err = c.cli("submit", spec, check=False)
        assert rc == 1 and "agent.sock" in err and "socket" in err, err
    finally:
        s.close()
        os.unlink(laptop / "shared" / "data" / "agent.sock")
    assert [j["name"] for j in c.jobs()].count("with-files") == 1, c.jobs()  # (none made)


def test_code_no_job_needs_leaves_the_store(make_cluster, tmp_path):
    """Past the ended jobs' retention (--log-retention) a job's code and outputs
    leave the coordinator's store; a waiting job's code stays."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    c = make_cluster(start=False)
    c.start_coordinator(extra=["--log-retention", "2s"])
    hidden_node(c, laptop)
    objects = c.data / "store" / "objects"

    def stored(data):
        h = hashlib.blake2b(data, digest_size=32).hexdigest()
        return (objects / h[:2] / h).exists()

    done_data, wait_data = os.urandom(5000), os.urandom(5000)
    (laptop / "done").mkdir()
    (laptop / "done" / "f.bin").write_bytes(done_data)
    token = os.urandom(8).hex()
    write(laptop / "done" / "job.yaml", "name: done\ncode: .\noutputs: [out.txt]\n"
                                        f"command: wc -c f.bin; echo {token} > out.txt\n")
    (laptop / "waits").mkdir()
    (laptop / "waits" / "f.bin").write_bytes(wait_data)
    write(laptop / "waits" / "job.yaml",
          "name: waits\ncode: .\ncommand: 'true'\nresources: {nodelist: [nowhere]}\n")
    done, _ = submit(c, laptop / "done" / "job.yaml", "--wait")
    submit(c, laptop / "waits" / "job.yaml")
    out_data = f"{token}\n".encode()
    assert stored(done_data) and stored(wait_data)
    assert c.cli_json("outputs", done, tmp_path / "got")  # kept while retained
    wait_for(lambda: not stored(done_data), what="the ended job's code to leave the store")
    wait_for(lambda: not stored(out_data), what="the ended job's outputs to leave the store")
    assert stored(wait_data), "a waiting job's code left the store"
    rc, _, err = c.cli("outputs", done, tmp_path / "again", check=False)
    assert rc != 0 or not (tmp_path / "again" / "out.txt").exists(), err


def small_disk(path, size, then=()):
    """wrap= argv: run in a mount namespace where path is a tmpfs of size (a disk that
    fills up), after the mounts of then (another wrap's sh -c script, or none)."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mkdir -p "{path}" && mount -t tmpfs -o size={size} none "{path}" && '
            f'{then or ""}exec "$@"', "sh"]


def test_a_full_disk_refuses_saying_so(make_cluster, tmp_path):
    """The coordinator's store on a full disk refuses the submit, naming the disk,
    and keeps nothing of it; a node whose cache is on a full disk ends the attempt
    saying so. In both, what fits still goes afterwards."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    store, cache = tmp_path / "store", tmp_path / "nodecache"
    c = make_cluster(start=False)
    c.start_coordinator(extra=["--store-dir", str(store)], wrap=small_disk(store, "3m"))
    c.start_agent("node-1", extra=("--cache-dir", str(cache)),
                  wrap=small_disk(cache, "1m", f'mount -t tmpfs none "{laptop}" && '))
    c.wait_ready("node-1")
    big, small = laptop / "big", laptop / "small"
    write(big / "weights.bin", blob(5 << 20, 1))
    write(big / "job.yaml", "name: big\ncode: .\ncommand: true\n")
    rc, _, err = c.cli("submit", big / "job.yaml", check=False)
    assert rc == 1 and "No space left on device" in err and "store" in err, err
    assert c.jobs() == [], "a refused job was stored"
    # nothing of it holds the disk: a tree of 2 MB fits in the store's 3 MB after it
    write(small / "a.bin", blob(2 << 20, 2))
    write(small / "job.yaml", "name: small\ncode: .\ncommand: cat a.bin > /dev/null\n")
    rc, out, err = c.cli("submit", small / "job.yaml", check=False)
    assert rc == 0, err
    job = int(out.strip())
    # but not in the node's cache of 1 MB: the attempt ends, saying why
    j = c.wait_job(job, "failed")
    assert "could not start" in j["reason"] and "No space left on device" in j["reason"], j
    assert "node-1" in j["reason"] or "cache" in j["reason"], j
    # and a tree that fits runs there
    write(small / "a.bin", b"x" * 1000)
    rc, out, err = c.cli("submit", small / "job.yaml", "--wait", check=False)
    assert rc == 0, err


def test_code_is_fetched_while_it_is_uploaded(make_cluster, tmp_path):
    """A big upload has the node the job would go to fetch the code as it is stored
    (code.stage): while the CLI is stopped halfway, no job exists, yet that node
    already holds every file stored so far. Once the upload ends the job runs
    there, on the code as sent."""
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=2)
    proj = laptop / "proj"
    small = {f"a-{i:02d}.bin": blob(64 << 10, 100 + i) for i in range(20)}
    for name, data in small.items():
        write(proj / name, data)
    huge = blob(64 << 20, 7)
    write(proj / "z-huge.bin", huge)  # (the manifest's order: after the small ones)
    want = hashlib.sha256(huge).hexdigest()
    write(proj / "job.yaml", "name: staged\ncode: .\ncommand: sha256sum z-huge.bin; "
                             "cat a-*.bin | wc -c\n")
    proc = subprocess.Popen([c.bin("bramble"), "--credential", str(c.credential), "submit",
                             str(proj / "job.yaml")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=c.env, cwd=c.root, text=True)
    name = hashlib.blake2b(huge, digest_size=32).hexdigest()
    partial = c.data / "store" / "partial" / name

    def partway():
        if proc.poll() is not None:
            raise AssertionError(f"the submit ended before it was stopped: {proc.communicate()}")
        return partial.exists() and partial.stat().st_size > 0

    wait_for(partway, what="part of the big file stored", interval=0.002)
    proc.send_signal(signal.SIGSTOP)
    try:
        assert partial.stat().st_size < len(huge)
        assert c.jobs() == [], "a job exists before its upload ended"
        cache = {n: c.agent_dir(n) / "cache" / ".by-hash" for n in ("node-1", "node-2")}
        hashes = {hashlib.blake2b(d, digest_size=32).hexdigest() for d in small.values()}

        def staged():
            return [n for n, d in cache.items()
                    if d.exists() and hashes <= {f.name for f in d.iterdir()}]

        where = wait_for(staged, what="a node to fetch the files stored so far")
        assert len(where) == 1, where
        assert name not in {f.name for f in cache[where[0]].iterdir()}, \
            "a file was fetched before it was whole"
    finally:
        proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    job = int(out.strip())
    j = c.wait_job(job, "completed")
    assert j["nodes"] == where, (j["nodes"], where)
    said = [e for e in events(c, job) if "its code fetched" in e]
    assert len(said) == 1 and "as it was uploaded" in said[0], said
    log = c.logs(job)
    assert want in log and str(20 * (64 << 10)) in log, log


def test_a_staged_upload_cut_off_runs_nothing_and_a_retry_resumes(make_cluster, tmp_path):
    """The CLI killed halfway through a staged upload leaves no job, and nothing of it
    runs; the next submit sends only what the store lacks, and its job runs the code
    as sent, on the node that went on fetching."""
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1)
    proj = laptop / "proj"
    huge = blob(48 << 20, 8)
    write(proj / "a.txt", "first\n")
    write(proj / "z-huge.bin", huge)
    write(proj / "job.yaml", "name: retried\ncode: .\ncommand: sha256sum z-huge.bin\n")
    argv = [c.bin("bramble"), "--credential", str(c.credential), "submit",
            str(proj / "job.yaml")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=c.env,
                            cwd=c.root, text=True)
    name = hashlib.blake2b(huge, digest_size=32).hexdigest()
    partial = c.data / "store" / "partial" / name
    wait_for(lambda: (proc.poll() is None or pytest.fail(f"ended: {proc.communicate()}"))
             and partial.exists() and partial.stat().st_size > 0,
             what="part of the big file stored", interval=0.002)
    proc.kill()
    proc.wait()
    held = partial.stat().st_size
    assert 0 < held < len(huge)
    assert c.jobs() == [], "a job exists though its upload was cut off"
    rc, out, err = c.cli("submit", proj / "job.yaml")
    sent = re.search(r"sent \d+ files, ([\d.]+)(B|KiB|MiB|GiB)", err)
    unit = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    assert sent and float(sent.group(1)) * unit[sent.group(2)] < len(huge) - held + (1 << 20), \
        (err, held)  # it went on from what the store held

    job = int(out.strip())
    j = c.wait_job(job, "completed")
    assert hashlib.sha256(huge).hexdigest() in c.logs(job)
    said = [e for e in events(c, job) if "its code fetched" in e]
    assert len(said) == 1 and "as it was uploaded" in said[0], said
    assert len(c.jobs()) == 1, c.jobs()


def test_a_link_cut_mid_upload_goes_on_or_says_so(make_cluster, tmp_path, request):
    """The laptop's link cut in the middle of an upload: back within the CLI's
    --timeout, the upload goes on where it stopped; gone for longer, the CLI gives up
    within about that time, saying the upload stalled, how much of it the store took
    and that the same submit goes on from there. Nothing partial runs; the retry
    sends only what the store lacks and its job runs the code as sent."""
    net = free_prefix()
    v = veth_ns(request, [f"{net}.1/24"], [f"{net}.2/24"], prefix="brl", what="the laptop")
    # the laptop's uplink at 64 Mbit/s: the upload spans seconds
    subprocess.run(["ip", "netns", "exec", v.ns, "tc", "qdisc", "add", "dev", v.ns_veth,
                    "root", "tbf", "rate", "64mbit", "burst", "64kbit", "latency", "400ms"],
                   check=True)
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1, host=f"{net}.1")
    proj = laptop / "proj"
    write(proj / "job.yaml", "name: cut\ncode: .\ncommand: sha256sum big.bin\n")

    def link(state):
        subprocess.run(["ip", "-n", v.ns, "link", "set", v.ns_veth, state], check=True)

    def backoff():
        """How often the laptop's TCP has retried its unanswered bytes (ss's backoff)."""
        out = subprocess.run(["ip", "netns", "exec", v.ns, "ss", "-tin", "dst", f"{net}.1"],
                             capture_output=True, text=True).stdout
        found = re.search(r"backoff:(\d+)", out)
        return int(found.group(1)) if found else 0

    def start(big):
        (proj / "big.bin").write_bytes(big)
        argv = ["ip", "netns", "exec", v.ns, c.bin("bramble"), "--credential",
                str(c.credential), "--timeout", "6s", "submit", str(proj / "job.yaml")]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=c.env, cwd=c.root, text=True)
        partial = c.data / "store" / "partial"
        name = hashlib.blake2b(big, digest_size=32).hexdigest()

        def held():
            return sum(f.stat().st_size for f in partial.glob(name + "*"))

        wait_for(lambda: (proc.poll() is None or pytest.fail(f"ended: {proc.communicate()}"))
                 and held() > (4 << 20), what="part of the big file stored", interval=0.01)
        link("down")
        return proc, held

    # cut until TCP has retried into it, then back within the CLI's 6 s: it goes on
    big = blob(32 << 20, 1)
    proc, held = start(big)
    try:
        cut_at = held()
        # a real outage: the CLI's TCP has retried twice into the cut link
        wait_for(lambda: backoff() >= 2, what="the CLI's connection to retry into the cut")
        assert proc.poll() is None and held() == cut_at, "bytes got through a cut link"
        assert c.jobs() == [], "a job exists before its upload ended"
    finally:
        link("up")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    first = int(out.strip())
    c.wait_job(first, "completed")
    assert hashlib.sha256(big).hexdigest() in c.logs(first)

    # cut for good: the CLI says so within about its --timeout, and nothing runs
    big = blob(32 << 20, 2)
    proc, held = start(big)
    cut = time.monotonic()
    try:
        out, err = proc.communicate(timeout=60)
        waited = time.monotonic() - cut
    finally:
        link("up")
    assert proc.returncode != 0, (out, err)
    # about its 6 s, not 6 s for each of the chunks it had in flight
    assert waited < 30, (waited, err)
    assert "stalled" in err and "goes on from there" in err, err
    assert [j["id"] for j in c.jobs()] == [first], "a job exists though its upload stalled"
    kept = held()
    assert 0 < kept < len(big)
    rc, out, err = c.cli("submit", proj / "job.yaml")
    sent = re.search(r"sent \d+ files, ([\d.]+)(B|KiB|MiB|GiB)", err)
    unit = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    assert sent and float(sent.group(1)) * unit[sent.group(2)] < len(big) - kept + (1 << 20), \
        (err, kept)
    job = int(out.strip())
    c.wait_job(job, "completed")
    assert hashlib.sha256(big).hexdigest() in c.logs(job)
