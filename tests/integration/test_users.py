"""Users: `bramble user add` issues a credential whose holder sees, follows and
cancels only their own jobs, cannot manage tokens, nodes or users, and is locked
out at once by `bramble user remove`; `bramble usage` counts a user's jobs that
still run, up to now."""
import json
import os
import stat

import pytest

from conftest import wait_for


def test_user_sees_and_cancels_only_own_jobs(cluster):
    c = cluster
    c.add_agents(1)
    cred = c.root / "alice.credential"
    c.cli("user", "add", "alice", "--out", cred)
    assert stat.S_IMODE(os.stat(cred).st_mode) == 0o600
    users = json.loads(c.cli("user", "list", "--json")[1])
    assert {u["name"]: u["kind"] for u in users} == {"admin": "admin", "alice": "user"}

    def as_alice(*args, check=True):
        return c.cli(*args, credential=cred, check=check)

    spec = c.root / "long.yaml"
    spec.write_text("name: NAME\ncommand: sleep 1000\n")
    _, out, _ = as_alice("submit", spec, "--set", "name=alices")
    mine = int(out.strip())
    _, out, _ = c.cli("submit", spec, "--set", "name=admins")
    theirs = int(out.strip())
    wait_for(lambda: c.job(theirs)["state"] == "running", what="the admin's job to run")

    # only her own job is listed, shown, and cancellable
    ids = [j["id"] for j in json.loads(as_alice("jobs", "--all", "--json")[1])]
    assert ids == [mine], ids
    rc, _, err = as_alice("job", "show", theirs, check=False)
    assert rc == 1 and f"no job {theirs}" in err, err
    rc, _, err = as_alice("cancel", theirs, check=False)
    assert rc == 1 and f"no job {theirs}" in err, err
    rc, _, err = as_alice("logs", theirs, check=False)
    assert rc == 1, err
    assert c.job(theirs)["state"] == "running"
    as_alice("cancel", mine)
    wait_for(lambda: c.job(mine)["state"] == "cancelled", what="her job to be cancelled")

    # events: hers and the nodes', not the admin's job
    rc, out, _ = as_alice("events", "--json")
    evs = [json.loads(line) for line in out.splitlines() if line.strip()]
    jobs = {e["job"] for e in evs}
    assert mine in jobs and theirs not in jobs, jobs
    assert any(e["job"] is None for e in evs), "node events are shown to users"

    # no admin powers
    for args in (["token", "create"], ["node", "drain", "node-1"],
                 ["user", "add", "mallory"], ["user", "list"]):
        rc, _, err = as_alice(*args, check=False)
        assert rc == 1 and "not allowed" in err, (args, err)

    # removed: refused from the next request on, and cannot connect again
    c.cli("user", "remove", "alice")
    rc, _, err = as_alice("jobs", check=False)
    assert rc == 1 and "refused" in err, err
    c.cli("cancel", theirs)


def test_usage_counts_a_running_job_up_to_now(make_cluster):
    """A job is charged every 30 s and at its end; `bramble usage` also counts what
    a job still running held since, so its owner's line is there from its start."""
    c = make_cluster()
    c.start_agent("gpu", extra=["--gpus", "T:1GiB", "--cost-per-hour", "3.6"])
    c.wait_ready("gpu")
    cred = c.root / "rita.credential"
    c.cli("user", "add", "rita", "--out", cred)
    spec = c.write_spec("name: long\ncommand: exec sleep 1000\n"
                        "resources: {gpus: 1, cpus: 0}\n")
    _, out, _ = c.cli("submit", spec, "--json", credential=cred)
    jid = json.loads(out)["id"]
    wait_for(lambda: c.job(jid)["state"] == "running", what="rita's job to run")

    def rows(*args, **kw):
        return {r["user"]: r for r in c.cli_json("usage", *args, **kw)}

    # long before its first charge: her line is there, marked as running
    mine = rows(credential=cred)
    assert list(mine) == ["rita"] and mine["rita"]["running"] == 1, mine
    first = wait_for(lambda: (r := rows(credential=cred)["rita"])["gpu_hours"] > 0 and r,
                     what="rita's running job to have used GPU time")
    # one GPU of a one-GPU node at 3.6 an hour: the node's whole rate; no CPUs held
    assert first["cost"] == pytest.approx(3.6 * first["gpu_hours"], abs=2e-6), first
    assert first["cpu_hours"] == 0, first
    # it goes on counting while the job runs
    wait_for(lambda: rows(credential=cred)["rita"]["gpu_hours"] > first["gpu_hours"],
             what="rita's usage to grow while her job runs")
    _, out, _ = c.cli("usage", credential=cred)
    lines = out.splitlines()
    assert lines[0].split() == ["USER", "GPU-HOURS", "CPU-HOURS", "COST", "RUNNING"], out
    assert lines[1].split()[0] == "rita" and lines[1].split()[4] == "1", out
    # the admin sees it too, and --user picks her line
    assert rows()["rita"]["running"] == 1
    assert list(rows("--user", "rita")) == ["rita"]
    # ended: charged at its end, no longer running; what it used stays
    seen = rows(credential=cred)["rita"]
    c.cli("cancel", jid)
    c.wait_job(jid, "cancelled")
    after = rows(credential=cred)["rita"]
    assert after["running"] == 0 and after["gpu_hours"] >= seen["gpu_hours"], (seen, after)
    _, out, _ = c.cli("usage", credential=cred)
    assert out.splitlines()[1].split()[4] == "-", out
