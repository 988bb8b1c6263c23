"""Data sets in jobs: `data: {NAME[:TAG]: /path}` shows a pushed data set read-only at
that path, in the job's own mount namespace, on a node that never saw the pushing
machine's disk: the node fetches it from the coordinator's store into its cache once,
verified, and later jobs mount the cached tree. The version is fixed at submit; a
data set another user did not share is refused; one a job uses cannot be removed.
The agents run in mount namespaces where the "laptop" directory is an empty tmpfs,
and run jobs as per-user uids (--job-uids), as a shared node would."""
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import wait_for
from treefiles import blob, events, hidden_node, laptop_cluster, write

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for mount namespaces")





@pytest.fixture
def open_dir():
    """A directory every uid may pass through (pytest's own tmp is root's alone), for
    the mount points: the jobs run as per-user uids."""
    d = tempfile.mkdtemp(prefix="brt-mnt-", dir="/tmp")
    os.chmod(d, 0o755)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)



def node_cluster(make_cluster, tmp_path, n=1, **kw):
    """laptop_cluster, its agents running each user's jobs as their own uid."""
    return laptop_cluster(make_cluster, tmp_path, n=n, extra=("--job-uids", "70000-79999"),
                          **kw)


def add_user(c, name):
    cred = c.root / f"{name}.credential"
    c.cli("user", "add", name, "--out", cred)
    return cred


def submit(c, text, credential=None, check=True):
    spec = c.write_spec(text)
    rc, out, err = c.cli("submit", spec, "--json", credential=credential, check=check)
    return (json.loads(out)["id"] if rc == 0 else None), err


def test_a_data_set_is_read_only_at_its_path_and_fetched_once(make_cluster, tmp_path,
                                                             open_dir):
    c, laptop, _ = node_cluster(make_cluster, tmp_path)
    alice = add_user(c, "alice")
    model = laptop / "model"
    write(model / "weights.bin", blob(2 << 20, 7))
    write(model / "tok" / "vocab.txt", b"alpha\nbeta\n")
    (model / "tok" / "vocab.txt").chmod(0o600)  # private on the laptop: readable in jobs
    c.cli("data", "push", model, "llama:fp16", credential=alice)
    want = hashlib.sha256((model / "weights.bin").read_bytes()).hexdigest()
    mnt = open_dir / "models" / "llama"
    cache = c.agent_dir("node-1") / "cache"
    spec = f"""name: reader
data: {{llama:fp16: {mnt}}}
command: |
  echo "uid $(id -u)"
  sha256sum {mnt}/weights.bin
  cat {mnt}/tok/vocab.txt
  touch {mnt}/new 2>&1 || true
  rm -f {mnt}/weights.bin 2>&1 || true
  ls {cache}/trees 2>&1 || true
"""
    job, _ = submit(c, spec, credential=alice)
    assert c.wait_job(job)["state"] == "completed", c.logs(job, stream="both")
    out = c.logs(job, stream="both")
    assert "uid 70" in out, out  # alice's own uid, not root
    assert f"{want}  {mnt}/weights.bin" in out, out
    assert "alpha\nbeta" in out, out
    assert out.count("Read-only file system") == 2, out  # no new file, nothing removed
    assert "Permission denied" in out, out  # the cache itself stays out of reach
    # the mount was the job's own: the node's own view of the path is empty
    assert mnt.is_dir() and not any(mnt.iterdir())
    ev = events(c, job)
    assert any("its data sets fetched to node-1" in e for e in ev), ev

    # a second job mounts the cached tree: nothing fetched again
    job2, _ = submit(c, spec.replace("name: reader", "name: reader-2"), credential=alice)
    assert c.wait_job(job2)["state"] == "completed", c.logs(job2, stream="both")
    assert f"{want}  {mnt}/weights.bin" in c.logs(job2)
    ev = events(c, job2)
    assert any("its data sets were in node-1's cache" in e for e in ev), ev


def test_a_damaged_cached_data_set_is_fetched_again_never_mounted(make_cluster, tmp_path,
                                                                 open_dir):
    """A file of a cached data set changed on the node's disk after it was fetched:
    the next job that mounts it never sees that file; the tree is fetched again. A job
    that mounted it before and still runs keeps its other files: the damaged tree is
    set aside, and goes once no job mounts it."""
    c, laptop, _ = node_cluster(make_cluster, tmp_path)
    model = laptop / "model"
    write(model / "weights.bin", blob(1 << 20, 3))
    write(model / "README", b"the real weights\n")
    c.cli("data", "push", model, "w")
    want = hashlib.sha256((model / "weights.bin").read_bytes()).hexdigest()
    mnt = open_dir / "w"
    spec = f"name: {{}}\ndata: {{{{w: {mnt}}}}}\ncommand: sha256sum {mnt}/weights.bin; " \
           f"cat {mnt}/README\n"
    first, _ = submit(c, spec.format("first"))
    assert c.wait_job(first)["state"] == "completed", c.logs(first, stream="both")
    assert f"{want}  {mnt}/weights.bin" in c.logs(first)
    cache_trees = c.agent_dir("node-1") / "cache" / "trees"
    trees = list(cache_trees.iterdir())
    assert len(trees) == 1, trees
    # a job that mounts it runs on while the damage is found (it reads its weights
    # once told to go, after that)
    go = open_dir / "go"
    held, _ = submit(c, f"name: held\nresources: {{cpus: 0}}\ndata: {{w: {mnt}}}\n"
                        f"command: |\n  while [ ! -e {go} ]; do sleep 0.1; done\n"
                        f"  sha256sum {mnt}/weights.bin\n")
    c.wait_job(held, "running")
    (trees[0] / "README").write_bytes(b"DAMAGED\n")  # the disk, or a hand, changed it
    again, _ = submit(c, spec.format("again"))
    assert c.wait_job(again)["state"] == "completed", c.logs(again, stream="both")
    out = c.logs(again)
    assert f"{want}  {mnt}/weights.bin" in out and "the real weights" in out, out
    assert "DAMAGED" not in out, out
    ev = events(c, again)
    assert any("its data sets fetched to node-1" in e for e in ev), ev
    assert (trees[0] / "README").read_bytes() == b"the real weights\n"
    gone = [t for t in cache_trees.iterdir() if t.name.startswith(".gone-")]
    assert len(gone) == 1, list(cache_trees.iterdir())  # set aside while held mounts it
    go.touch()
    assert c.wait_job(held)["state"] == "completed", c.logs(held, stream="both")
    assert f"{want}  {mnt}/weights.bin" in c.logs(held), c.logs(held, stream="both")
    wait_for(lambda: not any(t.name.startswith(".gone-") for t in cache_trees.iterdir()),
             30, "the damaged tree to go once no job mounts it")
    # whole again, the next job mounts it from the cache
    third, _ = submit(c, spec.format("third"))
    assert c.wait_job(third)["state"] == "completed"
    assert any("its data sets were in node-1's cache" in e for e in events(c, third))


def test_the_version_is_fixed_at_submit_and_a_used_one_stays(make_cluster, tmp_path,
                                                            open_dir):
    c, laptop, _ = node_cluster(make_cluster, tmp_path)
    d = laptop / "d"
    write(d / "VERSION", b"one\n")
    c.cli("data", "push", d, "ds")
    mnt = open_dir / "ds"
    go = open_dir / "go"
    job, _ = submit(c, f"""name: held
data: {{ds: {mnt}}}
command: |
  while [ ! -e {go} ]; do sleep 0.1; done
  cat {mnt}/VERSION
""")
    c.wait_job(job, "running")
    # a new version pushed meanwhile changes nothing for the job
    write(d / "VERSION", b"two\n")
    c.cli("data", "push", d, "ds")
    # nor can the version it mounts be removed from under it
    rc, _, err = c.cli("data", "rm", "ds", check=False)
    assert rc != 0 and "used by job" in err and "held" in err, err
    assert {x["tag"] for x in c.cli_json("data", "list")} == {"v1", "v2"}
    go.touch()
    assert c.wait_job(job)["state"] == "completed"
    assert c.logs(job).strip() == "one"
    c.cli("data", "rm", "ds:v1")  # once it ended, it goes
    job2, _ = submit(c, f"name: newest\ndata: {{ds: {mnt}}}\ncommand: cat {mnt}/VERSION\n")
    c.wait_job(job2)
    assert c.logs(job2).strip() == "two"


def test_refusals_name_what_was_wrong(make_cluster, tmp_path, open_dir):
    c, laptop, _ = node_cluster(make_cluster, tmp_path)
    alice, bob = add_user(c, "alice"), add_user(c, "bob")
    d = laptop / "w"
    write(d / "f", b"x\n")
    c.cli("data", "push", d, "weights", credential=alice)
    mnt = open_dir / "w"
    job, err = submit(c, f"name: nosy\ndata: {{alice/weights: {mnt}}}\ncommand: ls {mnt}\n",
                      credential=bob, check=False)
    assert job is None and "no data set alice/weights that you may use" in err, err
    job, err = submit(c, f"name: typo\ndata: {{weights:v9: {mnt}}}\ncommand: true\n",
                      credential=alice, check=False)
    assert job is None and "weights:v9" in err, err
    for path, why in (("/etc/ssl", "inside a directory of the system's own"),
                      ("models", "not an absolute path"), ("/data/../etc", "not a plain path"),
                      ("/", "the root directory")):
        job, err = submit(c, f"name: bad\ndata: {{weights: {path}}}\ncommand: true\n",
                          credential=alice, check=False)
        assert job is None and why in err and "data.weights" in err, (path, err)
    job, err = submit(c, f"name: twice\ndata: {{weights: {mnt}, weights:v1: {mnt}/sub}}\n"
                         f"command: true\n", credential=alice, check=False)
    assert job is None and "overlap" in err, err
    # a symlink on the way to the mount point is never followed, on the node either
    elsewhere = open_dir / "elsewhere"
    elsewhere.mkdir()
    (open_dir / "link").symlink_to(elsewhere)
    job, _ = submit(c, f"name: linked\ndata: {{weights: {open_dir}/link/models}}\n"
                       f"command: true\n", credential=alice)
    j = c.wait_job(job)
    assert j["state"] == "failed" and "link is not a directory (or is a symlink)" in \
        json.dumps(j), j
    assert not any(elsewhere.iterdir())
    # shared with bob: his job mounts it
    c.cli("data", "push", d, "weights:shared", "--share", "bob", credential=alice)
    job, err = submit(c, f"name: shared\ndata: {{alice/weights:shared: {mnt}}}\n"
                         f"command: cat {mnt}/f\n", credential=bob)
    assert c.wait_job(job)["state"] == "completed", c.logs(job, stream="both")
    assert c.logs(job).strip() == "x"


def test_a_node_without_room_says_so(make_cluster, tmp_path):
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    c = make_cluster()
    hidden_node(c, laptop, ("--cache-quota", "1M"))
    d = laptop / "big"
    write(d / "big.bin", blob(3 << 20, 3))
    c.cli("data", "push", d, "big")
    job, _ = submit(c, f"name: toobig\ndata: {{big: {tmp_path / 'big'}}}\ncommand: true\n")
    j = c.wait_job(job)
    assert j["state"] == "failed", j
    text = json.dumps(j)
    assert "data set" in text and "big" in text and "--cache-quota" in text, text


def test_a_tree_a_running_job_mounts_never_leaves_the_cache(make_cluster, tmp_path,
                                                           open_dir):
    """--cache-quota 3M: a running job mounts data set x (2 MiB); a job that needs
    data set y (2 MiB more) cannot have x's room, so it ends as not started, saying
    why, and x stays, still read whole by its job; once that job ended, y fits (x
    used longest ago leaves)."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    c = make_cluster()
    hidden_node(c, laptop, ("--cache-quota", "3M"))
    for name, seed in (("x", 31), ("y", 32)):
        write(laptop / name / f"{name}.bin", blob(2 << 20, seed))
        c.cli("data", "push", laptop / name, name)
    want = hashlib.sha256((laptop / "x" / "x.bin").read_bytes()).hexdigest()
    mx, my, go = open_dir / "x", open_dir / "y", open_dir / "go"
    held, _ = submit(c, f"name: holds-x\ndata: {{x: {mx}}}\ncommand: |\n"
                        f"  while [ ! -e {go} ]; do sleep 0.1; done\n"
                        f"  sha256sum {mx}/x.bin\n")
    c.wait_job(held, "running")
    trees = c.agent_dir("node-1") / "cache" / "trees"
    before = sorted(p.name for p in trees.iterdir())
    assert len(before) == 1, before
    late, _ = submit(c, f"name: needs-y\ndata: {{y: {my}}}\ncommand: cat {my}/y.bin\n")
    j = c.wait_job(late)
    assert j["state"] == "failed", j
    assert "could not start" in (j["reason"] or "") and "data set" in j["reason"], j["reason"]
    assert sorted(p.name for p in trees.iterdir()) == before  # x stayed
    go.touch()
    assert c.wait_job(held)["state"] == "completed"
    assert f"{want}  {mx}/x.bin" in c.logs(held)
    again, _ = submit(c, f"name: needs-y-again\ndata: {{y: {my}}}\n"
                         f"command: wc -c {my}/y.bin\n")
    assert c.wait_job(again)["state"] == "completed", c.logs(again, stream="both")
    assert f"{2 << 20} {my}/y.bin" in c.logs(again)


def test_a_job_whose_trees_do_not_fit_together_says_so(make_cluster, tmp_path, open_dir):
    """--cache-quota 3M: data set x (2 MiB) is cached from an earlier job; a job that
    needs x and y (2 MiB more) does not have x pushed out to make room for y, then x
    fetched again past the quota (or y pushed out for it in turn): the two do not
    fit together, and it ends as not started, saying why."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    c = make_cluster()
    hidden_node(c, laptop, ("--cache-quota", "3M"))
    for name, seed in (("x", 41), ("y", 42)):
        write(laptop / name / f"{name}.bin", blob(2 << 20, seed))
        c.cli("data", "push", laptop / name, name)
    mx, my = open_dir / "x", open_dir / "y"
    first, _ = submit(c, f"name: warms-x\ndata: {{x: {mx}}}\ncommand: true\n")
    assert c.wait_job(first)["state"] == "completed"
    both, _ = submit(c, f"name: needs-both\ndata: {{x: {mx}, y: {my}}}\n"
                        f"command: cat {mx}/x.bin {my}/y.bin > /dev/null\n")
    j = c.wait_job(both)
    assert j["state"] == "failed", j
    assert "could not start" in (j["reason"] or "") and "--cache-quota" in j["reason"], j


def test_the_node_that_holds_the_data_is_preferred(make_cluster, tmp_path, open_dir):
    c, laptop, _ = node_cluster(make_cluster, tmp_path, n=2)
    d = laptop / "ds"
    write(d / "weights.bin", blob(1 << 20, 5))
    c.cli("data", "push", d, "weights")
    mnt = open_dir / "w"
    first, _ = submit(c, f"name: warm\nresources: {{nodelist: [node-2]}}\n"
                         f"data: {{weights: {mnt}}}\ncommand: wc -c < {mnt}/weights.bin\n")
    assert c.wait_job(first)["state"] == "completed"
    assert c.logs(first).strip() == str(1 << 20)
    assert any("placed on node-2; its data sets: 1.0MiB to fetch" in e
               for e in events(c, first)), events(c, first)

    # node-1 comes first by name and is as free; node-2 holds the data set
    def told():
        job, _ = submit(c, f"name: probe-{secrets.token_hex(2)}\n"
                           f"data: {{weights: {mnt}}}\ncommand: true\n")
        c.wait_job(job)
        return c.job(job)["nodes"] == ["node-2"] and job
    job = wait_for(told, what="a job with the data set to go where it is cached")
    assert any("placed on node-2; its data sets are there already" in e
               for e in events(c, job)), events(c, job)
    # without data sets, the first node that fits
    plain, _ = submit(c, "name: plain\ncommand: true\n")
    c.wait_job(plain)
    assert c.job(plain)["nodes"] == ["node-1"]


def probed(c, a, b):
    """Whether the network map has a round trip between nodes a and b."""
    m = c.cli_json("probe")
    i, j = m["nodes"].index(a), m["nodes"].index(b)
    return m["rtt_ms"][i][j] is not None and m["rtt_ms"][i][j] >= 0


def near(c, a, b):
    """Whether the network map has a round trip between nodes a and b under 2 ms
    (well inside the 5 ms within which a node counts as one site's)."""
    m = c.cli_json("probe")
    i, j = m["nodes"].index(a), m["nodes"].index(b)
    return m["rtt_ms"][i][j] is not None and 0 <= m["rtt_ms"][i][j] < 2


def test_a_node_reads_a_data_set_from_a_node_that_holds_it(make_cluster, tmp_path, open_dir):
    c, laptop, _ = node_cluster(make_cluster, tmp_path, n=3, heartbeat="250ms")
    d = laptop / "ds"
    write(d / "weights.bin", blob(2 << 20, 9))
    c.cli("data", "push", d, "weights")
    want = hashlib.sha256((d / "weights.bin").read_bytes()).hexdigest()
    mnt = open_dir / "w"
    spec = (f"resources: {{nodelist: [NODE]}}\ndata: {{weights: {mnt}}}\n"
            f"command: sha256sum {mnt}/weights.bin\n")

    def run(name, node):
        job, _ = submit(c, f"name: {name}\n" + spec.replace("NODE", node))
        assert c.wait_job(job)["state"] == "completed", c.logs(job, stream="both")
        assert want in c.logs(job)
        return [e for e in events(c, job) if "fetched to" in e]

    first = run("first", "node-1")
    assert first and " from " not in first[0], first  # from the coordinator's store
    # (node-1's heartbeat after its pull tells the coordinator what it holds)
    wait_for(lambda: c.cli_json("node", "show", "node-1").get("trees"),
             what="node-1 to say it holds the data set")
    # node-1 is the source when the map has it nearer than the coordinator (within
    # 5 ms); probes on a loaded machine can lose or stretch a round trip for a
    # moment, so the map is read before each try, and a try made while it said
    # otherwise is made again
    tries = []
    for i in range(3):
        wait_for(lambda: near(c, "node-2", "node-1"), what="node-1 and node-2 to probe")
        second = run(f"second-{i}", "node-2")
        tries.append(second)
        if second and "fetched to node-2 from node-1" in second[0]:
            break
        c.forget_cached("node-2")  # (node-2 now holds the set too: not for the next try)
    assert "fetched to node-2 from node-1" in second[0] and "2.0MiB sent" in second[0], tries

    # a holder whose copy went under it (its files deleted by hand, its trees left,
    # so that it still says it holds the set): the node reads from the coordinator
    # instead, and the job runs all the same
    wait_for(lambda: probed(c, "node-3", "node-1") and probed(c, "node-3", "node-2"),
             what="node-3 to probe the others")
    for name in ("node-1", "node-2"):
        for f in (c.agent_dir(name) / "cache" / "trees").rglob("*"):
            if f.is_file():
                f.unlink()
    third = run("third", "node-3")
    assert third and " from " not in third[0], third
    log = (c.root / "logs" / "agent-node-3.log").read_text()
    assert "from the coordinator instead" in log, log


def test_a_gangs_ranks_read_the_data_set_from_the_first_ones_node(make_cluster, tmp_path,
                                                                  open_dir):
    c, laptop, names = node_cluster(make_cluster, tmp_path, n=3, heartbeat="250ms")
    d = laptop / "ds"
    write(d / "weights.bin", blob(1 << 20, 4))
    c.cli("data", "push", d, "weights")
    for a in names:
        for b in names:
            if a < b:
                wait_for(lambda: probed(c, a, b), what=f"{a} and {b} to probe each other")
    mnt = open_dir / "w"
    job, _ = submit(c, f"name: gang\nresources: {{nodes: 3}}\ndata: {{weights: {mnt}}}\n"
                       f"command: /usr/bin/python3 -c 'import time; print(time.time())'\n")
    assert c.wait_job(job)["state"] == "completed", c.logs(job, stream="both")
    evs = c.cli_json("job", "show", str(job))["events"]
    fetched = [e["reason"] for e in evs if "fetched to" in (e["reason"] or "")]
    assert len(fetched) == 3, fetched
    # no rank starts before every node has the data set: the first rank's process
    # began after the coordinator heard the last node had it
    starts = [float(line.split()[-1]) for line in c.logs(job).splitlines() if line.strip()]
    last_fetch = max(e["time"] for e in evs if "fetched to" in (e["reason"] or ""))
    assert len(starts) == 3 and min(starts) >= last_fetch, (starts, evs)
    assert not any("in node-" in (e["reason"] or "") and "cache" in (e["reason"] or "")
                   for e in evs), evs
    # one read the store, the two others the node that had it by then
    assert sum(" from " not in e for e in fetched) == 1, fetched
    first = next(e for e in fetched if " from " not in e).split("fetched to ")[1].split()[0]
    assert sum(f" from {first} " in e for e in fetched) == 2, fetched


def test_jobs_placed_at_once_read_a_data_set_from_the_first_ones_node(make_cluster, tmp_path,
                                                                     open_dir):
    """Two jobs placed in one pass on two nodes, before either holds their data set:
    the second waits for the first one's node to fetch it from the coordinator, and
    then reads it there, so the coordinator's link carries it once."""
    c, laptop, names = node_cluster(make_cluster, tmp_path, n=2, heartbeat="250ms")
    d = laptop / "ds"
    write(d / "weights.bin", blob(2 << 20, 11))
    c.cli("data", "push", d, "weights")
    want = hashlib.sha256((d / "weights.bin").read_bytes()).hexdigest()
    wait_for(lambda: probed(c, "node-1", "node-2"), what="node-1 and node-2 to probe")
    cpus = min(n["cpus"] for n in c.cli_json("nodes"))  # one task fills a node
    mnt = open_dir / "w"
    job, _ = submit(c, f"name: pair\narray: 0-1\nresources: {{cpus: {cpus}}}\n"
                       f"data: {{weights: {mnt}}}\ncommand: sha256sum {mnt}/weights.bin\n")
    tasks = [job, job + 1]
    said = []
    for t in tasks:
        assert c.wait_job(t)["state"] == "completed", c.logs(t, stream="both")
        assert want in c.logs(t)
        said.append(events(c, t))
    fetched = [e for evs in said for e in evs if "fetched to" in e]
    assert len(fetched) == 2, said
    assert sum(" from " not in e for e in fetched) == 1, fetched  # one read the store
    first = next(e for e in fetched if " from " not in e).split("fetched to ")[1].split()[0]
    other = next(n for n in names if n != first)
    assert any(f"fetched to {other} from {first}" in e for e in fetched), fetched
    assert any(f"waits for {first}, nearer than the coordinator" in e
               for evs in said for e in evs), said


def test_a_new_version_reuses_the_nodes_files_by_their_seals(make_cluster, tmp_path,
                                                              open_dir):
    """Version 2 of a data set, one file added: the node takes the files it holds
    from its store by their seals (kept when each was verified) without reading
    them again; a file whose bytes were changed in place since (its seal broken) is
    hashed, found damaged, and fetched again: the job reads the bytes pushed."""
    c, laptop, _ = node_cluster(make_cluster, tmp_path)
    ds = laptop / "ds"
    write(ds / "a.bin", blob(1 << 20, 41))
    write(ds / "b.bin", blob(1 << 20, 42))
    c.cli("data", "push", ds, "set")
    mnt = open_dir / "s"
    job = f"data: {{set: {mnt}}}\ncommand: sha256sum {mnt}/a.bin {mnt}/b.bin\n"
    first, _ = submit(c, "name: v1\n" + job.replace("set:", "set:v1:", 1))
    assert c.wait_job(first)["state"] == "completed", c.logs(first, stream="both")
    cache = c.agent_dir("node-1") / "cache"
    ha, hb = (hashlib.blake2b((ds / n).read_bytes(), digest_size=32).hexdigest()
              for n in ("a.bin", "b.bin"))
    for h in (ha, hb):  # sealed as they were verified
        st = (cache / ".by-hash" / h).stat()
        ino, size, _ = (cache / ".by-hash-seals" / h).read_text().split(":")
        assert (int(ino, 16), int(size, 16)) == (st.st_ino, st.st_size)
    # a's bytes changed in place on the node's disk, its size kept
    with open(cache / ".by-hash" / ha, "r+b") as f:
        f.write(b"rot")
    write(ds / "c.txt", "new in v2\n")
    c.cli("data", "push", ds, "set")
    second, _ = submit(c, "name: v2\n" + job.replace("set:", "set:v2:", 1))
    assert c.wait_job(second)["state"] == "completed", c.logs(second, stream="both")
    want = {n: hashlib.sha256((ds / n).read_bytes()).hexdigest() for n in ("a.bin", "b.bin")}
    got = {line.split()[1].rsplit("/", 1)[1]: line.split()[0]
           for line in c.logs(second).splitlines()}
    assert got == want, (got, want)
    said = c.agents["node-1"].output()
    assert re.search(r"\(\d+ bytes fetched, 1048576 found here\)", said), said[-2000:]
