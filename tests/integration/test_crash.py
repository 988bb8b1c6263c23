"""The coordinator can be killed at any moment (kill -9) and restarted on the
same data dir: what it acknowledged is still there (ARCHITECTURE.md, "Failure
model")."""

import signal

from conftest import wait_for


def test_sigkill_coordinator_and_restart(cluster2):
    c = cluster2
    ids = []
    for name, cmd in (("kept-ok", "echo one"), ("kept-fail", "exit 2")):
        jid = c.submit(f"name: {name}\ncommand: {cmd}\n")
        c.wait_job(jid)
        ids.append(jid)
    # one acknowledged but never runnable: pending at the time of the kill
    pending = c.submit("name: kept-pending\ncommand: \"true\"\nresources:\n  cpus: 100000\n")
    ids.append(pending)
    before = {j["id"]: (j["name"], j["state"]) for j in c.jobs()}
    assert set(before) == set(ids)

    c.coordinator.kill(signal.SIGKILL)
    rc, _, err = c.cli("nodes", check=False, timeout_flag="1s")
    assert rc == 1, "the CLI got an answer with brambled dead"

    c.start_coordinator()  # same data dir, no flags: the recorded endpoint
    nodes = c.nodes()
    assert {"node-1", "node-2"} <= set(nodes), nodes
    after = {j["id"]: (j["name"], j["state"]) for j in c.jobs()}
    assert after == before, f"jobs before the kill {before}, after {after}"
    assert c.wait_logs(ids[0], "one")
    assert c.job(ids[1])["exit_code"] == 2

    # (that work goes on after the restart: test_job_submitted_right_after_restart_runs
    # and test_running_job_survives_coordinator_sigkill)


def test_job_submitted_right_after_restart_runs(cluster2):
    """A job submitted at once after a restart, before the agents' first message
    to the new coordinator, still runs when they come back."""
    c = cluster2
    c.coordinator.kill(signal.SIGKILL)
    # while it is down the CLI says so (and the agents' reconnect back-off grows)
    rc, out, err = c.cli("nodes", check=False, timeout_flag="2s")
    assert rc == 1 and "nothing answers at" in err and "brambled running" in err, (rc, out, err)
    c.start_coordinator()
    jid = c.submit("name: early-bird\ncommand: echo early\n")
    assert c.wait_job(jid)["state"] == "completed"
    c.wait_logs(jid, "early")


def test_running_job_survives_coordinator_sigkill(cluster2):
    c = cluster2
    flag = c.root / "go"
    jid = c.submit("name: long-runner\n"
                   f"command: while [ ! -e {flag} ]; do sleep 0.1; done; echo finished\n")
    c.wait_job(jid, "running")
    c.coordinator.kill(signal.SIGKILL)
    c.start_coordinator()
    c.wait_ready("node-1", "node-2")
    # re-adopted: still running (not restarted or lost), then completes
    j = c.job(jid)
    assert j["state"] == "running" and j["attempt"] == 1, j
    flag.write_text("")
    j = c.wait_job(jid)
    assert j["state"] == "completed" and j["attempt"] == 1, j
    c.wait_logs(jid, "finished")


def test_sigkill_agent_node_lost_and_back(make_cluster):
    c = make_cluster(heartbeat="200ms", node_timeout="2s")
    c.add_agents(1)
    c.agents["node-1"].kill(signal.SIGKILL)
    wait_for(lambda: c.nodes()["node-1"]["state"] == "lost", what="node-1 to be lost")
    c.start_agent("node-1", join=False)
    c.wait_ready("node-1")
    jid = c.submit("name: back\ncommand: \"true\"\n")
    assert c.wait_job(jid)["state"] == "completed"
