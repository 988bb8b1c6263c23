"""Joining, inventory, running jobs, logs, exit codes, the job environment,
GPUs, scheduling constraints, restarts and drain (ARCHITECTURE.md).

The tests that take `cluster2` share one (its jobs have names of their own, and
only the drain test, the last, leaves a node drained)."""

import re
import time

import pytest

from conftest import wait_for


@pytest.fixture
def cluster2(shared_cluster2):
    """conftest's cluster2, one for the whole module (conftest's shared_cluster2)."""
    return shared_cluster2

INVENTORY_FIELDS = ("name", "state", "arch", "cpus", "memory", "gpus", "labels",
                    "cost_per_hour", "last_seen")


def test_two_agents_join_and_list_inventory(cluster):
    before = time.time()
    tok = cluster.token(uses=2)
    cluster.start_agent("node-1", token=tok,
                        extra=["--label", "site=home", "--cost-per-hour", "0.25"])
    cluster.start_agent("node-2", token=tok)
    cluster.wait_ready("node-1", "node-2")

    nodes = cluster.cli_json("nodes")
    assert isinstance(nodes, list)
    by_name = {n["name"]: n for n in nodes}
    assert set(by_name) == {"node-1", "node-2"}
    for name, n in by_name.items():
        for field in INVENTORY_FIELDS:
            assert field in n, f"{name}: nodes --json lacks {field!r}: {n}"
        assert n["state"] == "ready"
        assert isinstance(n["arch"], str) and n["arch"], n
        assert isinstance(n["cpus"], int) and n["cpus"] >= 1, n
        assert isinstance(n["memory"], int) and n["memory"] > 0, n
        assert isinstance(n["gpus"], list), n
        assert isinstance(n["labels"], dict), n
        assert isinstance(n["cost_per_hour"], (int, float)), n
        assert isinstance(n["last_seen"], (int, float)), n
        # unix seconds, recent (allow for clock granularity)
        assert before - 5 <= n["last_seen"] <= time.time() + 5, n
    assert by_name["node-1"]["labels"] == {"site": "home"}
    assert abs(by_name["node-1"]["cost_per_hour"] - 0.25) < 1e-9
    assert by_name["node-2"]["labels"] == {}

    # the plain form lists both too
    _, out, _ = cluster.cli("nodes")
    assert "node-1" in out and "node-2" in out


def test_job_output_shows_in_logs(cluster2):
    jid = cluster2.submit("name: hello-out\ncommand: echo \"hello from $BRAMBLE_NODE_NAME\"\n")
    job = cluster2.wait_job(jid)
    assert job["state"] == "completed", job
    assert job["exit_code"] == 0, job
    assert len(job["nodes"]) == 1 and job["nodes"][0] in ("node-1", "node-2"), job
    out = cluster2.wait_logs(jid, f"hello from {job['nodes'][0]}")
    assert out.strip().splitlines() == [f"hello from {job['nodes'][0]}"], out


def test_submit_wait_exit_status(cluster2):
    ok = cluster2.write_spec("name: ok-job\ncommand: \"true\"\n")
    rc, out, err = cluster2.cli("submit", ok, "--wait", check=False)
    assert rc == 0, (out, err)
    ok_id = int(out.strip().splitlines()[0])

    bad = cluster2.write_spec("name: bad-job\ncommand: echo failing >&2; exit 7\n")
    rc, out, err = cluster2.cli("submit", bad, "--wait", check=False)
    assert rc == 1, (rc, out, err)
    bad_id = int(out.strip().splitlines()[0])

    assert cluster2.job(ok_id)["state"] == "completed"
    j = cluster2.job(bad_id)
    assert j["state"] == "failed", j
    assert j["exit_code"] == 7, j
    # stderr of the job is in the logs too
    cluster2.wait_logs(bad_id, "failing", stream="stderr")
    assert "failing" not in cluster2.logs(bad_id, stream="stdout")


def test_job_environment(cluster2):
    spec = ("name: env-check\n"
            "command: env | grep -E '^(BRAMBLE_|NNODES=|NODE_RANK=|MASTER_ADDR=|MASTER_PORT=)'"
            " | sort; echo END\n")
    jid = cluster2.submit(spec)
    job = cluster2.wait_job(jid)
    assert job["state"] == "completed", job
    out = cluster2.wait_logs(jid, "END")
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    node = job["nodes"][0]
    assert env.get("BRAMBLE_JOB_ID") == str(jid), env
    assert env.get("BRAMBLE_JOB_NAME") == "env-check", env
    assert env.get("BRAMBLE_ATTEMPT") == "1", env
    assert env.get("BRAMBLE_NODE_NAME") == node, env
    assert env.get("NNODES") == "1", env
    assert env.get("NODE_RANK") == "0", env
    assert env.get("MASTER_ADDR"), env
    assert re.fullmatch(r"\d+", env.get("MASTER_PORT", "")), env
    assert 1 <= int(env["MASTER_PORT"]) <= 65535, env


def test_declared_gpus_and_cuda_visible_devices(cluster):
    cluster.start_agent("node-1", extra=["--gpus", "RTX 4090:24GiB,RTX 3090:24GiB"])
    cluster.wait_ready("node-1")
    n = cluster.nodes()["node-1"]
    gpus = sorted(n["gpus"], key=lambda g: g["index"])
    assert [g["model"] for g in gpus] == ["RTX 4090", "RTX 3090"], n["gpus"]
    assert [g["index"] for g in gpus] == [0, 1], n["gpus"]
    for g in gpus:
        assert g["vram_total"] == 24 * 2**30, g
        assert "vram_free" in g, g

    jid = cluster.submit("name: one-gpu\n"
                         "command: echo \"CVD=[$CUDA_VISIBLE_DEVICES]\"\n"
                         "resources:\n  gpus: 1\n")
    job = cluster.wait_job(jid)
    assert job["state"] == "completed", job
    out = cluster.wait_logs(jid, "CVD=")
    m = re.search(r"CVD=\[(.*)\]", out)
    assert m and re.fullmatch(r"[01]", m.group(1)), f"CUDA_VISIBLE_DEVICES: {out!r}"


def test_job_without_gpus_sees_empty_cuda_visible_devices(cluster2):
    jid = cluster2.submit("name: no-gpu\ncommand: echo \"CVD=[${CUDA_VISIBLE_DEVICES-unset}]\"\n")
    cluster2.wait_job(jid)
    out = cluster2.wait_logs(jid, "CVD=")
    assert "CVD=[]" in out, out


def test_unsatisfiable_job_stays_pending_with_reason(cluster2):
    big = cluster2.submit("name: too-big\ncommand: \"true\"\nresources:\n  cpus: 100000\n")
    # a later, satisfiable job runs to completion: the scheduler has had its chances
    small = cluster2.submit("name: small\ncommand: \"true\"\n")
    assert cluster2.wait_job(small)["state"] == "completed"
    for _ in range(3):
        small = cluster2.submit("name: small\ncommand: \"true\"\n")
        assert cluster2.wait_job(small)["state"] == "completed"
    j = cluster2.job(big)
    assert j["state"] == "pending", j
    assert isinstance(j.get("reason"), str) and j["reason"].strip(), j
    assert j["nodes"] == [] and j["started"] is None, j


def test_restart_on_nonzero_exit_then_failed(cluster2):
    spec = cluster2.write_spec("name: flaky\n"
                               "command: echo \"attempt $BRAMBLE_ATTEMPT\"; exit 3\n"
                               "restart:\n  max: 2\n  on: [nonzero_exit]\n")
    rc, out, err = cluster2.cli("submit", spec, "--wait", check=False, timeout=120)
    assert rc == 1, (rc, out, err)
    jid = int(out.strip().splitlines()[0])
    j = cluster2.job(jid)
    assert j["state"] == "failed", j
    assert j["attempt"] == 3, j
    assert j["exit_code"] == 3, j
    # each attempt ran (attempt numbers 1, 2, 3 seen by the job)
    out = cluster2.wait_logs(jid, "attempt 3")
    assert "attempt 3" in out


def test_no_restart_without_policy(cluster2):
    rc, out, err = cluster2.cli("submit", cluster2.write_spec(
        "name: once\ncommand: exit 4\n"), "--wait", check=False)
    assert rc == 1, (rc, out, err)
    j = cluster2.job(int(out.split()[0]))
    assert (j["state"], j["attempt"], j["exit_code"]) == ("failed", 1, 4), j


def test_drain_and_undrain(cluster2):
    cluster2.cli("node", "drain", "node-1")
    wait_for(lambda: cluster2.nodes()["node-1"]["state"] == "draining",
             what="node-1 to be draining")
    assert cluster2.nodes()["node-2"]["state"] == "ready"
    for i in range(3):
        jid = cluster2.submit(f"name: while-drained-{i}\ncommand: \"true\"\n")
        j = cluster2.wait_job(jid)
        assert j["state"] == "completed" and j["nodes"] == ["node-2"], j

    cluster2.cli("node", "undrain", "node-1")
    wait_for(lambda: cluster2.nodes()["node-1"]["state"] == "ready",
             what="node-1 to be ready again")
    cluster2.cli("node", "drain", "node-2")
    wait_for(lambda: cluster2.nodes()["node-2"]["state"] == "draining",
             what="node-2 to be draining")
    jid = cluster2.submit("name: after-undrain\ncommand: \"true\"\n")
    j = cluster2.wait_job(jid)
    assert j["state"] == "completed" and j["nodes"] == ["node-1"], j

    # both drained: a job waits
    cluster2.cli("node", "drain", "node-1")
    wait_for(lambda: cluster2.nodes()["node-1"]["state"] == "draining",
             what="node-1 to be draining")
    jid = cluster2.submit("name: nowhere\ncommand: \"true\"\n")
    for i in range(3):  # give the scheduler a few chances (other traffic)
        cluster2.cli("nodes")
        assert cluster2.job(jid)["state"] == "pending"
    cluster2.cli("node", "undrain", "node-2")
    assert cluster2.wait_job(jid)["state"] == "completed"


def test_last_seen_follows_heartbeats(cluster):
    cluster.start_agent("node-1")
    cluster.wait_ready("node-1")
    first = cluster.nodes()["node-1"]["last_seen"]
    # heartbeats every 250 ms: last_seen must move on (it is the last time the
    # coordinator heard from the node, not the time it joined)
    wait_for(lambda: cluster.nodes()["node-1"]["last_seen"] >= first + 1.0,
             what="node-1's last_seen to advance with its heartbeats")
    assert cluster.nodes()["node-1"]["last_seen"] <= time.time() + 5
