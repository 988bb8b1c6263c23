"""Checkpoints that survive their node (docs/checkpoints.md, "Replicas on other
nodes"): agents with no shared disk. Each agent runs in a mount namespace of its
own in which its own directory is bind-mounted at the job's checkpoint.dir, so a
checkpoint written on one node is not visible on the other. The coordinator has
each counted checkpoint copied to the other node (checkpoint.replicas, default 1
with two nodes); when the writer dies, the job resumes on the other node from
the newest replicated checkpoint, restored there and verified first, and ends
with exactly what an uninterrupted run computes.

Needs root (mount namespaces and bind mounts).
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import DEADLINE, REPO, wait_for
from test_recovery import (HB, NT, NT_S, PYTHON, brief, events_text, newest_complete,
                           node_names, other, steps_of, task_tag, wait_attempt_running)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for mount namespaces")


def private_disk(own, at):
    """wrap= argv: run the agent in a mount namespace of its own where `own` is
    bind-mounted at `at` (its jobs inherit the namespace)."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount --bind "{own}" "{at}" && exec "$@"', "sh"]


def reference_run(tmp_path, args):
    """The uninterrupted run of train_checkpoint.py, straight from the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRAMBLE_")}
    env["BRAMBLE_CHECKPOINT_DIR"] = str(tmp_path / "ref-ckpt")
    return subprocess.Popen([PYTHON, str(REPO / "examples" / "train_checkpoint.py")] + args,
                            env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def reference_finals(ref):
    out, _ = ref.communicate(timeout=120)
    assert ref.returncode == 0, out
    finals = [ln for ln in out.splitlines() if ln.startswith("final ")]
    assert len(finals) == 1, out
    return finals


def two_private_nodes(make_cluster, tmp_path):
    """A cluster of two agents with no shared disk: tmp_path/ckpt on each is its own
    tmp_path/disk-<node>. (cluster, names, ckpt, {node: its disk})."""
    c = make_cluster(heartbeat=HB, node_timeout=NT)
    names = node_names(2)
    ckpt = tmp_path / "ckpt"  # the same path on both nodes, a different disk
    ckpt.mkdir()
    disk = {n: tmp_path / f"disk-{n}" for n in names}
    tok = c.token(uses=2)
    for n in names:
        disk[n].mkdir()
        c.start_agent(n, token=tok, extra=["--probe-port", "0", "--replica-port", "0"],
                      wrap=private_disk(disk[n], ckpt))
    c.wait_ready(*names)
    return c, names, ckpt, disk


def submit_training(c, ckpt, args):
    return c.cli_json("submit", REPO / "examples" / "train-checkpoint.yaml",
                      "--set", f"workdir={REPO}", "--set", f"checkpoint.dir={ckpt}",
                      "--set", f"command={PYTHON} examples/train_checkpoint.py " +
                      " ".join(args))["id"]


def copies_of(job, step):
    for ck in job.get("checkpoints") or []:
        if ck["step"] == step:
            return {cp["node"] for cp in ck.get("copies") or [] if not cp.get("writer")}
    return set()


def test_job_resumes_on_another_node_from_replicated_checkpoint(make_cluster, tmp_path):
    steps, every, step_time = 80, 5, 0.1
    args = ["--steps", str(steps), "--every", str(every), "--step-time", str(step_time)]
    ref = reference_run(tmp_path, args)
    try:
        c, names, ckpt, disk = two_private_nodes(make_cluster, tmp_path)
        jid = submit_training(c, ckpt, args)
        j = c.wait_job(jid, "running")
        victim = j["nodes"][0]
        survivor = other(names, victim)

        wait_for(lambda: (steps_of(c.job(jid), 1) or [0])[-1] >= 3 * every, 60,
                 "attempt 1 to report three checkpoints")
        wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
                 what="the coordinator's start-up grace to pass")

        # hold the job still: the newest checkpoint is one definite step, reported
        # and copied to the survivor before the kill
        pids = c.task_procs(task_tag(victim, jid, 1))
        assert pids, f"no process of job {jid} attempt 1 on {victim}"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        on_disk = newest_complete(disk[victim])
        assert on_disk and on_disk >= 3 * every, on_disk
        assert newest_complete(disk[survivor]) is None  # no shared disk
        wait_for(lambda: steps_of(c.job(jid), 1)[-1] == on_disk,
                 what=f"the agent to report checkpoint-{on_disk}")

        def copied():
            j = c.job(jid)
            return j if survivor in copies_of(j, on_disk) else None

        try:
            wait_for(copied, what=f"checkpoint-{on_disk} to be copied to {survivor}")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{events_text(c.job(jid))}") from None
        _, listing, _ = c.cli("checkpoint", "list", str(jid))
        row = [ln for ln in listing.splitlines() if ln.split()[:1] == [str(on_disk)]]
        assert row and survivor in row[0] and " yes " in row[0], listing

        c.kill_node(victim)
        j = wait_attempt_running(c, jid, 2, timeout=DEADLINE)
        assert j["nodes"] == [survivor], brief(j)
        what = events_text(j)
        restored = [e for e in j["events"] if "restored and verified" in (e["reason"] or "")]
        assert restored and f"checkpoint-{on_disk}" in restored[-1]["reason"], what
        assert "received" in restored[-1]["reason"] and "/s" in restored[-1]["reason"], what
        print(restored[-1]["reason"])
        assert newest_complete(disk[survivor]) is not None

        log = c.wait_logs(jid, "attempt 2 on")
        assert (f"attempt 2 on {survivor}: resumed from step {on_disk} "
                f"({ckpt / f'checkpoint-{on_disk}'})") in log, log

        j = c.wait_job(jid, timeout=120)
        assert (j["state"], j["attempt"], j["exit_code"]) == ("completed", 2, 0), brief(j)
        log = c.wait_logs(jid, "final ")
        finals = [ln for ln in log.splitlines() if ln.startswith("final ")]
        ref_finals = reference_finals(ref)
        assert finals == ref_finals, (finals, ref_finals)
    finally:
        if ref.poll() is None:
            ref.kill()
            ref.wait()


def test_corrupt_replica_falls_back_to_previous_checkpoint(make_cluster, tmp_path):
    """A flipped byte in the survivor's replica of the newest checkpoint: the
    restore refuses it, and the job resumes from the checkpoint before, with
    events that name the bad file; it still ends with the exact result."""
    steps, every, step_time = 60, 5, 0.1
    args = ["--steps", str(steps), "--every", str(every), "--step-time", str(step_time)]
    ref = reference_run(tmp_path, args)
    try:
        c, names, ckpt, disk = two_private_nodes(make_cluster, tmp_path)
        jid = submit_training(c, ckpt, args)
        j = c.wait_job(jid, "running")
        victim = j["nodes"][0]
        survivor = other(names, victim)
        wait_for(lambda: (steps_of(c.job(jid), 1) or [0])[-1] >= 3 * every, 60,
                 "attempt 1 to report three checkpoints")
        wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
                 what="the coordinator's start-up grace to pass")
        for pid in c.task_procs(task_tag(victim, jid, 1)):
            os.kill(pid, signal.SIGSTOP)
        newest = newest_complete(disk[victim])
        wait_for(lambda: steps_of(c.job(jid), 1)[-1] == newest,
                 what=f"the agent to report checkpoint-{newest}")
        wait_for(lambda: survivor in copies_of(c.job(jid), newest) and
                 survivor in copies_of(c.job(jid), newest - every),
                 what=f"checkpoints {newest - every} and {newest} copied to {survivor}")

        # flip one byte of the newest replica's state.json (same size)
        store = c.agent_dir(survivor) / "replicas" / str(jid)
        (bad,) = list(store.glob(f"*/checkpoint-{newest}/state.json"))
        data = bytearray(bad.read_bytes())
        data[len(data) // 2] ^= 0x01
        bad.write_bytes(bytes(data))

        c.kill_node(victim)
        j = wait_attempt_running(c, jid, 2, timeout=DEADLINE)
        what = events_text(j)
        assert j["nodes"] == [survivor], what
        failed = [e for e in j["events"] if "failed" in (e["reason"] or "") and
                  f"checkpoint-{newest}" in (e["reason"] or "")]
        assert failed and "state.json" in failed[0]["reason"], what
        fell = [e for e in j["events"] if "falls back" in (e["reason"] or "")]
        assert fell and f"checkpoint-{newest - every}" in fell[0]["reason"], what
        print(failed[0]["reason"], "\n", fell[0]["reason"])
        log = c.wait_logs(jid, "attempt 2 on")
        assert f"attempt 2 on {survivor}: resumed from step {newest - every} " in log, log

        j = c.wait_job(jid, timeout=120)
        assert (j["state"], j["attempt"], j["exit_code"]) == ("completed", 2, 0), brief(j)
        finals = [ln for ln in c.wait_logs(jid, "final ").splitlines()
                  if ln.startswith("final ")]
        ref_finals = reference_finals(ref)
        assert finals == ref_finals, (finals, ref_finals)
    finally:
        if ref.poll() is None:
            ref.kill()
            ref.wait()


def test_fast_writer_resumes_from_a_checkpoint_counted_a_second_before(make_cluster,
                                                                      tmp_path):
    """Replicas keep up with a job that checkpoints every 0.3 s: each counted
    checkpoint is copied at once (no wait for a tick), older copies still waiting are
    left out for the newer one, so the writer killed 1 s after a checkpoint was
    counted resumes from that checkpoint or a newer one, never an older one."""
    steps, every, step_time = 200, 3, 0.1
    args = ["--steps", str(steps), "--every", str(every), "--step-time", str(step_time)]
    c, names, ckpt, disk = two_private_nodes(make_cluster, tmp_path)
    jid = submit_training(c, ckpt, args)
    j = c.wait_job(jid, "running")
    victim = j["nodes"][0]
    survivor = other(names, victim)
    wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
             what="the coordinator's start-up grace to pass")
    wait_for(lambda: (steps_of(c.job(jid), 1) or [0])[-1] >= 10 * every, 60,
             "attempt 1 to report ten checkpoints")
    counted = steps_of(c.job(jid), 1)[-1]
    # the scenario: the writer goes on checkpointing, and its node dies a second
    # after that checkpoint was seen counted (a deliberate delay, not a wait)
    time.sleep(1.0)
    c.kill_node(victim)
    j = wait_attempt_running(c, jid, 2, timeout=DEADLINE)
    assert j["nodes"] == [survivor], brief(j)
    log = c.wait_logs(jid, "attempt 2 on")
    m = re.search(rf"attempt 2 on {survivor}: resumed from step (\d+)", log)
    assert m, log + "\n" + events_text(c.job(jid))
    resumed = int(m.group(1))
    assert resumed >= counted, (resumed, counted, events_text(c.job(jid)))
    skipped = [e for e in c.job(jid)["events"] if "skipped on" in (e["reason"] or "")]
    print(f"\nkilled 1 s after step {counted} was counted; resumed from step {resumed}; "
          f"{len(skipped)} older copies left out for newer ones")
    j = c.wait_job(jid, timeout=120)
    assert (j["state"], j["attempt"]) == ("completed", 2), brief(j)
    assert not any("no longer runs it" in (e["reason"] or "") for e in j["events"]), \
        events_text(j)
