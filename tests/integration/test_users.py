"""Users: `bramble user add` issues a credential whose holder sees, follows and
cancels only their own jobs, cannot manage tokens, nodes or users, and is locked
out at once by `bramble user remove`."""
import json
import os
import stat

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
