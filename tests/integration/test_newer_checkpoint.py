"""Nothing newer is lost (docs/checkpoints.md, "Nothing newer is lost"; PROTOCOL.md
`job.run`'s `checkpoint.resume_after`, `job.started`'s `resumed`).

A node that dies just after finishing a checkpoint, before its agent counted it,
loses nothing when the next node sees the same checkpoint dir: the resuming agent
takes the newest complete checkpoint the previous attempt wrote there (judged by
its marker, and by the marker's time against the previous attempt's start) and the
coordinator counts it as the job's.

Real daemons, real job processes, real signals: two agents on one machine share
the checkpoint dir (a plain tmp dir). The writer's node dies as in test_recovery:
its agent and its job's process group are SIGKILLed, here about 50 ms after the
test sees a new marker. The agent counts a marker within milliseconds of it being
closed, so to make sure the kill lands before that checkpoint was counted (else
the test could not fail), the writer's agent is frozen (SIGSTOP) from the moment
the new checkpoint's directory appears, before its marker: it stands for an agent
that had not got round to hashing and reporting it when the node died.
"""

import os
import re
import signal
import time
from pathlib import Path

from conftest import DEADLINE, wait_for
from test_recovery import (NT_S, PYTHON, brief, events_text, make_nodes, other, steps_of,
                           task_tag, wait_attempt_running, write_script)

# steps of STEP_TIME s; a checkpoint every EVERY steps (about 1.5 s), whose save
# takes SAVE_TIME s between its data and its marker (trainer_state.json, last)
TOTAL, EVERY, STEP_TIME, SAVE_TIME = 150, 15, 0.1, 0.5
MARKER = "trainer_state.json"
KILL_AFTER_MARKER = 0.05
LEFTOVER = 900  # an older run's step, above any this job writes

TRAINER = r'''
import json, os, sys, time
total_steps, every, step_time, save_time = (int(sys.argv[1]), int(sys.argv[2]),
                                            float(sys.argv[3]), float(sys.argv[4]))
d = os.environ["BRAMBLE_CHECKPOINT_DIR"]
attempt = os.environ["BRAMBLE_ATTEMPT"]
start = os.environ.get("BRAMBLE_RESUME_FROM", "")
start_step = os.environ.get("BRAMBLE_RESUME_STEP", "")
step = total = 0
if start:
    with open(os.path.join(start, "state.json")) as f:
        state = json.load(f)
    step, total = state["step"], state["total"]
    if str(step) != start_step:
        sys.exit("BRAMBLE_RESUME_STEP %s, but %s holds step %d" % (start_step, start, step))
    print("attempt %s resumed from step %d (%s)" % (attempt, step, start), flush=True)
else:
    print("attempt %s started fresh" % attempt, flush=True)
while step < total_steps:
    step += 1
    total += step * step
    time.sleep(step_time)
    if step % every == 0:
        c = os.path.join(d, "checkpoint-%d" % step)
        os.makedirs(c, exist_ok=True)
        with open(os.path.join(c, "state.json"), "w") as f:
            json.dump({"step": step, "total": total}, f)
        time.sleep(save_time)  # a save takes a while; the marker is written last
        with open(os.path.join(c, "trainer_state.json"), "w") as f:
            json.dump({"global_step": step}, f)
print("final step=%d total=%d" % (step, total), flush=True)
'''

EXPECTED_TOTAL = sum(k * k for k in range(1, TOTAL + 1))


def submit(c, tmp_path, ckpt):
    script = write_script(tmp_path, "trainer.py", TRAINER)
    return c.submit(f"name: newer-ckpt\n"
                    f"command: exec {PYTHON} -u {script} {TOTAL} {EVERY} {STEP_TIME} "
                    f"{SAVE_TIME}\n"
                    f"workdir: {tmp_path}\n"
                    f"checkpoint:\n  dir: {ckpt}\n  pattern: \"checkpoint-*\"\n"
                    f"  complete_file: {MARKER}\n"
                    f"restart:\n  max: 2\n  on: [node_lost]\n")


def on_disk(ckpt):
    """Steps of this job's checkpoint directories in ckpt (marker or not)."""
    steps = []
    for p in Path(ckpt).glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", p.name)
        if m and int(m.group(1)) < LEFTOVER:
            steps.append(int(m.group(1)))
    return sorted(steps)


def sigkill(agent_pid, job_pids):
    """SIGKILL the agent, and each job process with its process group (never the
    test's own)."""
    groups = set()
    for pid in job_pids:
        try:
            groups.add(os.getpgid(pid))
        except OSError:
            pass
    groups.discard(os.getpgrp())
    for kill, ids in ((os.kill, [agent_pid]), (os.killpg, sorted(groups)),
                      (os.kill, job_pids)):
        for i in ids:
            try:
                kill(i, signal.SIGKILL)
            except OSError:
                pass


def kill_writer(c, jid, victim, ckpt, with_marker):
    """Kill node victim as it writes its next checkpoint: its agent frozen when the
    checkpoint's directory appears, then the agent and the job's process group
    SIGKILLed KILL_AFTER_MARKER s after the marker appears (with_marker) or at once
    (a torn checkpoint). Returns that checkpoint's step."""
    agent = c.agents[victim]
    pids = list(c.task_procs(task_tag(victim, jid, 1)))
    assert pids, f"no process of job {jid} attempt 1 on {victim}"
    for _ in range(3):
        k = ((on_disk(ckpt) or [0])[-1] // EVERY + 1) * EVERY
        marker = ckpt / f"checkpoint-{k}" / MARKER
        wait_for(lambda: (ckpt / f"checkpoint-{k}").exists(), 2 * EVERY * STEP_TIME + 30,
                 f"checkpoint-{k} to be begun", interval=0.002)
        os.kill(agent.pid, signal.SIGSTOP)
        if not marker.exists():
            break
        os.kill(agent.pid, signal.SIGCONT)  # too late to stand for an unreported one
    else:
        raise AssertionError("never saw a checkpoint begun before its marker")
    agent.expected_exit = True
    if with_marker:
        wait_for(marker.exists, SAVE_TIME + 30, f"the marker of checkpoint-{k}",
                 interval=0.002)
        seen = time.monotonic()
        time.sleep(max(0.0, seen + KILL_AFTER_MARKER - time.monotonic()))
    sigkill(agent.pid, pids)
    c.kill_node(victim)  # the bookkeeping: everything of the node is gone
    assert marker.exists() == with_marker
    return k


def started_after_grace(c, jid):
    """The coordinator's start-up grace is over: node loss is acted on."""
    wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
             what="the coordinator's start-up grace to pass")


def test_kill_50ms_after_marker_resumes_from_that_checkpoint(make_cluster, tmp_path):
    c, names = make_nodes(make_cluster)
    ckpt = tmp_path / "ckpt"
    jid = submit(c, tmp_path, ckpt)
    j = c.wait_job(jid, "running")
    victim = j["nodes"][0]
    survivor = other(names, victim)
    wait_for(lambda: steps_of(c.job(jid), 1), 60, "attempt 1 to have a checkpoint counted")
    started_after_grace(c, jid)

    k = kill_writer(c, jid, victim, ckpt, with_marker=True)
    j = c.job(jid)
    counted = steps_of(j)
    assert counted and k not in counted and max(counted) == k - EVERY, (
        f"checkpoint-{k} was counted before the kill, or its predecessor was not: "
        f"{j['checkpoints']}")

    j = wait_attempt_running(c, jid, 2)
    assert (j["attempt"], j["nodes"]) == (2, [survivor]), brief(j)
    want = (f"attempt 2 resumes from {ckpt / f'checkpoint-{k}'} (step {k}), newer than "
            f"the newest counted (step {k - EVERY}): written by the previous attempt "
            f"after its last report")
    assert any(e["reason"] == want for e in j["events"]), f"{want}\n{events_text(j)}"

    # counted as the job's, with a manifest: a later attempt and replicas use it
    def counted_k():
        cks = [ck for ck in c.job(jid)["checkpoints"] if ck["step"] == k]
        return cks if cks and cks[0].get("manifest") else None
    (ck,) = wait_for(counted_k, what=f"checkpoint-{k} to be counted with its manifest")
    assert (ck["attempt"], ck["node"], ck["path"]) == (2, survivor,
                                                       str(ckpt / f"checkpoint-{k}")), ck

    j = ended_as_uninterrupted(c, jid, ckpt, k)
    assert max(steps_of(j)) > k, j["checkpoints"]


def ended_as_uninterrupted(c, jid, ckpt, step):
    """The job completed in attempt 2, which resumed from checkpoint-STEP and ended
    with the total an uninterrupted run computes; the job."""
    j = c.wait_job(jid, timeout=DEADLINE + TOTAL * STEP_TIME * 2)
    assert (j["state"], j["attempt"], j["exit_code"]) == ("completed", 2, 0), \
        f"{brief(j)}\n{events_text(j)}"
    log = c.wait_logs(jid, "final ")
    assert f"attempt 2 resumed from step {step} ({ckpt / f'checkpoint-{step}'})" in log, log
    assert f"final step={TOTAL} total={EXPECTED_TOTAL}" in log, log
    return j


def test_torn_newer_and_older_leftovers_are_never_used(make_cluster, tmp_path):
    """An older run's complete checkpoint-LEFTOVER (written before the job started) and
    the dead writer's torn last checkpoint are both passed over: attempt 2 takes
    the newest complete one attempt 1 wrote. None of attempt 1's was counted (the
    leftover's step is above them all), so that is one the coordinator never
    heard of."""
    c, names = make_nodes(make_cluster)
    ckpt = tmp_path / "ckpt"
    old = ckpt / f"checkpoint-{LEFTOVER}"
    old.mkdir(parents=True)
    (old / "state.json").write_text('{"step": %d, "total": 1}' % LEFTOVER)
    (old / MARKER).write_text("{}")
    hour_ago = time.time() - 3600
    for p in (old / "state.json", old / MARKER, old):
        os.utime(p, (hour_ago, hour_ago))

    jid = submit(c, tmp_path, ckpt)
    j = c.wait_job(jid, "running")
    victim = j["nodes"][0]
    survivor = other(names, victim)
    wait_for(lambda: (ckpt / f"checkpoint-{EVERY}" / MARKER).exists(), 60,
             f"attempt 1 to write checkpoint-{EVERY}")
    started_after_grace(c, jid)

    k = kill_writer(c, jid, victim, ckpt, with_marker=False)
    assert steps_of(c.job(jid)) == [], c.job(jid)["checkpoints"]

    j = wait_attempt_running(c, jid, 2)
    assert (j["attempt"], j["nodes"]) == (2, [survivor]), brief(j)
    took = k - EVERY
    want = (f"attempt 2 resumes from {ckpt / f'checkpoint-{took}'} (step {took}), newer "
            f"than the newest counted (none): written by the previous attempt after its "
            f"last report")
    assert any(e["reason"] == want for e in j["events"]), f"{want}\n{events_text(j)}"

    ended_as_uninterrupted(c, jid, ckpt, took)
