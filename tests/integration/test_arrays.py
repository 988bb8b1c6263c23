"""Job arrays (docs/spec.md "array", docs/sharing.md "Arrays"): `array: 0-99%8`
makes one task per index in one submission, each a job of its own with
BRAMBLE_ARRAY_INDEX; at most N run at once with %N; `bramble jobs` folds an array
into one row; `cancel ID[i]` cancels one task and `cancel ID` the whole array; bad
ranges are refused with the field's line.

The tests share one two-node cluster; each uses job names of its own."""

import json
import os
import secrets
import time

import pytest

from conftest import wait_for

# BRAMBLE_TEST_ARRAY_ALL=1: the 1,000-task array runs to its end (its time printed
# with -s); by default the first hundred complete and the rest is cancelled, which
# keeps this file within about a minute.
RUN_ALL = os.environ.get("BRAMBLE_TEST_ARRAY_ALL") == "1"


@pytest.fixture
def cluster2(shared_cluster2):
    return shared_cluster2


def name(prefix):
    return f"{prefix}-{secrets.token_hex(3)}"


def submit_array(c, text):
    """Submit with --json: (the answer, seconds the CLI took)."""
    spec = c.write_spec(text)
    t0 = time.monotonic()
    _, out, _ = c.cli("submit", spec, "--json")
    took = time.monotonic() - t0
    return json.loads(out), took


def tasks_of(c, array_id):
    """The array's tasks (jobs --json rows), by index."""
    return {j["array_index"]: j for j in c.jobs() if j.get("array_id") == array_id}


def test_thousand_tasks_in_one_submission(cluster2):
    c = cluster2
    n = name("many")

    def submits():
        return [e for e in c.cli_json("audit", "--limit", 100000)
                if e["action"] == "job.submit"]

    before = len(submits())
    answer, took = submit_array(c, f"name: {n}\ncommand: \"true\"\n"
                                   "resources: {cpus: 0}\narray: 0-999%32\n")
    aid = answer["id"]
    # one request made them all: the one answer names the whole array
    assert answer["array"] == {"range": "0-999", "count": 1000, "max": 32, "first": aid,
                               "last": aid + 999}, answer
    # and the coordinator heard one job.submit (its audit records each request)
    after = submits()
    assert len(after) == before + 1, after[before:]
    assert after[-1]["result"] == "done", after[-1]
    t0 = time.monotonic()
    odd = []

    def progress(enough):
        """The tasks once `enough` of them completed; odd notes a task missing, one
        that failed, or more than %32 at once."""
        tasks = tasks_of(c, aid)
        states = [t["state"] for t in tasks.values()]
        live = sum(s in ("starting", "running") for s in states)
        if len(tasks) != 1000 or live > 32 or not set(states) <= {
                "pending", "starting", "running", "completed", "cancelled"}:
            odd.append((len(tasks), live, set(states)))
        return tasks if states.count("completed") >= enough else None

    if RUN_ALL:  # every task to its end: minutes on a loaded 2-core sanitizer build
        wait_for(lambda: c.job(aid + 999)["state"] == "completed", timeout=600,
                 what="the last task to complete", interval=0.5)
        tasks = wait_for(lambda: progress(1000), timeout=60,
                         what="1000 array tasks to complete", interval=0.5)
        print(f"\n1000-task array: submit took {took:.3f}s (CLI, one request); "
              f"all completed {time.monotonic() - t0:.1f}s later")
    else:  # the first hundred to their end, then the rest cancelled in one request
        tasks = wait_for(lambda: progress(100), timeout=120,
                         what="100 array tasks to complete", interval=0.5)
        _, out, _ = c.cli("cancel", aid)
        tasks = tasks_of(c, aid)
        done = sum(t["state"] == "completed" for t in tasks.values())
        assert out.strip() == f"array {aid}: {1000 - done} tasks cancelled", (out, done)
        assert {t["state"] for t in tasks.values()} <= {"completed", "cancelled"}
        print(f"\n1000-task array: submit took {took:.3f}s (CLI, one request); "
              f"{done} completed {time.monotonic() - t0:.1f}s later, the rest cancelled")
    assert not odd, odd[:3]
    assert sorted(tasks) == list(range(1000))
    assert sorted(t["id"] for t in tasks.values()) == list(range(aid, aid + 1000))
    assert tasks[7]["name"] == f"{n}[7]"
    # every task says where it came from, in that one submission
    events = c.job(aid + 500)["events"]
    assert events[0]["reason"] == f"task 500 of array {aid}[0-999] (1000 tasks), " \
                                  "submitted by admin", events


def test_limit_index_and_env(cluster2):
    c = cluster2
    n = name("lim")
    answer, _ = submit_array(
        c, f"name: {n}\nresources: {{cpus: 0}}\narray: \"0-11%3\"\n"
           "command: \"echo idx=$BRAMBLE_ARRAY_INDEX of=$BRAMBLE_ARRAY_ID "
           "n=$BRAMBLE_ARRAY_COUNT job=$BRAMBLE_JOB_ID; sleep 0.4\"\n")
    aid = answer["id"]
    seen = {"max": 0, "reason": None, "over": []}

    def done():
        tasks = tasks_of(c, aid)
        live = [t for t in tasks.values() if t["state"] in ("starting", "running")]
        seen["max"] = max(seen["max"], len(live))
        if len(live) > 3:
            seen["over"].append(sorted(t["array_index"] for t in live))
        for t in tasks.values():
            if t["state"] == "pending" and t.get("reason"):
                seen["reason"] = t["reason"]
        return tasks if all(t["state"] == "completed" for t in tasks.values()) else None

    tasks = wait_for(done, timeout=120, what="the %3 array to complete", interval=0.1)
    assert not seen["over"], seen  # never more than %3 at once
    assert seen["max"] >= 2, seen  # it did run several at once
    assert seen["reason"] in (None, f"waiting: array {aid} runs 3 at once (%3)"), seen
    lines = []
    for i, t in sorted(tasks.items()):
        out = c.logs(f"{aid}[{i}]").strip()
        assert out == f"idx={i} of={aid} n=12 job={t['id']}", (i, out)
        lines.append(out)
    assert len(set(lines)) == 12


def test_limit_reason(cluster2):
    """A task held back by %N says why."""
    c = cluster2
    gate = c.root / f"gate-{secrets.token_hex(4)}"
    answer, _ = submit_array(
        c, f"name: {name('why')}\nresources: {{cpus: 0}}\narray: 0-3%1\n"
           f"command: \"while [ ! -e {gate} ]; do sleep 0.05; done\"\n")
    aid = answer["id"]

    def held():
        t = tasks_of(c, aid)
        return t if t[0]["state"] == "running" and t[3].get("reason") else None

    tasks = wait_for(held, what="task 0 running and task 3 held back")
    assert tasks[3]["state"] == "pending"
    assert tasks[3]["reason"] == f"waiting: array {aid} runs 1 at once (%1)", tasks[3]
    gate.touch()
    wait_for(lambda: all(t["state"] == "completed" for t in tasks_of(c, aid).values()),
             what="the %1 array to complete")


def test_folded_listing_and_cancel(cluster2):
    c = cluster2
    n = name("fold")
    gate = c.root / f"gate-{secrets.token_hex(4)}"
    answer, _ = submit_array(
        c, f"name: {n}\nresources: {{cpus: 0}}\narray: 0-9\n"
           f"command: \"while [ ! -e {gate} ]; do sleep 0.05; done\"\n")
    aid = answer["id"]
    wait_for(lambda: all(t["state"] == "running" for t in tasks_of(c, aid).values()),
             what="the array's 10 tasks to run")
    _, table, _ = c.cli("jobs")
    rows = [line for line in table.splitlines() if n in line]
    assert len(rows) == 1, table  # folded: one row for ten tasks
    assert rows[0].split()[:3] == [f"{aid}[0-9]", n, "running"], rows
    assert "running 10" in rows[0], rows
    # its tasks hold the name while they are active: another array or job of that
    # name is refused
    rc, _, err = c.cli("submit", c.write_spec(f"name: {n}\ncommand: \"true\"\n"),
                       check=False)
    assert rc == 1 and f"a job named '{n}' is already active" in err, err

    _, out, _ = c.cli("cancel", f"{aid}[3]")
    assert out.strip() == f"job {aid}[3]: cancelled", out
    one = c.cli_json("job", "show", f"{aid}[3]")
    assert (one["id"], one["array_id"], one["array_index"], one["state"]) == \
        (aid + 3, aid, 3, "cancelled"), one
    assert c.cli_json("job", "show", f"{aid}[4]")["state"] == "running"
    _, table, _ = c.cli("jobs")
    row = next(line for line in table.splitlines() if n in line)
    assert "running 9, cancelled 1" in row, row

    _, out, _ = c.cli("cancel", aid)
    assert out.strip() == f"array {aid}: 9 tasks cancelled", out
    tasks = tasks_of(c, aid)
    assert {t["state"] for t in tasks.values()} == {"cancelled"}, tasks
    wait_for(lambda: not c.job_procs(aid + 4), what="the cancelled tasks' processes to end")
    # nothing left to cancel: refused, saying so
    rc, out, err = c.cli("cancel", aid, check=False)
    assert rc == 1, (rc, out, err)
    assert f"array {aid} has no task pending, starting or running; nothing to cancel" in err, err


def test_bad_ranges_refused(cluster2):
    c = cluster2
    cases = [
        ("array: 0-20000\n", "line 3: array: 20001 tasks, more than 10000"),
        ("array: -2-5\n", "line 3: array: indices are not negative"),
        ("array: 9-3\n", "line 3: array: 9-3: the start is above the end"),
        ("array: lots\n", "line 3: array: expected a range like 0-99"),
        ("array: 0-9%0\n", "line 3: array: %0"),
        ("array: [1, 2]\n", "line 3: array: expected a range like 0-99%8, got a list"),
    ]
    before = len(c.jobs())
    for text, want in cases:
        spec = c.write_spec(f"name: {name('bad')}\ncommand: \"true\"\n{text}")
        rc, out, err = c.cli("submit", spec, check=False)
        assert rc == 1, (text, rc, out, err)
        assert want in err, (text, err)
    # the coordinator checks too: sent raw, past the CLI's own check
    raw = c.raw_client()
    try:
        for text, want in cases[:3]:
            _, body, _ = raw.request("job.submit", {
                "spec": f"name: {name('raw')}\ncommand: \"true\"\n{text}", "sets": []})
            assert want in body.get("error", ""), (text, body)
        _, body, _ = raw.request("job.submit", {
            "spec": f"name: {name('raw')}\ncommand: \"true\"\n", "sets": ["array=0-9%0"]})
        assert "--set: array: %0" in body.get("error", ""), body
        _, body, _ = raw.request("job.show", {"id": 1, "index": -3})
        assert "not negative" in body.get("error", ""), body
    finally:
        raw.close()
    assert len(c.jobs()) == before  # nothing stored
    # a service has replicas, not arrays
    spec = c.write_spec(f"name: {name('svc')}\nkind: service\ncommand: \"true\"\n"
                        "array: 0-3\n")
    rc, _, err = c.cli("submit", spec, check=False)
    assert rc == 1 and "line 4: array: only for kind: train" in err, err
    # a task that is not there, and a malformed reference
    rc, _, err = c.cli("job", "show", "999999[2]", check=False)
    assert rc == 1 and "no job 999999" in err, err
    rc, _, err = c.cli("cancel", "12[x]", check=False)
    assert rc == 2 and "array index" in err, err


def test_after_an_array_is_refused(cluster2):
    c = cluster2
    answer, _ = submit_array(c, f"name: {name('dep')}\ncommand: \"true\"\n"
                                "resources: {cpus: 0}\narray: 0-1\n")
    aid = answer["id"]
    spec = c.write_spec(f"name: {name('then')}\ncommand: \"true\"\n"
                        f"after: [{{job: {aid}}}]\n")
    rc, _, err = c.cli("submit", spec, check=False)
    assert rc == 1 and f"after[0]: job {aid} is a job array" in err, err
    # a task by its own id may be waited on
    jid = c.submit(f"name: {name('then')}\ncommand: \"true\"\n"
                   f"after: [{{job: {aid + 1}}}]\n")
    assert c.wait_job(jid)["state"] == "completed"
