"""`bramble checkpoint pull JOB [--step N] DEST` (docs/checkpoints.md, "Getting a
checkpoint back"): a job's counted checkpoint fetched to the user's own machine
through the coordinator, from a node that holds it, verified against its manifest.

The agents have no shared disk (each has its own directory mounted at the job's
checkpoint.dir, as in test_replica_restore.py), and the test process plays the
user's machine: it sees neither node's checkpoint dir, only what the pull writes
into DEST. Needs root (mount namespaces and bind mounts).
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import wait_for
from test_recovery import events_text, other
from test_replica_restore import copies_of, private_disk, two_private_nodes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for mount namespaces")

# three checkpoints of a few files each: weights (random), a config in a
# subdirectory, a link to the weights, and the Hugging Face marker
WRITER = r"""
import os, sys
d = os.environ["BRAMBLE_CHECKPOINT_DIR"]
for step in (1, 2, 3):
    c = os.path.join(d, f"checkpoint-{step}")
    os.makedirs(os.path.join(c, "cfg"), exist_ok=True)
    with open(os.path.join(c, "model.bin"), "wb") as f:
        f.write(os.urandom(700_000 + step))
    with open(os.path.join(c, "cfg", "train.json"), "w") as f:
        f.write('{"step": %d}\n' % step)
    os.chmod(os.path.join(c, "cfg", "train.json"), 0o640)
    os.symlink("model.bin", os.path.join(c, "latest"))
    with open(os.path.join(c, "trainer_state.json"), "w") as f:
        f.write('{"global_step": %d}\n' % step)
    # the next one (or the end) only once this one was counted and copied: a save
    # made just before the job ends may not be counted yet (the test touches it)
    gate = os.path.join(os.environ["GATE"], f"go-{step}")
    while not os.path.exists(gate):
        import time; time.sleep(0.05)
"""


def tree(root):
    """{relative path: ("link", target) or ("file", bytes, mode)} below root."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_file():
                out[rel] = ("file", p.read_bytes(), p.stat().st_mode & 0o7777)
    return out


def run_writer(c, ckpt, tmp_path):
    """The job above, run to its end; each checkpoint copied to the other node before
    the next is written. (job id, writer, the other node)."""
    gate = tmp_path / "gate"
    gate.mkdir()
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    jid = c.submit(f"name: ckpt-writer\n"
                   f"command: /usr/bin/python3 {script}\n"
                   f"env: {{GATE: {gate}}}\n"
                   f"checkpoint:\n  dir: {ckpt}\n  keep: 3\n")
    writer = None
    for step in (1, 2, 3):
        def copied():
            j = c.job(jid)
            return j if j["nodes"] and other_nodes(c, j) & copies_of(j, step) else None
        j = wait_for(copied, what=f"checkpoint-{step} to be counted and copied")
        writer = j["nodes"][0]
        (gate / f"go-{step}").touch()
    j = c.wait_job(jid)
    assert j["state"] == "completed", events_text(j)
    return jid, writer


def other_nodes(c, j):
    return {n for n in c.nodes() if n not in j["nodes"]}


def test_pull_newest_and_an_older_step_verified(make_cluster, tmp_path):
    c, names, ckpt, disk = two_private_nodes(make_cluster, tmp_path)
    jid, writer = run_writer(c, ckpt, tmp_path)
    dest = tmp_path / "mine"  # made by the pull

    _, out, err = c.cli("checkpoint", "pull", jid, dest)
    assert f"pulled checkpoint step 3 of job {jid} from {writer}" in out, out + err
    assert "verified" in out, out
    got = tree(dest / "checkpoint-3")
    assert got == tree(disk[writer] / "checkpoint-3"), sorted(got)
    assert got["latest"] == ("link", "model.bin")
    assert got["cfg/train.json"][2] == 0o640
    assert sorted(os.listdir(dest)) == ["checkpoint-3"]  # nothing else left behind

    r = c.cli_json("checkpoint", "pull", jid, "--step", "1", dest)
    assert (r["step"], r["from"], r["files"]) == (1, writer, 4), r
    assert r["bytes"] == r["received"] == 700_001 + len('{"step": 1}\n') + \
        len('{"global_step": 1}\n'), r
    assert tree(dest / "checkpoint-1") == tree(disk[writer] / "checkpoint-1")

    # what is there already is never overwritten
    rc, _, err = c.cli("checkpoint", "pull", jid, dest, check=False)
    assert rc == 1 and "checkpoint-3 exists already" in err, err
    rc, _, err = c.cli("checkpoint", "pull", jid, "--step", "9", dest, check=False)
    assert rc == 1 and f"job {jid} has no counted checkpoint at step 9" in err, err
    rc, _, err = c.cli("checkpoint", "pull", "999", dest, check=False)
    assert rc == 1 and "no job 999" in err, err

    # another user's job is not theirs to pull
    cred = tmp_path / "eve.credential"
    c.cli("user", "add", "eve", "--out", cred)
    rc, _, err = c.cli("checkpoint", "pull", jid, tmp_path / "eve", credential=cred,
                       check=False)
    assert rc == 1 and f"no job {jid}" in err, err
    assert not (tmp_path / "eve" / "checkpoint-3").exists()


def test_pull_from_a_replica_once_the_writer_is_gone(make_cluster, tmp_path):
    c, names, ckpt, disk = two_private_nodes(make_cluster, tmp_path)
    jid, writer = run_writer(c, ckpt, tmp_path)
    holder = other(names, writer)
    c.kill_node(writer)
    wait_for(lambda: c.nodes()[writer]["state"] == "lost", what=f"{writer} to be lost")

    r = c.cli_json("checkpoint", "pull", jid, tmp_path / "back")
    assert (r["step"], r["from"]) == (3, holder), r
    assert tree(tmp_path / "back" / "checkpoint-3") == tree(disk[writer] / "checkpoint-3")


def test_a_damaged_copy_is_refused_and_a_later_pull_goes_on(make_cluster, tmp_path):
    c, names, ckpt, disk = two_private_nodes(make_cluster, tmp_path)
    jid, writer = run_writer(c, ckpt, tmp_path)
    dest = tmp_path / "mine"
    weights = disk[writer] / "checkpoint-3" / "model.bin"
    good = weights.read_bytes()
    bad = bytearray(good)
    bad[123_456] ^= 0xFF  # same size: only the hash can tell
    weights.write_bytes(bytes(bad))

    rc, _, err = c.cli("checkpoint", "pull", jid, dest, check=False)
    assert rc == 1, err
    assert "model.bin" in err and "do not match the manifest's hash" in err, err
    assert not (dest / "checkpoint-3").exists()
    stage = dest / ".bramble-pull-checkpoint-3"
    kept = tree(stage)
    assert "model.bin" not in kept and not any(k.endswith(".bramble-part") for k in kept)

    weights.write_bytes(good)
    r = c.cli_json("checkpoint", "pull", jid, dest)
    assert r["kept"] == sum(len(v[1]) for v in kept.values() if v[0] == "file"), (r, kept)
    assert r["received"] == len(good) + len('{"global_step": 3}\n'), r
    assert tree(dest / "checkpoint-3") == tree(disk[writer] / "checkpoint-3")
    assert not stage.exists()
    print(json.dumps(r))


def slow_private_nodes(make_cluster, tmp_path, prefix, rate):
    """Two nodes PREFIX-a and PREFIX-b with no shared disk (as two_private_nodes),
    each sending checkpoint files at most at rate (--replica-bandwidth), so that a
    copy lasts long enough to watch or to cut. (cluster, names, ckpt)."""
    c = make_cluster(heartbeat="200ms", node_timeout="2s")
    names = [f"{prefix}-a", f"{prefix}-b"]
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    tok = c.token(uses=2)
    for n in names:
        (tmp_path / f"disk-{n}").mkdir()
        c.start_agent(n, token=tok, extra=["--probe-port", "0", "--replica-port", "0",
                                           "--replica-bandwidth", rate],
                      wrap=private_disk(tmp_path / f"disk-{n}", ckpt))
    c.wait_ready(*names)
    return c, names, ckpt


def test_a_long_copy_shows_how_far_it_is(make_cluster, tmp_path):
    """A replica's pull, slowed by the holder's --replica-bandwidth, shows in
    `job show` while it runs: from where to where, bytes done of all, and a rate."""
    c, names, ckpt = slow_private_nodes(make_cluster, tmp_path, "slow", "3MB/s")
    size = 24_000_000  # about 8 s at 3 MB/s
    jid = c.submit("name: big-save\n"
                   "command: |\n"
                   "  mkdir -p $BRAMBLE_CHECKPOINT_DIR/checkpoint-1\n"
                   f"  head -c {size} /dev/urandom > $BRAMBLE_CHECKPOINT_DIR/checkpoint-1/w.bin\n"
                   "  echo '{}' > $BRAMBLE_CHECKPOINT_DIR/checkpoint-1/trainer_state.json\n"
                   "  exec sleep 600\n"
                   f"checkpoint:\n  dir: {ckpt}\n")

    def under_way(at_least):
        xs = c.job(jid).get("transfers") or []
        x = xs[0] if xs else None
        return x if x and x["done"] >= at_least and x.get("rate") else None

    first = wait_for(lambda: under_way(1), what="the copy to say how far it is")
    writer = c.job(jid)["nodes"][0]
    assert (first["kind"], first["step"], first["from"], first["to"]) == \
        ("replica", 1, writer, other(names, writer)), first
    assert first["bytes"] == size + 3 and first["done"] < first["bytes"], first
    # the rate, from the order on, over more than a second of the cap's bytes: the
    # holder's first chunks go at once (its window), and the copy begins as soon
    # as it is ordered, so a report a few hundred ms in says more about that burst
    later = wait_for(lambda: under_way(first["done"] + 3_000_000),
                     what="the copy to go on by another 3 MB")
    assert later["done"] > first["done"] and later["rate"] < 6e6, (first, later)
    _, out, _ = c.cli("job", "show", jid)
    assert "copies under way:" in out and f"{writer}" in out, out
    # once copied, nothing is under way
    wait_for(lambda: c.job(jid)["transfers"] == [] and
             copies_of(c.job(jid), 1) == {other(names, writer)}, 60,
             "the copy to be done")
    c.cli("cancel", jid)


# Saves checkpoint-1 and checkpoint-2, then (attempt 1 only) damages one byte of
# checkpoint-2's weights, as a failing disk would, and crashes; a later attempt
# says where it resumed from and ends.
DAMAGED = r"""
import os, sys, time
d = os.environ["BRAMBLE_CHECKPOINT_DIR"]
print("resume from", os.environ.get("BRAMBLE_RESUME_FROM") or "nothing", flush=True)
if os.environ["BRAMBLE_ATTEMPT"] != "1":
    sys.exit(0)
for step in (1, 2):
    c = os.path.join(d, f"checkpoint-{step}")
    os.makedirs(c)
    with open(os.path.join(c, "w.bin"), "wb") as f:
        f.write(bytes([step]) * 100_000)
    with open(os.path.join(c, "trainer_state.json"), "w") as f:
        f.write('{"global_step": %d}\n' % step)
    while not os.path.exists(os.path.join(os.environ["GATE"], f"counted-{step}")):
        time.sleep(0.05)
with open(os.path.join(d, "checkpoint-2", "w.bin"), "r+b") as f:
    f.seek(5000)
    f.write(b"\xff")
sys.exit(3)
"""


def test_a_damaged_checkpoint_on_the_writers_own_node_is_not_resumed_from(make_cluster,
                                                                          tmp_path):
    c = make_cluster(heartbeat="200ms", node_timeout="2s")
    c.add_agents(1, extra=["--replica-port", "0", "--probe-port", "0"])
    gate = tmp_path / "gate"
    gate.mkdir()
    script = tmp_path / "damaged.py"
    script.write_text(DAMAGED)
    ckpt = tmp_path / "ckpt"
    jid = c.submit(f"name: damaged\n"
                   f"command: /usr/bin/python3 {script}\n"
                   f"env: {{GATE: {gate}}}\n"
                   f"restart: {{on: [nonzero_exit], max: 2}}\n"
                   f"checkpoint:\n  dir: {ckpt}\n")
    for step in (1, 2):
        wait_for(lambda: any(cp["step"] == step and cp["manifest"]
                             for cp in c.job(jid)["checkpoints"]),
                 what=f"checkpoint-{step} to be counted")
        (gate / f"counted-{step}").touch()
    j = c.wait_job(jid)
    what = events_text(j)
    assert (j["state"], j["attempt"]) == ("completed", 2), what
    node = j["nodes"][0]
    # checked on its own node before attempt 2 used it: refused, the older one taken
    assert "restoring it on" in what and "falls back to" in what, what
    assert f"{ckpt / 'checkpoint-1'}" in what, what
    log = c.logs(jid)
    assert f"resume from {ckpt / 'checkpoint-1'}" in log, log
    assert f"resume from {ckpt / 'checkpoint-2'}" not in log, log
    assert node in what
    print(what)


def test_a_pull_whose_holder_is_lost_goes_on_from_the_replica(make_cluster, tmp_path):
    """The writer is killed in the middle of a slow pull (its --replica-bandwidth
    caps what it sends): the pull goes on from the other node's replica, keeping
    the bytes it had, and the files are whole."""
    c, names, ckpt = slow_private_nodes(make_cluster, tmp_path, "gone", "4MB/s")
    jid = c.submit("name: two-parts\n"
                   "command: |\n"
                   "  d=$BRAMBLE_CHECKPOINT_DIR/checkpoint-1; mkdir -p $d\n"
                   "  for f in a b c d; do head -c 6000000 /dev/urandom > $d/$f.bin; done\n"
                   "  echo '{}' > $d/trainer_state.json\n"
                   "  exec sleep 600\n"
                   f"checkpoint:\n  dir: {ckpt}\n")
    j = wait_for(lambda: (lambda j: j if copies_of(j, 1) else None)(c.job(jid)), 60,
                 "checkpoint-1 to be copied to the other node")
    writer = j["nodes"][0]
    holder = other(names, writer)
    dest = tmp_path / "mine"
    pull = subprocess.Popen([c.bin("bramble"), "--credential", str(c.credential),
                             "checkpoint", "pull", str(jid), str(dest), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stage = dest / ".bramble-pull-checkpoint-1"
    wait_for(lambda: stage.is_dir() and any(stage.iterdir()), what="the pull to begin")
    c.kill_node(writer)
    out, err = pull.communicate(timeout=120)
    assert pull.returncode == 0, err
    assert f"going on from {holder}'s copy" in err, err
    r = json.loads(out)
    assert (r["step"], r["from"]) == (1, holder), r
    assert tree(dest / "checkpoint-1") == tree(tmp_path / f"disk-{writer}" / "checkpoint-1")
