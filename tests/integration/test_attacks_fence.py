"""Fencing that a job or a failing agent cannot defeat (ARCHITECTURE.md "Failure
model": no double run; PROTOCOL.md fencing; docs/checkpoints.md).

Real daemons, real job processes, real signals:
  * a job that prints as fast as it can while the coordinator is stopped is still
    frozen within the fence time (no send of the agent may block its fence);
  * the agent alone SIGKILLed (as an OOM kill would) under a running job, and not
    restarted: attempt 1 is frozen and then killed by its keeper; nothing of it runs
    once attempt 2 has started;
  * the agent SIGKILLed and restarted at once on its data dir: it adopts attempt 1
    (same pid, output still reaches `bramble logs`, exit reported, no attempt 2);
  * the agent paused with SIGSTOP past the node timeout: its job is frozen within
    the fence time and never runs beside attempt 2;
  * a second agent on the same data dir is refused, naming the lock and its holder.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DEADLINE, proc_state, wait_for

# the fast timing and the helpers of the recovery tests: fencing is the same story
from test_recovery import (FENCE_S, GONE, HB, NT, NT_S, PYTHON, STOPPED, RunMonitor,
                           dying, events_text, make_nodes, node_names,
                           wait_attempt_running)


# ---------------------------------------------------------------------------
# helpers


def running(pid):
    st = proc_state(pid)
    return st not in STOPPED and st not in GONE and not dying(pid)


def all_stopped(pids):
    return bool(pids) and all(proc_state(p) in STOPPED or dying(p) for p in pids)


# A job of two processes (the leader and a child it forks) that both append
# "<attempt> <pid> <time>" to the file named by its first argument every 20 ms and
# print "count N" every 100 ms; it ends with exit 0 after its second argument's
# number of seconds (0: never).
APPENDER = r'''
import os, sys, time
attempt = os.environ.get("BRAMBLE_ATTEMPT", "?")
path, seconds = sys.argv[1], float(sys.argv[2])


def say(text):
    try:
        os.write(1, (text + "\n").encode())
    except OSError:
        pass


say("start attempt %s pid %d" % (attempt, os.getpid()))
child = os.fork()
t0, i = time.monotonic(), 0
while not seconds or time.monotonic() - t0 < seconds:
    with open(path, "a") as f:
        f.write("%s %d %.3f\n" % (attempt, os.getpid(), time.time()))
    if child and i % 5 == 0:
        say("count %d" % (i // 5))
    i += 1
    time.sleep(0.02)
if child:
    os.waitpid(child, 0)
    say("done attempt %s" % attempt)
'''


def appender_spec(name, script, out, seconds=0, restart="max: 2\n  on: [node_lost]"):
    return (f"name: {name}\n"
            f"command: exec {PYTHON} -u {script} {out} {seconds}\n"
            f"workdir: {Path(script).parent}\n"
            f"restart:\n  {restart}\n")


def appended(out):
    """[(attempt, pid, time)] of the lines in the job's file."""
    rows = []
    try:
        text = Path(out).read_text()
    except OSError:
        return rows
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            try:
                rows.append((int(parts[0]), int(parts[1]), float(parts[2])))
            except ValueError:
                pass
    return rows


def started_job(c, tmp_path, name, seconds=0):
    """Submit the appender; (job id, node, attempt-1 pids, output file)."""
    script = tmp_path / "appender.py"
    script.write_text(APPENDER)
    out = tmp_path / f"{name}.txt"
    jid = c.submit(appender_spec(name, script, out, seconds))
    j = c.wait_job(jid, "running")
    node = j["nodes"][0]
    tag = f"{node}/{jid}.1.0"
    pids = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(sorted(c.task_procs(tag))),
                    what="the job's two processes")
    c.wait_logs(jid, "count 2")
    return jid, node, pids, out


def assert_no_overlap(out, t2_first=None):
    """No line of attempt 1 was appended after attempt 2's first line."""
    rows = appended(out)
    second = [t for a, _, t in rows if a >= 2]
    assert second, "attempt 2 never appended"
    first2 = min(second)
    late = [(a, p, t) for a, p, t in rows if a == 1 and t > first2]
    assert not late, (f"attempt 1 appended {len(late)} line(s) after attempt 2 began "
                      f"at {first2:.3f}: {late[:3]} ... {late[-1:]}")
    return first2


# ---------------------------------------------------------------------------
# A: a job that prints as fast as it can does not defeat fencing


FLOOD = ("yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa & "
         "yes bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb >&2 & wait")


def test_print_flood_still_fenced_and_drops_counted(make_cluster, tmp_path):
    c, names = make_nodes(make_cluster, n=1)
    jid = c.submit(f"name: flood\ncommand: {FLOOD}\nrestart:\n  max: 1\n  on: [node_lost]\n")
    j = c.wait_job(jid, "running")
    node = j["nodes"][0]
    tag = f"{node}/{jid}.1.0"
    pids = wait_for(lambda: (lambda p: p if len(p) == 3 else None)(sorted(c.task_procs(tag))),
                    what="the flood's three processes (sh and two yes)")
    # the output flows (and fills every queue) before the coordinator stops; never
    # `bramble logs` here: the log is endless
    wait_for(lambda: sum(written(p) for p in pids) > 64 << 20,
             what="the flood to have written 64 MiB")
    t0 = time.monotonic()
    os.kill(c.coordinator.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: all_stopped(sorted(c.task_procs(tag))), FENCE_S + 15,
                 "every process of the flood to be stopped (fenced)", interval=0.02)
        frozen_after = time.monotonic() - t0
        procs = sorted(c.task_procs(tag))
        states = {p: proc_state(p) for p in procs}
    finally:
        os.kill(c.coordinator.pid, signal.SIGCONT)
    print(f"flood: every process stopped {frozen_after:.2f}s after the coordinator "
          f"stopped (fence {FENCE_S:.1f}s)")
    assert set(pids) <= set(procs), (pids, procs)
    assert frozen_after <= FENCE_S + 1.0, (
        f"the flood was stopped {frozen_after:.2f}s after the coordinator went silent; "
        f"fence_timeout + 1s = {FENCE_S + 1:.1f}s; states {states}")

    # the agent reports what it had to drop, in its heartbeat's tasks and its log
    agent = c.agents[node]
    m = wait_for(lambda: re.search(r"job %d attempt 1: (\d+) bytes of output dropped" % jid,
                                   agent.output()),
                 what="the agent to say how much output it dropped")
    assert int(m.group(1)) > 0
    # and the coordinator keeps and shows it (`job show`), once a report got through
    if "log_dropped" in c.job(jid):
        wait_for(lambda: c.job(jid)["log_dropped"] > 0,
                 what="`job show` to report the dropped output")
    c.cli("cancel", jid)
    c.wait_job(jid)


def written(pid):
    """Bytes pid has written (wchar of /proc/PID/io), 0 when gone."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


# ---------------------------------------------------------------------------
# B: attempts that survive their agent, and never run twice


def test_agent_killed_alone_attempt_frozen_then_killed(make_cluster, tmp_path):
    c, names = make_nodes(make_cluster)
    wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
             what="the coordinator's start-up grace to pass")
    jid, node, pids, out = started_job(c, tmp_path, "orphaned")
    mon = RunMonitor(c, jid)
    mon.start()
    try:
        t0 = time.monotonic()
        c.agents[node].kill(signal.SIGKILL)  # the agent alone, as an OOM kill would
        wait_for(lambda: all(not running(p) for p in pids), FENCE_S + 15,
                 "attempt 1's processes to be stopped without their agent", interval=0.02)
        frozen_after = time.monotonic() - t0
        print(f"agent killed: attempt 1 stopped after {frozen_after:.2f}s "
              f"(fence {FENCE_S:.1f}s)")
        assert frozen_after <= FENCE_S + 1.0, frozen_after
        j = wait_attempt_running(c, jid, 2)
        assert j["nodes"][0] != node, j["nodes"]
        # superseded: the keeper kills it once the coordinator has declared the node
        # lost (frozen for longer than the node timeout)
        wait_for(lambda: all(proc_state(p) in GONE for p in pids), DEADLINE,
                 "attempt 1's processes to be killed")
        wait_for(lambda: any(a == 2 for a, _, _ in appended(out)),
                 what="attempt 2 to append")
    finally:
        mon.stop()
    assert mon.samples > 10
    assert not mon.violations, f"two attempts ran at once: {mon.violations[:3]}"
    assert_no_overlap(out)
    assert not c.task_procs(f"{node}/{jid}.1."), c.task_procs(f"{node}/{jid}.1.")


@pytest.mark.parametrize("how", ["SIGKILL", "SIGUSR2"])
def test_agent_killed_and_restarted_adopts_its_attempt(make_cluster, tmp_path, how):
    """SIGKILL: the agent crashed (an OOM kill) and is restarted at once, as systemd's
    Restart= does. SIGUSR2: the agent stops on purpose for an upgrade, leaving its
    jobs to the next one (the unit's RestartKillSignal). Either way the new agent
    adopts attempt 1: same processes, output still shipped, exit reported, no
    attempt 2."""
    c, names = make_nodes(make_cluster)
    wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
             what="the coordinator's start-up grace to pass")
    jid, node, pids, out = started_job(c, tmp_path, "adopted", seconds=8)
    agent = c.agents[node]
    rc = agent.kill(getattr(signal, how))
    if how == "SIGUSR2":
        assert rc == 0, agent.output()
        assert "go on for the next agent to adopt" in agent.output(), agent.output()
    assert all(running(p) or proc_state(p) in STOPPED for p in pids), \
        "the job died with its agent"
    c.start_agent(node, join=False)  # as systemd's Restart= would, at once
    c.wait_ready(node)
    before = len(re.findall(r"^count \d+$", c.logs(jid), re.M))
    # the same processes go on, and their output still reaches the coordinator
    c.wait_logs(jid, "count %d" % (before + 5))
    assert sorted(c.task_procs(f"{node}/{jid}.1.")) == pids, c.task_procs()
    j = c.wait_job(jid, timeout=DEADLINE)
    assert (j["state"], j["attempt"]) == ("completed", 1), (j["state"], j["attempt"],
                                                           events_text(j))
    assert "done attempt 1" in c.logs(jid)
    assert {a for a, _, _ in appended(out)} == {1}
    assert not [e for e in j["events"] if e["state"] == "pending"][1:], events_text(j)


WAIT_FOR_FILE = r'''
import os, sys, time
print("waiting for", sys.argv[1], flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
sys.exit(3)
'''


def test_job_that_ends_while_its_agent_is_down_is_reported_by_the_next(make_cluster,
                                                                       tmp_path):
    """The job ends (exit code 3) after its agent was SIGKILLed and before the next
    one starts: its waiter kept the exit status, and the next agent reports it. The
    attempt is not counted lost and not run again."""
    c, names = make_nodes(make_cluster, node_timeout="10s")  # fence 6 s: room to end
    script = tmp_path / "wait_for_file.py"
    script.write_text(WAIT_FOR_FILE)
    go = tmp_path / "go"
    jid = c.submit(f"name: ends-alone\ncommand: exec {PYTHON} -u {script} {go}\n"
                   f"restart:\n  max: 2\n  on: [node_lost]\n")
    j = c.wait_job(jid, "running")
    node = j["nodes"][0]
    c.wait_logs(jid, "waiting for")
    pids = c.task_procs(f"{node}/{jid}.1.0")
    assert pids, "the job's process"
    c.agents[node].kill(signal.SIGKILL)
    go.write_text("")
    wait_for(lambda: all(proc_state(p) in GONE for p in pids),
             what="the job to end while no agent runs")
    c.start_agent(node, join=False)
    j = c.wait_job(jid, timeout=DEADLINE)
    assert (j["state"], j["attempt"], j["exit_code"]) == ("failed", 1, 3), \
        (j["state"], j["attempt"], j.get("exit_code"), events_text(j))
    assert "node_lost" not in events_text(j), events_text(j)


def test_agent_paused_past_node_timeout_never_runs_twice(make_cluster, tmp_path):
    c, names = make_nodes(make_cluster)
    wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
             what="the coordinator's start-up grace to pass")
    jid, node, pids, out = started_job(c, tmp_path, "paused")
    agent = c.agents[node]
    mon = RunMonitor(c, jid)
    mon.start()
    try:
        t0 = time.monotonic()
        os.kill(agent.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: all_stopped(pids), FENCE_S + 15,
                     "attempt 1's processes to be stopped while their agent is paused",
                     interval=0.02)
            frozen_after = time.monotonic() - t0
            wait_attempt_running(c, jid, 2)
            wait_for(lambda: any(a == 2 for a, _, _ in appended(out)),
                     what="attempt 2 to append")
        finally:
            os.kill(agent.pid, signal.SIGCONT)
        print(f"agent paused: attempt 1 stopped after {frozen_after:.2f}s "
              f"(fence {FENCE_S:.1f}s)")
        assert frozen_after <= FENCE_S + 1.0, frozen_after
        wait_for(lambda: all(proc_state(p) in GONE for p in pids), DEADLINE,
                 "attempt 1's processes to be killed once the agent is back")
    finally:
        mon.stop()
    assert mon.samples > 10
    assert not mon.violations, f"two attempts ran at once: {mon.violations[:3]}"
    assert_no_overlap(out)
    c.wait_ready(node)


# ---------------------------------------------------------------------------
# C: one agent per data dir


def test_second_agent_on_same_data_dir_refused(make_cluster):
    c = make_cluster(heartbeat=HB, node_timeout=NT)
    (name,) = c.add_agents(1, names=node_names(1))
    first = c.agents[name]
    r = subprocess.run([c.bin("bramble-agent"), "--data-dir", str(c.agent_dir(name))],
                       capture_output=True, text=True, env=c.env, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "agent.lock" in r.stderr, r.stderr
    assert str(c.agent_dir(name)) in r.stderr, r.stderr
    assert f"pid {first.pid}" in r.stderr, r.stderr
    assert first.alive()
    c.wait_ready(name)
    # the lock is the process's, not its jobs': it goes with the agent
    first.kill(signal.SIGTERM)
    c.start_agent(name, join=False)
    c.wait_ready(name)
