"""Fair share and quotas (docs/sharing.md), with real users, a real agent and real
jobs.

- Three users each queue 30 short jobs onto one node with two GPUs (declared with
  --gpus, so that two slots exist whatever the machine's CPUs); one of them
  queues all of theirs first. Placed in submission order, that user's 30 would
  all run before anyone else's; with fair share, the users' completed counts,
  sampled all through the run, stay within one of each other.
- Limits set with `bramble user add|set`: a submission over a hard limit
  (max-pending, max-gpus, max-priority) is refused naming it; a job over a
  running limit (max-jobs, gpu-hours-week) waits with that limit as its reason,
  and starts once the limit is lifted; `bramble user list` shows them; what a
  job used and cost is in `job show` and `bramble usage`."""

import json
import secrets

import pytest

from conftest import wait_for

GPU_JOB = "resources: {gpus: 1, cpus: 0}\n"


def add_user(c, name, *limits):
    cred = c.root / f"{name}.credential"
    c.cli("user", "add", name, "--out", cred, *limits)
    return cred


def submit_as(c, cred, text):
    spec = c.write_spec(text)
    _, out, _ = c.cli("submit", spec, "--json", credential=cred)
    return json.loads(out)["id"]


def test_three_users_share_two_gpus_in_turn(make_cluster):
    c = make_cluster(heartbeat="200ms")
    c.start_agent("gpus", extra=["--gpus", "T:1GiB,T:1GiB"])
    c.wait_ready("gpus")
    users = ["ann", "bob", "cat"]
    creds = {u: add_user(c, u) for u in users}
    # closed while the queue fills: every job is pending when it opens, and ann's
    # thirty were queued first
    c.cli("node", "drain", "gpus")
    owner = {}
    for u in users:
        for i in range(30):
            jid = submit_as(c, creds[u], f"name: {u}-{i}\ncommand: sleep 0.1\n{GPU_JOB}")
            owner[jid] = u
    assert sorted(owner) == list(range(min(owner), min(owner) + 90))
    q = c.cli_json("queue")
    assert len([e for e in q if e["id"] in owner]) == 90, q
    c.cli("node", "undrain", "gpus")

    samples = []

    def sample():
        done = {u: 0 for u in users}
        for j in c.jobs():
            if j["id"] in owner and j["state"] == "completed":
                done[owner[j["id"]]] += 1
            assert j["state"] != "failed", j
        samples.append(done)
        spread = max(done.values()) - min(done.values())
        assert spread <= 1, f"completed counts drifted apart: {done} (samples {samples})"
        return sum(done.values()) == 90

    wait_for(sample, timeout=180, interval=0.1, what="the 90 jobs to complete")
    # it was sampled while it ran, not only at the end
    assert len({tuple(s.values()) for s in samples}) >= 10, samples
    # each user's GPU time is in the ledger: 30 jobs of 0.1 s on one GPU each
    use = {u["user"]: u for u in c.cli_json("usage")}
    for u in users:
        assert 30 * 0.1 / 3600 <= use[u]["gpu_hours"] < 30 * 5 / 3600, use
    _, out, _ = c.cli("usage", credential=creds["bob"])
    lines = out.splitlines()
    assert lines[0].split() == ["USER", "GPU-HOURS", "CPU-HOURS", "COST", "RUNNING"], out
    assert [ln.split()[0] for ln in lines[1:]] == ["bob"], out


def test_limits_refuse_or_hold_back_and_say_which(make_cluster):
    c = make_cluster(heartbeat="200ms")
    c.start_agent("gpus", extra=["--gpus", "T:1GiB,T:1GiB", "--cost-per-hour", "3.6"])
    c.wait_ready("gpus")
    cred = add_user(c, "quinn", "--max-jobs", "1", "--max-pending", "2", "--max-gpus", "1",
                    "--max-priority", "5")
    users = {u["name"]: u for u in c.cli_json("user", "list")}
    assert users["quinn"]["limits"] == {"max_jobs": 1, "max_pending": 2, "max_gpus": 1,
                                        "max_priority": 5}, users
    _, out, _ = c.cli("user", "list")
    assert "max-jobs 1" in out and "max-priority 5" in out, out

    def refused(text, *needles):
        spec = c.write_spec(text)
        rc, out, err = c.cli("submit", spec, credential=cred, check=False)
        assert rc != 0 and all(n in err for n in needles), (rc, out, err)

    # hard limits: refused at once, nothing stored
    before = len(c.jobs())
    refused("name: vip\ncommand: \"true\"\npriority: 10\n",
            "priority 10 is over your limit max-priority 5")
    refused("name: big\ncommand: \"true\"\nresources: {gpus: 2, cpus: 0}\n",
            "needs 2 GPUs, over your limit max-gpus 1")
    assert len(c.jobs()) == before

    # a running limit: the second job waits, saying which limit holds it
    gate = c.root / f"gate-{secrets.token_hex(3)}"
    first = submit_as(c, cred, f"name: first\ncommand: \"while [ ! -e {gate} ]; do sleep "
                               f"0.05; done\"\n{GPU_JOB}")
    wait_for(lambda: c.job(first)["state"] == "running", what="quinn's first job to run")
    second = submit_as(c, cred, "name: second\ncommand: \"true\"\n")
    wait_for(lambda: "max-jobs 1 (1 running)" in (c.job(second)["reason"] or ""),
             what="the second job to wait on max-jobs")
    third = submit_as(c, cred, f"name: third\ncommand: \"true\"\n{GPU_JOB}")
    refused("name: fourth\ncommand: \"true\"\n", "you have 2 jobs pending",
            "max-pending is 2")
    # lifted: the CPU job starts; the GPU job waits for quinn's one GPU
    _, out, _ = c.cli("user", "set", "quinn", "--max-jobs", "none")
    assert "limits" in out and "max-jobs" not in out, out
    c.wait_job(second, "completed")
    wait_for(lambda: "max-gpus 1 (1 held, this job needs 1)" in (c.job(third)["reason"] or ""),
             what="the GPU job to wait on max-gpus")
    # the gpu-hours-week check below sets a limit of 0.0001 GPU-hours (0.36 s):
    # quinn's first job holds its GPU until it has used more than that, also on a
    # machine fast enough to get here sooner. Usage is charged every 30 s from the
    # coordinator's start (BR_USAGE_CHARGE_MS): this wait covers a whole period
    # with room to spare, where the default deadline is only one period long
    wait_for(lambda: c.job(first)["usage"]["gpu_hours"] > 0.0002, timeout=60,
             what="quinn's first job to use more than 0.0002 GPU-hours")
    gate.touch()
    c.wait_job(third, "completed")
    job = c.wait_job(first, "completed")
    # what it used and cost: one GPU of two on a node at 3.6 an hour
    use = job["usage"]
    assert use["gpu_hours"] > 0 and use["cpu_hours"] == 0, use
    assert use["cost"] == pytest.approx(3.6 * 0.5 * use["gpu_hours"], abs=2e-6), use
    _, out, _ = c.cli("job", "show", first)
    assert "GPU-hours" in out and "cost" in out, out
    _, table, _ = c.cli("jobs")
    assert table.splitlines()[0].split()[6] == "COST", table
    row = next(ln for ln in table.splitlines() if ln.split()[0] == str(first))
    assert f" {use['cost']:.4f} " in row, (row, use)  # (a cost under 1: four digits)

    # a job holding the whole node costs the node's rate for as long as it held it
    # (from its placement: a little more than it ran)
    whole = c.wait_job(c.submit("name: whole\ncommand: \"sleep 1\"\n"
                                "resources: {gpus: 2, cpus: 0}\n"), "completed")
    ran_h = (whole["ended"] - whole["started"]) / 3600
    cost = whole["usage"]["cost"]
    assert 3.6 * ran_h - 2e-6 <= cost <= 3.6 * (ran_h + 3 / 3600), (cost, ran_h, whole)
    assert whole["usage"]["gpu_hours"] == pytest.approx(2 * cost / 3.6, abs=2e-6), whole

    # gpu-hours-week: used up, GPU jobs wait and CPU jobs still run
    c.cli("user", "set", "quinn", "--gpu-hours-week", "0.0001")
    gpu = submit_as(c, cred, f"name: gpu\ncommand: \"true\"\n{GPU_JOB}")
    wait_for(lambda: "gpu-hours-week 0.0001" in (c.job(gpu)["reason"] or ""),
             what="a GPU job to wait on gpu-hours-week")
    cpu = submit_as(c, cred, "name: cpu\ncommand: \"true\"\n")
    c.wait_job(cpu, "completed")
    c.cli("user", "set", "quinn", "--gpu-hours-week", "none")
    c.wait_job(gpu, "completed")


def test_bad_limits_are_refused(make_cluster):
    c = make_cluster()
    add_user(c, "rae")
    for args, needle in ((["--max-gpus", "two"], "--max-gpus 'two': expected a whole number"),
                         (["--share", "0"], "share must be a number from 0.001"),
                         (["--max-priority", "5000"], "max_priority must be a whole number"),
                         (["--max-jobs", "1.5"], "--max-jobs '1.5'")):
        rc, out, err = c.cli("user", "set", "rae", *args, check=False)
        assert rc != 0 and needle in err, (args, rc, out, err)
    rc, _, err = c.cli("user", "set", "nobody", "--max-jobs", "1", check=False)
    assert rc != 0 and "no user 'nobody'" in err, err
    assert c.cli_json("user", "list")[-1]["limits"] == {}
    # a refusal writes nothing: no user is made
    rc, _, err = c.cli("user", "add", "sid", "--share", "0", check=False)
    assert rc != 0 and "share must be a number" in err, err
    assert "sid" not in {u["name"] for u in c.cli_json("user", "list")}


def test_backfill_short_jobs_go_before_a_reserved_gang(make_cluster):
    """A two-node gang waits behind a job with a time limit; it gets a reservation
    at that limit. A short job whose time_limit ends before it starts in the gap;
    a longer one, and one without a time limit, wait; the gang starts when the
    reservation comes, not later."""
    c = make_cluster(heartbeat="200ms", start=False)
    c.start_coordinator(extra=["--kill-grace", "1s"])
    tok = c.token(uses=2)
    for name in ("node-1", "node-2"):
        c.start_agent(name, token=tok, extra=["--gpus", "T:1GiB"])
    c.wait_ready("node-1", "node-2")
    gpu = "resources: {gpus: 1, cpus: 0%s}\n"
    busy = c.submit("name: busy\ncommand: sleep 1000\ntime_limit: 6s\n" +
                    gpu % ", nodelist: [node-2]")
    started = c.wait_job(busy, "running")["started"]
    gang = c.submit("name: gang\ncommand: \"true\"\n"
                    "resources: {nodes: 2, gpus: 1, cpus: 0}\n")

    def reserved():
        q = {e["id"]: e for e in c.cli_json("queue")}
        return gang in q and q[gang].get("start")

    start = wait_for(reserved, what="the gang to get a reservation")
    assert abs(start - (started + 6)) < 1.5, (start, started)
    short = c.submit("name: short\ncommand: \"sleep 0.2\"\ntime_limit: 2s\n" + gpu % "")
    long_ = c.submit("name: long\ncommand: \"true\"\ntime_limit: 1h\n" + gpu % "")
    unlimited = c.submit("name: unlimited\ncommand: \"true\"\n" + gpu % "")
    job = c.wait_job(short, "completed")
    assert job["nodes"] == ["node-1"], job
    for jid in (long_, unlimited):
        reason = c.job(jid)["reason"] or ""
        assert f"node-1 is reserved for job {gang} in " in reason, reason
        assert "(for a job whose time_limit ends before)" in reason, reason
    assert c.job(gang)["state"] == "pending"
    g = c.wait_job(gang, "completed", timeout=60)
    assert g["started"] <= start + 5, (g["started"], start)  # ticks and the kill, no more
    assert c.job(busy)["reason"].startswith("time limit 6s reached"), c.job(busy)
    for jid in (long_, unlimited):
        c.wait_job(jid, "completed")
