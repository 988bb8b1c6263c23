"""`bramble top`, the live terminal view (issue 6, "Live view"): run under tmux, the
pane shows the nodes and a running job, then a node killed during the run as lost
and the job on its next attempt; `q` quits. Without a terminal it refuses (exit 2).
"""

import re
import shlex
import shutil
import uuid

import pytest

from conftest import DEADLINE, Tmux, wait_for

HB, NT = "200ms", "1s"


def node_names(n):
    tag = uuid.uuid4().hex[:6]
    return [f"t{tag}-{chr(ord('a') + i)}" for i in range(n)]


tmux = Tmux("brtop")  # a tmux server of our own


def pane(session):
    return tmux.pane(session)


def node_row(text, name):
    """The NODES row of node `name` (its line in the pane), or None."""
    for line in text.splitlines():
        if re.search(rf"\s{re.escape(name)}\s", line) and re.search(
                r"\b(ready|draining|lost)\b", line):
            return line
    return None


def job_row(text, jid):
    for line in text.splitlines():
        if re.match(rf"^\s+{jid}\s", line):
            return line.split()
    return None


def wait_pane(session, pred, what):
    return tmux.wait_pane(session, pred, what)


def test_top_refuses_without_terminal(cluster):
    rc, out, err = cluster.cli("top", check=False)
    assert rc == 2, (rc, out, err)
    assert "needs a terminal" in err and "events -f" in err, err


def test_top_shows_nodes_jobs_and_node_loss(make_cluster, tmp_path):
    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed: cannot drive `bramble top` in a terminal")
    c = make_cluster(heartbeat=HB, node_timeout=NT)
    names = c.add_agents(2, names=node_names(2))
    jid = c.submit("name: top-sleeper\ncommand: sleep 1000\n")
    job = wait_for(lambda: (j := c.job(jid))["state"] == "running" and j,
                   what=f"job {jid} to run")
    victim = job["nodes"][0]

    session = f"brtop-{uuid.uuid4().hex[:8]}"
    log = c.log_path("bramble-top")
    c.extra_logs.append(log)  # teardown scans it for sanitizer reports
    env = {"TERM": "xterm-256color", "BRAMBLE_TEST_CLUSTER": c.marker,
           "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1"}
    cmd = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()),
                    shlex.quote(c.bin("bramble")), "--credential",
                    shlex.quote(str(c.credential)), "top", "--interval", "200ms",
                    "2>", shlex.quote(str(log))])
    tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "30", "env " + cmd)
    try:
        tmux("set-option", "-t", session, "remain-on-exit", "on", check=False)
        text = wait_pane(session, lambda t: all(
            (r := node_row(t, n)) and "ready" in r for n in names) and (
            (j := job_row(t, jid)) and "running" in j) and t,
            "the pane to show both nodes ready and the job running")
        assert "top-sleeper" in text and "coordinator not answering" not in text, text

        c.kill_node(victim)
        wait_pane(session, lambda t: (r := node_row(t, victim)) and "lost" in r and
                  r.lstrip().startswith("!") and (j := job_row(t, jid)) and
                  j[3] == "2" and j[2] in ("pending", "starting", "running") and
                  re.search(rf"{re.escape(victim)}\s+lost\s+node .* lost", t),
                  f"the pane to show {victim} lost (and its event) and job {jid} at "
                  "attempt 2")

        tmux("send-keys", "-t", session, "q")

        def quit_():
            r = tmux("list-panes", "-t", session, "-F", "#{pane_dead}", check=False)
            return r.returncode != 0 or r.stdout.strip() == "1"

        wait_for(quit_, DEADLINE, "bramble top to exit after q")
        r = tmux("list-panes", "-t", session, "-F", "#{pane_dead_status}", check=False)
        if r.returncode == 0 and r.stdout.strip():
            assert r.stdout.strip() == "0", f"bramble top exited {r.stdout.strip()}"
    finally:
        tmux("kill-session", "-t", session, check=False)
        tmux.kill()
