"""Hang detection (issue "See the cluster and catch what is stuck"; docs/spec.md
"progress"): a job with `progress: {timeout: T}` that for T writes no output,
reports no checkpoint and runs no `bramble progress` is killed (its whole process
tree, on every node of a gang) with an event that says why, and restarted from its
newest checkpoint under `restart.on: [hung]`, on by default with `progress`. A job
that is slow but shows life is left alone.

Real daemons and real job processes. Every wait is on a condition with a deadline;
the bounds on timing leave room for a loaded 2-core machine running ASan builds.
"""

import os
import subprocess
import sys
import uuid

from conftest import BIN, DEADLINE, pid_alive, proc_state, wait_for
from test_metrics import get, http_cluster, metrics_token, samples

PYTHON = sys.executable
TIMEOUT_S = 3.0  # progress.timeout of the jobs here
HB = "200ms"
# "within progress.timeout plus a heartbeat": the default heartbeat (1 s) as the
# room for the agent's checks (every 50 ms), the kill and the report
SLACK_S = 1.0


def names(n):
    tag = uuid.uuid4().hex[:6]
    return [f"h{tag}-{chr(ord('a') + i)}" for i in range(n)]


def events_text(job):
    return "\n".join(f"  {e.get('time')} {e.get('state')} [{e.get('node')}] {e.get('reason')}"
                     for e in job.get("events") or [])


def gone(pid):
    return not pid_alive(pid) or proc_state(pid) in (None, "Z", "X")


# Attempt 1 counts steps 1..5, a checkpoint each, then hangs without a word (a
# child in its own session hangs with it: the whole tree must go). A later attempt
# resumes from BRAMBLE_RESUME_STEP, counts on to 8 and prints the result.
HANG_JOB = r'''
import os, subprocess, sys, time
d = os.environ["BRAMBLE_CHECKPOINT_DIR"]
attempt = os.environ["BRAMBLE_ATTEMPT"]
out = sys.argv[1]
start = int(os.environ.get("BRAMBLE_RESUME_STEP") or 0)
print("attempt %s resumes from [%s] step %d" % (
    attempt, os.environ.get("BRAMBLE_RESUME_FROM", ""), start), flush=True)


def checkpoint(step):
    p = os.path.join(d, "checkpoint-%d" % step)
    os.makedirs(p, exist_ok=True)
    with open(os.path.join(p, "state.txt"), "w") as f:
        f.write("%d\n" % step)
    with open(os.path.join(p, "done"), "w") as f:
        f.write("")


last = 5 if attempt == "1" else 8
for step in range(start + 1, last + 1):
    checkpoint(step)
    print("step %d" % step, flush=True)
    time.sleep(0.2)
if attempt == "1":
    child = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    with open(os.path.join(out, "child.pid"), "w") as f:
        f.write("%d\n" % child.pid)
    with open(os.path.join(out, "hang.time"), "w") as f:
        f.write("%.3f\n" % time.time())
    print("hanging at step %d" % last, flush=True)
    time.sleep(3600)
print("result %d" % last, flush=True)
'''


def test_hung_job_is_ended_and_resumes_from_its_checkpoint(make_cluster, tmp_path):
    c, port = http_cluster(make_cluster, heartbeat=HB)
    c.add_agents(1, names=names(1))
    token = metrics_token(c)
    script = tmp_path / "hang_job.py"
    script.write_text(HANG_JOB)
    ckpt = tmp_path / "ckpt"
    out = tmp_path / "out"
    out.mkdir()
    jid = c.submit(f"name: hangs\ncommand: exec {PYTHON} -u {script} {out}\n"
                   f"workdir: {tmp_path}\n"
                   f"checkpoint: {{dir: {ckpt}, pattern: 'checkpoint-*', complete_file: done}}\n"
                   f"progress: {{timeout: {TIMEOUT_S:g}s}}\n")
    spec = c.job(jid)["spec"]
    assert spec["progress"] == {"timeout": int(TIMEOUT_S * 1000)}, spec
    assert "hung" in spec["restart"]["on"], spec  # on by default with progress

    c.wait_logs(jid, "hanging at step 5")
    hang_at = float((out / "hang.time").read_text())
    child = int((out / "child.pid").read_text())
    assert pid_alive(child)

    j = c.wait_job(jid, "completed", timeout=DEADLINE + 2 * TIMEOUT_S)
    ev = [e for e in j["events"] if "hung: no output, checkpoint or progress for 3s"
          in (e["reason"] or "")]
    assert ev, events_text(j)
    took = ev[0]["time"] - hang_at
    print(f"quiet from {hang_at:.3f}; ended as hung {took:.2f}s later "
          f"(timeout {TIMEOUT_S}s)")
    assert TIMEOUT_S - 0.05 <= took <= TIMEOUT_S + SLACK_S, (took, events_text(j))
    assert "restarting as attempt 2 (hung)" in ev[0]["reason"], events_text(j)
    assert j["attempt"] == 2, events_text(j)
    assert wait_for(lambda: gone(child), what="the hung attempt's child to be killed")

    logs = c.logs(jid)
    assert f"attempt 2 resumes from [{ckpt}/checkpoint-5] step 5" in logs, logs
    assert "step 6\nstep 7\nstep 8\nresult 8" in logs, logs
    assert "result 5" not in logs, logs
    assert any("resumes from" in (e["reason"] or "") and "checkpoint-5" in e["reason"]
               for e in j["events"]), events_text(j)

    status, _, page = get(port, token=token)
    assert status == 200, page
    assert samples(page).get("bramble_attempts_hung_total") == 1, page


SLOW_JOB = r'''
import sys, time
for i in range(int(sys.argv[1])):
    print("slow %d" % i, flush=True)
    time.sleep(float(sys.argv[2]))
print("slow done", flush=True)
'''


def run_left_alone(make_cluster, tmp_path, name, source, args):
    """Run source (args after it) as a job with progress.timeout on a 1-node cluster;
    it must complete in its first attempt, never ended as hung. (c, job id)."""
    c = make_cluster(heartbeat=HB)
    c.add_agents(1, names=names(1))
    script = tmp_path / f"{name}_job.py"
    script.write_text(source)
    jid = c.submit(f"name: {name}\ncommand: exec {PYTHON} -u {script} {args}\n"
                   f"progress: {{timeout: {TIMEOUT_S:g}s}}\n")
    j = c.wait_job(jid, timeout=DEADLINE + 12)
    assert j["state"] == "completed" and j["attempt"] == 1, (events_text(j),
                                                             c.logs(jid, stream="both"))
    assert not any("hung" in (e["reason"] or "") for e in j["events"]), events_text(j)
    return c, jid


def test_slow_but_printing_job_is_left_alone(make_cluster, tmp_path):
    # a line every 0.75 s for ~3 timeouts: never quiet for a whole timeout
    c, jid = run_left_alone(make_cluster, tmp_path, "slow", SLOW_JOB, "12 0.75")
    assert "slow done" in c.logs(jid)


QUIET_JOB = r'''
import os, subprocess, sys, time
cli = sys.argv[1]
for step in range(int(sys.argv[2])):
    r = subprocess.run([cli, "progress", str(step)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    if r.returncode != 0:
        os.write(2, b"bramble progress failed: " + r.stderr)
        sys.exit(3)
    time.sleep(float(sys.argv[3]))
'''


def test_job_that_only_runs_bramble_progress_stays_alive(make_cluster, tmp_path):
    # no output at all for ~3 timeouts: only `bramble progress` every 0.75 s
    c, jid = run_left_alone(make_cluster, tmp_path, "quiet", QUIET_JOB,
                            f"{BIN / 'bramble'} 12 0.75")
    assert c.logs(jid, stream="both") == ""

    # outside a job it says why and fails
    env = {k: v for k, v in os.environ.items() if k != "BRAMBLE_AGENT_SOCK"}
    r = subprocess.run([BIN / "bramble", "progress", "3"], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 1 and "inside a bramble job" in r.stderr, r


# A gang of two whose ranks both go quiet in attempt 1: rank 0's node ends it as
# hung, and the coordinator stops rank 1 on the other node.
GANG_JOB = r'''
import os, sys, time
print("rank %s attempt %s" % (os.environ["NODE_RANK"], os.environ["BRAMBLE_ATTEMPT"]), flush=True)
if os.environ["BRAMBLE_ATTEMPT"] == "1":
    time.sleep(3600)
'''


def test_hung_gang_is_stopped_on_every_node(make_cluster, tmp_path):
    c = make_cluster(heartbeat=HB)
    c.add_agents(2, names=names(2))
    script = tmp_path / "gang_job.py"
    script.write_text(GANG_JOB)
    jid = c.submit(f"name: gang\ncommand: exec {PYTHON} -u {script}\n"
                   f"resources: {{nodes: 2}}\n"
                   f"progress: {{timeout: {TIMEOUT_S:g}s}}\n")
    j = c.wait_job(jid, ("running", "failed", "completed"))
    assert j["state"] == "running", (events_text(j), c.logs(jid, stream="both"))
    first = wait_for(lambda: {p: t for p, t in c.job_procs(jid).items()
                              if ".1." in t.split("/", 1)[1]}
                     if len(c.job_procs(jid)) >= 2 else None,
                     what="both ranks of attempt 1 to run")
    j = c.wait_job(jid, timeout=DEADLINE + 2 * TIMEOUT_S)
    assert j["state"] == "completed" and j["attempt"] == 2, (events_text(j),
                                                             c.logs(jid, stream="both"))
    ev = [e for e in j["events"] if "hung: no output" in (e["reason"] or "")]
    assert ev and "rank 0 on" in ev[0]["reason"] and "stopped the other 1 rank" in \
        ev[0]["reason"], events_text(j)
    assert wait_for(lambda: all(gone(p) for p in first),
                    what="every process of attempt 1 to be gone, on both nodes")
