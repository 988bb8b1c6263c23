"""Signals reach the job, not only its shell (docs/sharing.md, "Signals and
graces"). A job runs as `/bin/sh -c COMMAND`, and Debian's dash does not exec the
command: sh stays the parent and dies at once of a signal it does not trap. During
a preemption's, a time limit's or a cancel's grace the attempt ends when the job's
last process has ended (or the grace is over), never because that shell died, so
the job's own handler gets its grace.

Every job here is started the default way: `command:` through /bin/sh, no exec.
The tests share one cluster (one node with one GPU; jobs have names of their own)."""

import re
import secrets

import pytest

from conftest import shared_cluster_test, start_cluster, teardown_clusters, wait_for

PYTHON = "/usr/bin/python3"

# Sums 1..40, a step every 0.1 s; a checkpoint every 15 steps, and at the next
# step once asked (SIGUSR1), then waits to be stopped. Resumes from
# BRAMBLE_RESUME_FROM. The marker file is written last: only then is it complete.
# The first attempt waits at step 20 until it is asked, so that it is still running
# when the preemption comes, however fast or loaded the machine is.
TRAIN_BASH = r'''#!/bin/bash
d=$BRAMBLE_CHECKPOINT_DIR
step=0
total=0
if [ -n "$BRAMBLE_RESUME_FROM" ]; then
    read -r step total < "$BRAMBLE_RESUME_FROM/state"
    echo "resumed from step $step"
fi
asked=0
trap 'asked=1' USR1
save() {
    p=$(printf '%s/checkpoint-%05d' "$d" "$step")
    mkdir -p "$p"
    echo "$step $total" > "$p/state"
    echo '{}' > "$p/trainer_state.json"
}
while [ "$step" -lt 40 ]; do
    step=$((step + 1))
    total=$((total + step))
    sleep 0.1 &
    wait $!
    while [ "$BRAMBLE_ATTEMPT" = 1 ] && [ "$step" -ge 20 ] && [ "$asked" = 0 ]; do
        sleep 0.1 &
        wait $!
    done
    if [ "$asked" = 1 ]; then
        save
        echo "saved step $step when asked"
        while true; do sleep 0.1; done
    fi
    if [ $((step % 15)) -eq 0 ]; then save; fi
done
echo "result $total"
'''

TRAIN_PY = r'''
import os, signal, time
d = os.environ["BRAMBLE_CHECKPOINT_DIR"]
step, total = 0, 0
resume = os.environ.get("BRAMBLE_RESUME_FROM", "")
if resume:
    with open(os.path.join(resume, "state")) as f:
        step, total = map(int, f.read().split())
    print("resumed from step %d" % step, flush=True)
asked = []
signal.signal(signal.SIGUSR1, lambda *a: asked.append(1))


def save():
    p = os.path.join(d, "checkpoint-%05d" % step)
    os.makedirs(p, exist_ok=True)
    with open(os.path.join(p, "state"), "w") as f:
        f.write("%d %d\n" % (step, total))
    with open(os.path.join(p, "trainer_state.json"), "w") as f:
        f.write("{}")


while step < 40:
    step += 1
    total += step
    time.sleep(0.1)
    while os.environ["BRAMBLE_ATTEMPT"] == "1" and step >= 20 and not asked:
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

# On SIGTERM: a first line, a pause, a last line, exit 0 (a job saving its state).
# FIRST and LAST are replaced by words of the test's own.
HANDLER_BASH = r'''#!/bin/bash
trap 'echo "FIRST"; sleep PAUSE; echo "LAST"; exit 0' TERM
echo started
while true; do sleep 0.2; done
'''

HANDLER_PY = r'''
import signal, sys, time
def on_term(sig, frame):
    print("FIRST", flush=True)
    time.sleep(PAUSE)
    print("LAST", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("started", flush=True)
while True:
    time.sleep(0.1)
'''

GRACE = "20s"  # the coordinator's --kill-grace here: every handler fits in it


@pytest.fixture(scope="module")
def module_node(tmp_path_factory):
    made = []
    try:
        c = start_cluster(tmp_path_factory.mktemp("signals"), made, start=False,
                          heartbeat="200ms")
        c.start_coordinator(extra=["--preempt-after", "1s", "--preempt-min-run", "0s",
                                   "--kill-grace", GRACE])
        c.start_agent("node-1", extra=["--gpus", "T:1GiB"])
        c.wait_ready("node-1")
        yield c
    finally:
        teardown_clusters(made)


@pytest.fixture
def node(module_node, request):
    yield from shared_cluster_test(module_node, request)


def handler_job(c, tmp_path, lang, pause, extra=""):
    """A job whose SIGTERM handler prints a first line, waits pause seconds and
    prints a last one; (job id, first line, last line)."""
    tag = secrets.token_hex(3)
    first, last = f"first-{tag}", f"last-{tag}"
    if lang == "bash":
        script = tmp_path / f"handler-{tag}.sh"
        script.write_text(HANDLER_BASH.replace("FIRST", first).replace("LAST", last)
                          .replace("PAUSE", str(pause)))
        script.chmod(0o755)
        command = str(script)
    else:
        script = tmp_path / f"handler-{tag}.py"
        script.write_text(HANDLER_PY.replace("FIRST", first).replace("LAST", last)
                          .replace("PAUSE", str(pause)))
        command = f"{PYTHON} -u {script}"
    jid = c.submit(f"name: h-{lang}-{tag}\ncommand: {command}\n"
                   f"resources: {{cpus: 0}}\n{extra}")
    c.wait_job(jid, "running")
    c.wait_logs(jid, "started")
    return jid, first, last


def reasons(job):
    return [e["reason"] or "" for e in job["events"]]


@pytest.mark.parametrize("lang", ["bash", "python"])
def test_preemption_resumes_from_the_checkpoint_written_at_the_signal(node, tmp_path, lang):
    c = node
    if lang == "bash":
        script = tmp_path / "train.sh"
        script.write_text(TRAIN_BASH)
        script.chmod(0o755)
        command = str(script)
    else:
        script = tmp_path / "train.py"
        script.write_text(TRAIN_PY)
        command = f"{PYTHON} -u {script}"
    ckpt = tmp_path / "ckpt"
    low = c.submit(f"name: low-{lang}\ncommand: {command}\n"
                   "resources: {gpus: 1, cpus: 0}\n"
                   f"checkpoint: {{dir: {ckpt}, pattern: \"checkpoint-*\", "
                   "complete_file: trainer_state.json}\n"
                   "preempt: {signal: USR1, grace: 20s}\n")
    c.wait_job(low, "running")
    high = c.submit(f"name: high-{lang}\ncommand: \"echo high ran\"\npriority: 10\n"
                    "resources: {gpus: 1, cpus: 0}\n")
    c.wait_job(high, "completed", timeout=60)
    job = c.wait_job(low, "completed", timeout=60)
    out = c.logs(low)
    m = re.search(r"saved step (\d+) when asked", out)
    assert m, out
    saved = int(m.group(1))
    # the checkpoint its handler wrote is the one it resumed from, not an older one
    assert f"resumed from step {saved}" in out, out
    assert "result 820" in out, out  # 1 + ... + 40, as if never stopped
    assert job["attempt"] == 2, job
    rs = reasons(job)
    assert any(f"checkpoint step {saved} counted after it was asked to make room" in r
               for r in rs), rs
    assert not any("killed by signal 10" in r and "preempted" not in r for r in rs), rs


@pytest.mark.parametrize("lang", ["bash", "python"])
def test_time_limit_gives_the_handler_its_grace(node, tmp_path, lang):
    c = node
    jid, first, last = handler_job(c, tmp_path, lang, 1, extra="time_limit: 2s\n")
    job = c.wait_job(jid, timeout=60)
    out = c.logs(jid)
    assert job["state"] == "failed", job
    assert first in out and last in out, out
    assert out.index(first) < out.index(last), out
    assert "time limit 2s reached" in job["reason"], job["reason"]
    # it ended of itself within the grace, not by the SIGKILL at its end
    assert "within the grace" in job["reason"], job["reason"]
    assert "killed after its grace" not in job["reason"], job["reason"]


@pytest.mark.parametrize("lang", ["bash", "python"])
def test_cancel_sends_sigterm_and_waits_for_the_handler(node, tmp_path, lang):
    c = node
    jid, first, last = handler_job(c, tmp_path, lang, 1)
    rc, out, err = c.cli("cancel", jid)
    assert rc == 0, (out, err)
    assert out.strip() == f"job {jid}: cancelled", out
    assert "within the grace" in err, err  # how it ended, on stderr
    job = c.job(jid)
    assert job["state"] == "cancelled", job
    logs = c.logs(jid)
    assert first in logs and last in logs, logs
    rs = reasons(job)
    assert any(r.startswith("cancel requested: SIGTERM sent, SIGKILL in") for r in rs), rs
    assert "within the grace" in job["reason"], job["reason"]
    wait_for(lambda: not c.job_procs(jid), what=f"no process of job {jid} left")


def test_cancel_now_kills_at_once_even_in_the_grace(node, tmp_path):
    c = node
    # a handler that takes longer than any test waits: only --now ends it early
    jid, first, last = handler_job(c, tmp_path, "bash", 600)
    rc, out, err = c.cli("cancel", "--no-wait", jid)
    assert rc == 0, (out, err)
    assert out.startswith(f"job {jid}: running (cancel requested: SIGTERM sent"), out
    c.wait_logs(jid, first)
    assert c.job(jid)["state"] == "running"
    rc, out, err = c.cli("cancel", jid, "--now")
    assert rc == 0, (out, err)
    assert out.strip() == f"job {jid}: cancelled", out
    job = c.job(jid)
    assert job["reason"] == "cancelled by request (killed at once, in its grace)", job
    wait_for(lambda: not c.job_procs(jid), what=f"no process of job {jid} left")
    assert last not in c.logs(jid)

    # --now on a running job that was never asked: SIGKILL, its handler never runs
    jid, first, last = handler_job(c, tmp_path, "python", 1)
    rc, out, err = c.cli("cancel", "--now", jid)
    assert rc == 0 and out.strip() == f"job {jid}: cancelled", (out, err)
    assert c.job(jid)["reason"] == "cancelled by request (killed at once)"
    wait_for(lambda: not c.job_procs(jid), what=f"no process of job {jid} left")
    assert first not in c.logs(jid)


def test_cancel_takes_several_ids_and_names(node):
    c = node
    tag = secrets.token_hex(3)
    ids = [c.submit(f"name: many-{tag}-{i}\ncommand: sleep 1000\nresources: {{cpus: 0}}\n")
           for i in range(3)]
    for jid in ids:
        c.wait_job(jid, "running")
    rc, out, err = c.cli("cancel", ids[0], 999999, "--name", f"many-{tag}-2", ids[1],
                         check=False)
    # the unknown id is refused, by name, and does not keep the others running
    assert rc == 1, (rc, out, err)
    assert "999999" in err, err
    for jid in ids:
        assert c.job(jid)["state"] == "cancelled"
    assert sorted(out.splitlines()) == sorted(f"job {j}: cancelled" for j in ids), out
    rc, out, err = c.cli("cancel", "--name", f"many-{tag}-0", check=False)
    assert rc == 1 and f"no active job named 'many-{tag}-0'" in err, (rc, out, err)
