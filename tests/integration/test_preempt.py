"""Preemption that keeps the work (docs/sharing.md): a job of higher priority that
waited --preempt-after asks a running job of lower priority to make room. The
low job gets its preempt.signal, writes a checkpoint within its grace, is stopped
as soon as that checkpoint is counted, goes back to pending, and later resumes
from exactly that step; it ends with the same result as a run never stopped."""

import re

from conftest import wait_for

PYTHON = "/usr/bin/python3"

# Sums 1..40, a step every 0.1 s; saves a checkpoint every 15 steps, and at once
# when asked (SIGUSR1), then waits to be stopped. Resumes from BRAMBLE_RESUME_FROM.
TRAIN = r'''
import json, os, signal, time
d = os.environ["BRAMBLE_CHECKPOINT_DIR"]
step, total = 0, 0
resume = os.environ.get("BRAMBLE_RESUME_FROM", "")
if resume:
    with open(os.path.join(resume, "state.json")) as f:
        st = json.load(f)
    step, total = st["step"], st["total"]
    print("resumed from step %d" % step, flush=True)
asked = []
signal.signal(signal.SIGUSR1, lambda *a: asked.append(1))


def save():
    p = os.path.join(d, "checkpoint-%05d" % step)
    os.makedirs(p, exist_ok=True)
    with open(os.path.join(p, "state.json"), "w") as f:
        json.dump({"step": step, "total": total}, f)
    with open(os.path.join(p, "trainer_state.json"), "w") as f:
        f.write("{}")


while step < 40:
    step += 1
    total += step
    time.sleep(0.1)
    if asked:
        save()
        print("saved step %d when asked" % step, flush=True)
        while True:
            time.sleep(0.1)
    if step % 15 == 0:
        save()
print("result %d" % total, flush=True)
'''


def test_preempted_job_checkpoints_and_resumes_from_that_step(make_cluster, tmp_path):
    c = make_cluster(heartbeat="200ms", start=False)
    c.start_coordinator(extra=["--preempt-after", "1s", "--preempt-min-run", "0s"])
    c.start_agent("node-1", extra=["--gpus", "T:1GiB"])
    c.wait_ready("node-1")
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    ckpt = tmp_path / "ckpt"
    low = c.submit(f"name: low\ncommand: exec {PYTHON} -u {script}\n"
                   "resources: {gpus: 1, cpus: 0}\n"
                   f"checkpoint: {{dir: {ckpt}, pattern: \"checkpoint-*\", "
                   "complete_file: trainer_state.json}\n"
                   "preempt: {signal: USR1, grace: 30s}\n")
    c.wait_job(low, "running")
    high = c.submit("name: high\ncommand: \"echo high ran\"\npriority: 10\n"
                    "resources: {gpus: 1, cpus: 0}\n")
    h = c.wait_job(high, "completed", timeout=60)
    saved = int(re.search(r"saved step (\d+) when asked", c.logs(low)).group(1))
    job = c.wait_job(low, "completed", timeout=60)
    out = c.logs(low)
    assert f"resumed from step {saved}" in out, out
    assert "result 820" in out, out  # 1 + ... + 40, as if never stopped
    assert job["attempt"] == 2, job
    events = [e["reason"] or "" for e in job["events"]]
    assert any(f"preempted by job {high} (priority 10, over its 0): signal 10 sent" in r
               for r in events), events
    assert any(f"checkpoint step {saved} counted after it was asked to make room" in r
               for r in events), events
    assert any("back to pending as attempt 2" in r for r in events), events
    assert any(f"preempting job {low} to start" in (e["reason"] or "")
               for e in h["events"]), h["events"]
    # the high job ran while the low one waited, then the low one went on
    assert h["ended"] <= job["started"], (h, job)
    # a restart was not counted against the low job's restart.max
    assert not any("restarting" in r for r in events), events
