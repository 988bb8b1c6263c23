"""A checkpoint with more files than a report lists (docs/checkpoints.md, "The
manifest"; PROTOCOL.md section 11, the whole listing): 1,600 shards, whose
manifest the writer reports truncated while it keeps the whole one. It is still
copied to the other node, pulled to the user's machine and restored when its
writer dies, each verified file by file against the whole manifest.

Agents with no shared disk, as in test_replica_restore.py. Needs root (mount
namespaces and bind mounts).
"""

import os
import time

import pytest

from conftest import wait_for
from test_checkpoint_pull import tree
from test_recovery import NT_S, brief, events_text, other
from test_replica_restore import copies_of, two_private_nodes

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for mount namespaces")

SHARDS = 1600  # past what a report lists (about 1,300 entries of these names)

JOB = r"""
import os, sys, time
d, shards = os.environ["BRAMBLE_CHECKPOINT_DIR"], int(sys.argv[1])
start = os.environ.get("BRAMBLE_RESUME_FROM")
if start:
    parts = sorted(os.listdir(os.path.join(start, "shards")))
    ok = all(open(os.path.join(start, "shards", p), "rb").read() == p.encode() * 3
             for p in parts)
    print("attempt %s resumed from %s: %d shards, %s" % (
        os.environ["BRAMBLE_ATTEMPT"], start, len(parts), "intact" if ok else "DAMAGED"),
        flush=True)
    sys.exit(0)
c = os.path.join(d, "checkpoint-1")
os.makedirs(os.path.join(c, "shards"))
for i in range(shards):
    name = "part-%05d-of-%05d-%s.bin" % (i, shards, "x" * 60)
    with open(os.path.join(c, "shards", name), "wb") as f:
        f.write(name.encode() * 3)
with open(os.path.join(c, "trainer_state.json"), "w") as f:
    f.write('{"global_step": 1}\n')
while True:  # until its node dies
    time.sleep(1)
"""


def test_big_checkpoint_copied_pulled_and_restored(make_cluster, tmp_path):
    c, names, ckpt, disk = two_private_nodes(make_cluster, tmp_path)
    script = tmp_path / "big.py"
    script.write_text(JOB)
    jid = c.submit(f"name: big-ckpt\n"
                   f"command: /usr/bin/python3 {script} {SHARDS}\n"
                   f"checkpoint:\n  dir: {ckpt}\n"
                   f"restart:\n  on: [node_lost]\n")

    def copied():
        j = c.job(jid)
        return j if j["nodes"] and (set(names) - set(j["nodes"])) & copies_of(j, 1) else None

    try:
        j = wait_for(copied, 120, "checkpoint-1 to be counted and copied")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{events_text(c.job(jid))}") from None
    writer = j["nodes"][0]
    survivor = other(names, writer)
    (ck,) = j["checkpoints"]
    m = ck["manifest"]
    assert m["files"] == SHARDS + 1 and m["truncated"] and m["listed"] < m["files"], m

    # to the user's machine, through the coordinator, verified
    r = c.cli_json("checkpoint", "pull", jid, tmp_path / "mine", timeout=180)
    assert (r["step"], r["files"], r["bytes"]) == (1, SHARDS + 1, m["bytes"]), r
    assert r["received"] == m["bytes"], r
    want = tree(disk[writer] / "checkpoint-1")
    assert tree(tmp_path / "mine" / "checkpoint-1") == want

    # the writer dies: the job resumes on the survivor from its replica
    wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
             what="the coordinator's start-up grace to pass")
    c.kill_node(writer)
    j = c.wait_job(jid, timeout=180)  # a restore of 1,601 files, file by file
    assert (j["state"], j["attempt"], j["nodes"]) == ("completed", 2, [survivor]), brief(j)
    log = c.wait_logs(jid, "attempt 2 resumed")
    assert f"attempt 2 resumed from {ckpt / 'checkpoint-1'}: {SHARDS} shards, intact" \
        in log, log
    restored = [e for e in j["events"] if "restored and verified" in (e["reason"] or "")]
    assert restored and "checkpoint-1" in restored[-1]["reason"], events_text(j)
    assert tree(disk[survivor] / "checkpoint-1") == want
