"""Sharing the cluster (docs/sharing.md): `bramble queue` lists pending jobs in
the scheduler's order, and jobs wait for other jobs (`after: [{job: N, on:
ok|failed|ended|started}]`): a waiting job is placed only once its wait came true, says what
it waits for meanwhile, and fails at once, saying why, when its wait can no longer
come true. At submit, a wait on a job that is not there (or not the caller's) or
that can never come true is refused with the entry named.

The tests share one `cluster2`; each gates its first job on a file of its own."""

import json
import secrets

import pytest


@pytest.fixture
def cluster2(shared_cluster2):
    """conftest's cluster2, one for the whole module (conftest's shared_cluster2)."""
    return shared_cluster2


def gated(c, code=0):
    """Submit a job that runs until its gate file appears, then exits code; the job
    id and the gate's path."""
    gate = c.root / f"gate-{secrets.token_hex(4)}"
    jid = c.submit(f"name: gated-{gate.name}\n"
                   f"command: \"while [ ! -e {gate} ]; do sleep 0.05; done; exit {code}\"\n")
    return jid, gate


def after(c, name, job, on):
    return c.submit(f"name: {name}-{secrets.token_hex(3)}\ncommand: \"true\"\n"
                    f"after: [{{job: {job}, on: {on}}}]\n")


def test_waits_for_ok_and_started(cluster2):
    c = cluster2
    a, gate = gated(c)
    on_ok = c.submit(f"name: on-ok-{secrets.token_hex(3)}\ncommand: \"true\"\n",
                     "--set", f"after=[{{job: {a}}}]")  # on: ok, the default
    on_started = after(c, "on-started", a, "started")
    c.wait_job(a, "running")
    # it runs: the job waiting for its start goes; the one waiting for its end waits
    assert c.wait_job(on_started)["state"] == "completed"
    j = c.job(on_ok)
    assert j["state"] == "pending", j
    assert j["reason"] == f"waiting: for job {a} to end ok", j
    gate.touch()
    done = c.wait_job(on_ok)
    assert done["state"] == "completed", done
    first = c.job(a)
    assert first["state"] == "completed"
    assert done["started"] >= first["ended"], (done, first)


def test_a_failure_settles_every_wait(cluster2):
    c = cluster2
    a, gate = gated(c, code=3)
    on_ok = after(c, "on-ok", a, "ok")
    on_failed = after(c, "on-failed", a, "failed")
    on_ended = after(c, "on-ended", a, "ended")
    gate.touch()
    assert c.wait_job(a)["state"] == "failed"
    never = c.wait_job(on_ok)
    assert never["state"] == "failed", never
    assert never["reason"] == (f"after: job {a} ended failed or cancelled, so it can "
                               "never end ok"), never
    assert not never["nodes"], never  # it never ran anywhere
    assert c.wait_job(on_failed)["state"] == "completed"
    assert c.wait_job(on_ended)["state"] == "completed"
    events = " | ".join(e["reason"] for e in c.job(on_ok)["events"])
    assert "can never end ok" in events, events


def test_a_cancelled_wait_and_a_chain(cluster2):
    """A job cancelled before it ran can never start; the job waiting for that
    start fails, and so does the one waiting for that one to end ok."""
    c = cluster2
    a = c.submit(f"name: huge-{secrets.token_hex(3)}\ncommand: \"true\"\n"
                 "resources: {cpus: 100000}\n")  # fits nowhere: it waits
    on_started = after(c, "on-started", a, "started")
    chained = after(c, "chained", on_started, "ok")
    c.cli("cancel", a)
    j = c.wait_job(on_started)
    assert j["state"] == "failed" and "ended without running" in j["reason"], j
    j = c.wait_job(chained)
    assert j["state"] == "failed" and f"job {on_started}" in j["reason"], j


def test_bad_waits_are_refused_at_submit(cluster2):
    c = cluster2
    done = c.submit(f"name: done-{secrets.token_hex(3)}\ncommand: \"true\"\n")
    assert c.wait_job(done)["state"] == "completed"
    cases = [
        (f"after: [{{job: {done}, on: failed}}]",
         f"after[0]: job {done} has already completed, so it can never end failed"),
        ("after: [{job: 999999}]", "after[0]: no job 999999"),
        ("after: [{job: 0}]", "after[0].job: 0 is out of range"),
        ("after: [{job: 3, on: soon}]", "after[0].on: expected ok, failed, ended or started"),
        ("after: [{job: 3, when: ok}]", "unknown key 'when' in after[0]"),
    ]
    before = len(c.jobs())
    for text, words in cases:
        spec = c.write_spec(f"name: bad-{secrets.token_hex(3)}\ncommand: \"true\"\n{text}\n")
        rc, out, err = c.cli("submit", spec, check=False)
        assert rc != 0 and words in err, (text, rc, out, err)
    assert len(c.jobs()) == before  # nothing was stored
    # another user's job is not there for them
    cred = c.root / f"u-{secrets.token_hex(3)}.credential"
    c.cli("user", "add", cred.stem, "--out", str(cred))
    spec = c.write_spec(f"name: theirs-{secrets.token_hex(3)}\ncommand: \"true\"\n"
                        f"after: [{{job: {done}, on: ended}}]\n")
    rc, out, err = c.cli("submit", spec, credential=cred, check=False)
    assert rc != 0 and f"after[0]: no job {done}" in err, (rc, out, err)
    c.cli("user", "remove", cred.stem)


def test_queue_lists_pending_jobs_in_the_order_they_are_placed(cluster2):
    c = cluster2
    huge = "resources: {cpus: 100000}\n"  # fits nowhere: they stay pending
    tag = secrets.token_hex(3)
    # the admin has used the cluster: a user who has not comes first among equals
    c.wait_job(c.submit(f"name: used-{tag}\ncommand: \"sleep 0.2\"\n"), "completed")
    low = c.submit(f"name: low-{tag}\ncommand: \"true\"\n{huge}")
    high = c.submit(f"name: high-{tag}\ncommand: \"true\"\npriority: 10\n{huge}")
    low2 = c.submit(f"name: low2-{tag}\ncommand: \"true\"\n{huge}")
    try:
        q = c.cli_json("queue")
        mine = [e for e in q if e["id"] in (low, high, low2)]
        assert [e["id"] for e in mine] == [high, low, low2], q
        assert mine[0]["priority"] == 10 and mine[0]["position"] < mine[1]["position"], q
        assert all("no ready node fits" in (e["reason"] or "") for e in mine), q
        assert mine[2]["waited"] >= 0 and mine[2]["owner"] == "admin", q
        # the score and its parts: a priority step outweighs the rest
        for e in mine:
            sc = e["score"]
            assert sc["priority"] == 1000 * e["priority"], e
            assert 0 < sc["fairshare"] <= 1000 and 0 <= sc["age"] <= 500, e
            assert sc["total"] == pytest.approx(sc["priority"] + sc["fairshare"] + sc["age"])
        _, out, _ = c.cli("queue")
        assert out.splitlines()[0].split() == ["POS", "ID", "NAME", "OWNER", "PRIORITY",
                                               "SCORE", "FAIRSHARE", "AGE", "WAITED", "START",
                                               "REASON"], out
        # a user sees their own entries only, with their places among everyone's:
        # theirs before the admin's of the same priority, as they used nothing
        cred = c.root / f"q-{tag}.credential"
        c.cli("user", "add", cred.stem, "--out", str(cred))
        spec = c.write_spec(f"name: theirs-{tag}\ncommand: \"true\"\n{huge}")
        _, out, _ = c.cli("submit", spec, "--json", credential=cred)
        theirs = json.loads(out)["id"]
        _, out, _ = c.cli("queue", "--json", credential=cred)
        seen = json.loads(out)
        assert [e["id"] for e in seen] == [theirs], seen
        pos = {e["id"]: e["position"] for e in c.cli_json("queue")}
        assert pos[high] < seen[0]["position"] == pos[theirs] < pos[low] < pos[low2], pos
        assert seen[0]["score"]["fairshare"] == 1000, seen
        c.cli("cancel", theirs, credential=cred)
        c.cli("user", "remove", cred.stem)
    finally:
        for jid in (low, high, low2):
            c.cli("cancel", jid)
