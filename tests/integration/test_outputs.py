"""Outputs: `outputs: [PATTERN...]` keeps the files of an attempt's working dir that
the patterns match, at its end (failed attempts too), in the coordinator's store
before the attempt's exit is reported; `bramble outputs JOB [--attempt N] DEST`
fetches them back to the user's machine, verified by hash. The agents run where the
"laptop" is not visible (test_code.py's hidden())."""
import hashlib
import json
import os

import pytest

from conftest import read_yaml_flat

from test_code import events, laptop_cluster, submit, write
from treefiles import hidden_node

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for mount namespaces")

SPEC = """name: {name}
code: .
outputs: [results/, "*.json", "!tmp.json"]
restart: {{max: 1, on: [nonzero_exit]}}
resources: {{nodes: {nodes}}}
command: |
  mkdir -p results/sub
  echo "attempt $BRAMBLE_ATTEMPT on $BRAMBLE_NODE_NAME" > results/who.txt
  echo deep > results/sub/deep.txt
  echo '{{"loss": 0.5}}' > metrics.json
  echo scratch > tmp.json
  echo not kept > other.txt
  test "$BRAMBLE_ATTEMPT" -ge 2
"""


def tree(root):
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_outputs_of_every_attempt_come_back_verified(make_cluster, tmp_path):
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path)
    proj = laptop / "proj"
    write(proj / "job.yaml", SPEC.format(name="outs", nodes=1))
    job, _ = submit(c, proj / "job.yaml", "--wait")
    shown = c.cli_json("job", "show", str(job))
    assert shown["state"] == "completed" and shown["attempt"] == 2, shown
    assert [(o["attempt"], o["files"]) for o in shown["outputs"]] == [(1, 3), (2, 3)], shown
    said = events(c, job)
    assert sum("output file(s)" in e for e in said) == 2, said

    dest = laptop / "got"
    rc, out, _ = c.cli("outputs", job, dest)
    assert "fetched the outputs of job" in out and "3 files" in out and "verified" in out, out
    got = tree(dest)
    assert set(got) == {"results/who.txt", "results/sub/deep.txt", "metrics.json"}, got
    assert got["results/who.txt"].startswith("attempt 2 on ")
    # the failed attempt's too
    first = laptop / "first"
    r = json.loads(c.cli("outputs", job, "--attempt", "1", first, "--json")[1])
    assert (r["attempt"], r["files"]) == (1, 3), r
    assert tree(first)["results/who.txt"].startswith("attempt 1 on ")
    # again into the same place: the same bytes are left alone; other bytes are not
    # overwritten
    c.cli("outputs", job, dest)
    (dest / "metrics.json").write_text("edited here\n")
    rc, _, err = c.cli("outputs", job, dest, check=False)
    assert rc == 1 and "metrics.json is there already, with other bytes" in err, err
    assert (dest / "metrics.json").read_text() == "edited here\n"
    rc, _, err = c.cli("outputs", job, "--attempt", "5", laptop / "none", check=False)
    assert rc == 1 and "attempt 5 left no outputs" in err, err


def test_a_gangs_nodes_each_leave_their_own(make_cluster, tmp_path):
    c, laptop, names = laptop_cluster(make_cluster, tmp_path)
    proj = laptop / "proj"
    write(proj / "job.yaml", SPEC.format(name="gang", nodes=2).replace(
        'test "$BRAMBLE_ATTEMPT" -ge 2', "true"))
    job, _ = submit(c, proj / "job.yaml", "--wait")
    dest = laptop / "gang"
    c.cli("outputs", job, dest)
    for n in names:
        assert (dest / n / "results" / "who.txt").read_text() == f"attempt 1 on {n}\n"


def test_outputs_are_their_owners_and_a_hash_grants_nothing(make_cluster, tmp_path):
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1)
    creds = {}
    for u in ("alice", "bob"):
        creds[u] = c.root / f"{u}.credential"
        c.cli("user", "add", u, "--out", creds[u])
    proj = laptop / "proj"
    write(proj / "job.yaml", SPEC.format(name="mine", nodes=1).replace(
        'test "$BRAMBLE_ATTEMPT" -ge 2', "true"))
    rc, out, _ = c.cli("submit", proj / "job.yaml", "--wait", credential=creds["alice"])
    job = int(out.strip())
    rc, _, err = c.cli("outputs", job, laptop / "b", credential=creds["bob"], check=False)
    assert rc == 1 and f"no job {job}" in err, err
    row = c.cli_json("job", "show", str(job), credential=creds["alice"])["outputs"][0]
    code_hash = hashlib.blake2b((proj / "job.yaml").read_bytes(), digest_size=32).hexdigest()

    def read(who, h):
        cred = read_yaml_flat(creds[who])
        cl = c.raw_client(cred["public_key"], cred["secret_key"])
        try:
            return cl.request("content.read", {"job": job, "hash": h, "offset": 0})[1]
        finally:
            cl.close()

    assert read("bob", row["listing"])["errnum"] == 2  # not bob's job
    mine = read("alice", row["listing"])
    assert "errnum" not in mine and mine["offset"] == 0, mine
    r = read("alice", code_hash)  # the job's code is not its outputs
    assert r["errnum"] == 2 and "none of job" in r["error"], r


def test_outputs_over_the_owners_quota_are_not_kept_and_say_why(make_cluster, tmp_path):
    """A user's outputs count in their --user-store-quota: past it, the attempt's
    outputs are not kept, the job's event says why, and the job itself is not
    failed for it; `bramble outputs` then has nothing to fetch."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    c = make_cluster(start=False)
    c.start_coordinator(extra=["--user-store-quota", "1MiB"])
    hidden_node(c, laptop)
    cred = c.root / "carol.credential"
    c.cli("user", "add", "carol", "--out", cred)
    proj = laptop / "proj"
    write(proj / "run.sh", "head -c 2000000 /dev/urandom > big.out\n")
    write(proj / "job.yaml", "name: bigout\ncode: .\noutputs: [\"*.out\"]\n"
                             "command: sh run.sh\n")
    rc, out, _ = c.cli("submit", proj / "job.yaml", "--wait", credential=cred)
    job = int(out.strip())
    j = c.cli_json("job", "show", str(job), credential=cred)
    assert j["state"] == "completed", j
    said = [e for e in events(c, job) if "outputs" in e]
    assert any("are not kept" in e and "quota" in e for e in said), said
    assert not j.get("outputs"), j.get("outputs")
    rc, _, err = c.cli("outputs", job, laptop / "got", credential=cred, check=False)
    assert rc != 0 and "no outputs" in err, err
