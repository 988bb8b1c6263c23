"""`bramble cancel` stops a job's whole process tree, including children that
left its process group.

The tests share one `cluster2` (their jobs have names of their own)."""

import secrets

import pytest

from conftest import procs_with_env, wait_for


@pytest.fixture
def cluster2(shared_cluster2):
    """conftest's cluster2, one for the whole module (conftest's shared_cluster2)."""
    return shared_cluster2


def test_cancel_kills_forked_children(cluster2):
    c = cluster2
    name = "tree-" + secrets.token_hex(4)
    jid = c.submit(f"name: {name}\ncommand: sleep 1000 & setsid sleep 1000 & wait\n")
    c.wait_job(jid, "running")
    marks = (f"BRAMBLE_JOB_ID={jid}", f"BRAMBLE_JOB_NAME={name}",
             f"BRAMBLE_TEST_CLUSTER={c.marker}")

    def sleeps():
        out = []
        for pid in procs_with_env(*marks):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[0].endswith(b"sleep"):
                        out.append(pid)
            except OSError:
                pass
        return out

    wait_for(lambda: len(sleeps()) >= 2, what="both sleeps of the job to run")
    assert procs_with_env(*marks)

    rc, out, err = c.cli("cancel", jid)
    assert rc == 0, (out, err)
    wait_for(lambda: not procs_with_env(*marks),
             what=f"no process left with BRAMBLE_JOB_ID={jid}")
    j = c.wait_job(jid)
    assert j["state"] == "cancelled", j
    c.assert_alive()


def test_cancel_pending_job(cluster2):
    c = cluster2
    jid = c.submit("name: never\ncommand: \"true\"\nresources:\n  cpus: 100000\n")
    c.cli("cancel", jid)
    assert c.wait_job(jid)["state"] == "cancelled"
    rc, out, err = c.cli("cancel", 99999, check=False)
    assert rc == 1 and err.strip(), (rc, out, err)


def test_cancel_ended_job_of_each_state(cluster2):
    """Cancelling a job that has ended says so and leaves the coordinator up."""
    c = cluster2
    done = c.submit("name: ends-ok\ncommand: \"true\"\n")
    bad = c.submit("name: ends-bad\ncommand: exit 3\nrestart: {max: 0}\n")
    gone = c.submit("name: ends-cancel\ncommand: sleep 1000\n")
    c.wait_job(gone, "running")
    c.cli("cancel", gone)
    want = {done: "completed", bad: "failed", gone: "cancelled"}
    for jid, state in want.items():
        assert c.wait_job(jid)["state"] == state
    for jid, state in want.items():
        for _ in range(2):  # twice: the first refusal must not have hurt anything
            rc, out, err = c.cli("cancel", jid, check=False)
            assert rc == 1, (rc, out, err)
            assert "has already ended" in err and state in err, err
        c.assert_alive()
    assert c.cli_json("job", "show", done)["state"] == "completed"
