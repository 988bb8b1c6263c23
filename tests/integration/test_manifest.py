"""Checkpoint manifests (issue 10; docs/checkpoints.md "The manifest"): a real job's
checkpoint is reported with a manifest whose hash, recomputed here from the files
with hashlib's BLAKE2b-256 and the documented layout, is the one the coordinator
shows; a checkpoint holding a fifo is not counted, and the job's events say why.
"""

import hashlib
import os
import stat
import sys
import uuid
from pathlib import Path

from conftest import wait_for

PYTHON = sys.executable

JOB = r'''
import os, sys, time
d = os.environ["BRAMBLE_CHECKPOINT_DIR"]
go = sys.argv[1]  # the test creates go.2 once checkpoint-1 counts, then go.end


def wait(name):
    while not os.path.exists(go + "." + name):
        time.sleep(0.05)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


c1 = os.path.join(d, "checkpoint-1")
write(os.path.join(c1, "model.safetensors"), os.urandom(3 * 1024 * 1024 + 5))
write(os.path.join(c1, "optim", "state.pt"), b"adam" * 1000)
write(os.path.join(c1, "empty"), b"")
os.chmod(os.path.join(c1, "empty"), 0o600)
os.symlink("/etc/passwd", os.path.join(c1, "outside"))  # recorded, never followed
write(os.path.join(c1, "trainer_state.json"), b'{"global_step": 1}')  # last
wait("2")
c2 = os.path.join(d, "checkpoint-2")
write(os.path.join(c2, "model.safetensors"), b"x" * 100)
os.mkfifo(os.path.join(c2, "pipe"))
write(os.path.join(c2, "trainer_state.json"), b'{"global_step": 2}')
wait("end")
'''


def manifest_of(root):
    """(hash, files, bytes) of a checkpoint directory, as docs/checkpoints.md
    defines its manifest."""
    entries = []

    def walk(rel):
        for e in os.scandir(os.path.join(root, rel) if rel else root):
            path = f"{rel}/{e.name}" if rel else e.name
            st = os.lstat(e.path)
            if stat.S_ISDIR(st.st_mode):
                walk(path)
            elif stat.S_ISLNK(st.st_mode):
                entries.append((path.encode(), b"l", st, os.readlink(e.path).encode()))
            else:
                with open(e.path, "rb") as f:
                    digest = hashlib.blake2b(f.read(), digest_size=32).hexdigest()
                entries.append((path.encode(), b"f", st, digest.encode()))

    walk("")
    h = hashlib.blake2b(digest_size=32)
    h.update(b"bramble-manifest-1\0dir\0")
    for path, kind, st, content in sorted(entries):
        for field in (path, kind, str(st.st_mode & 0o7777).encode(),
                      str(st.st_size).encode(), content):
            h.update(field + b"\0")
    size = sum(st.st_size for _, kind, st, _ in entries if kind == b"f")
    return h.hexdigest(), len(entries), size


def test_checkpoint_reported_with_manifest(make_cluster, tmp_path):
    c = make_cluster()
    (node,) = c.add_agents(1, names=[f"m{uuid.uuid4().hex[:6]}"])
    script = tmp_path / "job.py"
    script.write_text(JOB)
    ckpt, go = tmp_path / "ckpt", tmp_path / "go"
    jid = c.submit(f"name: manifest\n"
                   f"command: exec {PYTHON} -u {script} {go}\n"
                   f"checkpoint:\n  dir: {ckpt}\n  pattern: \"checkpoint-*\"\n"
                   f"  complete_file: trainer_state.json\n")
    cks = wait_for(lambda: c.job(jid)["checkpoints"], what="checkpoint-1 to count")
    want_hash, want_files, want_bytes = manifest_of(ckpt / "checkpoint-1")
    assert want_files == 5
    (ck,) = cks
    assert ck["step"] == 1
    assert ck["manifest"] == {"hash": want_hash, "files": want_files, "bytes": want_bytes,
                              "listed": want_files, "truncated": False}, (ck, want_hash)
    assert want_hash[:12] in c.cli("job", "show", str(jid))[1]

    Path(f"{go}.2").touch()
    refused = f"checkpoint {ckpt}/checkpoint-2 (step 2) of attempt 1 not counted: " \
              f"special file pipe (a fifo)"
    wait_for(lambda: any(refused in (e["reason"] or "") for e in c.job(jid)["events"]),
             what="checkpoint-2 to be refused, with an event")
    assert "special file pipe (a fifo)" in c.agents[node].output()

    Path(f"{go}.end").touch()
    j = c.wait_job(jid)
    assert j["state"] == "completed", j["events"]
    assert [ck["step"] for ck in j["checkpoints"]] == [1]


LAST = r'''
import os, sys
d, code = os.environ["BRAMBLE_CHECKPOINT_DIR"], int(sys.argv[1])
for name in sys.argv[2:]:  # "checkpoint-N": files, then the marker; "step-N": no marker
    c = os.path.join(d, name)
    os.makedirs(c)
    with open(os.path.join(c, "w.bin"), "wb") as f:
        f.write(os.urandom(4096))
    if name.startswith("checkpoint-"):
        with open(os.path.join(c, "DONE"), "w") as f:
            f.write("ok")
sys.exit(code)  # at once: no time for the watcher's next scan
'''


def test_last_checkpoint_before_exit_counts(make_cluster, tmp_path):
    """A job that finishes its last checkpoint and exits at once has that checkpoint
    counted (docs/checkpoints.md, "Off the agent's loop"): the agent looks at the
    directory once more before it reports the exit. Without a marker it counts after
    a clean exit once quiet for its stable time; after a failure it does not (it
    may be torn)."""
    c = make_cluster()
    c.add_agents(1, names=[f"l{uuid.uuid4().hex[:6]}"])
    script = tmp_path / "last.py"
    script.write_text(LAST)

    def submit(name, code, entries, marker):
        spec = (f"name: {name}\ncommand: exec {PYTHON} -u {script} {code} {entries}\n"
                f"checkpoint:\n  dir: {tmp_path / name}\n")
        if marker:
            spec += "  pattern: \"checkpoint-*\"\n  complete_file: DONE\n"
        else:
            spec += "  pattern: \"step-*\"\n"
        return c.submit(spec)

    marked = submit("marked", 0, "checkpoint-1 checkpoint-2 checkpoint-3", True)
    quiet = submit("quiet", 0, "step-4", False)
    failed = submit("failed", 1, "step-5", False)
    want = {marked: ("completed", 3), quiet: ("completed", 4), failed: ("failed", None)}
    for jid, (state, step) in want.items():
        j = c.wait_job(jid)
        assert j["state"] == state, j["events"]
        steps = [ck["step"] for ck in j["checkpoints"]]
        assert (steps[-1] if steps else None) == step, (j["name"], j["checkpoints"])
