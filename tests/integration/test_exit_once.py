"""An attempt whose processes ended has its exit reported and taken exactly once
(coordinator/core/jobs.c br_jobs_not_here, br_store_attempt_reopen), also after a node
loss that makes the job resume on a node where its newest checkpoint is not
visible, its start held while an older one is restored there, and sent again.

Real agents with no shared disk, as in test_replica_restore: each runs in a mount
namespace of its own where its own directory is bind-mounted at the jobs'
checkpoint dir. A job started the user's way (`command:` through /bin/sh) writes
checkpoint-1 and checkpoint-2 (trainer_state.json markers), waits there, and is
killed with its node; attempt 2 resumes elsewhere, does the last step (a line in a
side-effect file outside the checkpoint dir), writes checkpoint-3 and exits 0 at
once. Half the jobs make checkpoint-2 too big for any node's replica quota, so it
has no copy when its writer dies: attempt 2 is sent with checkpoint-2, its agent
cannot see it, and the coordinator holds the start while checkpoint-1 is restored
there from a replica, then sends the same attempt to the same node again (the path
whose exit was once dropped as a resend, after which the attempt was taken for
lost and run again). The other half resume from their replicated checkpoint-2.

In a loop of ROUNDS rounds, each with JOBS jobs on that round's victim node: every
job completes in attempt 2, whose exit is taken once, no event says `no longer
runs it`, the only restart is the victim's node_lost, and the last step ran once.
(Before the fix each fallen-back job's exit was dropped and it ran as attempt 3,
restarted as node_lost on its live node; attempt 3 resumed from checkpoint-3, so
there the attempt and event checks fail, not the side-effect count.)

Needs root (mount namespaces and bind mounts).
"""

import os
import re
import time

import pytest

from conftest import Fatal, wait_for
from test_recovery import HB, NT, NT_S, brief, events_text, node_names, steps_of
from test_replica_restore import copies_of, private_disk

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for mount namespaces")

ROUNDS, JOBS = 3, 6
QUOTA = 256 << 10  # each node's replica quota; the big checkpoint-2 is 1 MiB
BIG = 1 << 20
MARKER = "trainer_state.json"
NO_ROOM = "no other node can hold a copy"

# $1: the dir of files the test touches and reads (outside the checkpoint dir, so
# the same on every node); $2: this round's number. Attempt 1 makes step N once
# $1/stepN-$2 exists: checkpoint-1 is counted and copied before checkpoint-2 is
# written (a copy still waiting when a newer checkpoint is counted is left out),
# and it never makes step 3 (it waits there until its node is killed).
JOB = r'''
d="$BRAMBLE_CHECKPOINT_DIR"
s="${BRAMBLE_RESUME_STEP:-0}"
if [ -n "$BRAMBLE_RESUME_FROM" ]; then
  [ "$(cat "$BRAMBLE_RESUME_FROM/state")" = "$s" ] || { echo "bad resume: $BRAMBLE_RESUME_FROM" >&2; exit 3; }
  echo "attempt $BRAMBLE_ATTEMPT resumed from step $s on $BRAMBLE_NODE_NAME"
else
  echo "attempt $BRAMBLE_ATTEMPT started fresh on $BRAMBLE_NODE_NAME"
fi
while [ "$s" -lt 3 ]; do
  s=$((s + 1))
  if [ "$BRAMBLE_ATTEMPT" -eq 1 ]; then  # each step when the test says (never step 3)
    while [ ! -e "$1/step$s-$2" ]; do sleep 0.1; done
  fi
  if [ "$s" -eq 3 ]; then
    echo "attempt $BRAMBLE_ATTEMPT on $BRAMBLE_NODE_NAME" >> "$1/effects-$BRAMBLE_JOB_ID"
    echo "LAST STEP by attempt $BRAMBLE_ATTEMPT"
  fi
  c="$d/checkpoint-$s"
  mkdir -p "$c"
  echo "$s" > "$c/state"
  if [ "$s" -eq 2 ] && [ $((BRAMBLE_ARRAY_INDEX % 2)) -eq 0 ]; then
    head -c BIG /dev/zero > "$c/weights"
  fi
  echo "{\"global_step\": $s}" > "$c/MARKER"
done
'''.replace("BIG", str(BIG)).replace("MARKER", MARKER)


def spec(tmp_path, ckpt, rnd):
    script = tmp_path / "job.sh"
    if not script.exists():
        script.write_text(JOB)
    return (f"name: exit-once-{rnd}\n"
            f"array: 0-{JOBS - 1}\n"
            f"command: sh {script} {tmp_path} {rnd}\n"
            f"resources:\n  cpus: 0\n"
            f"checkpoint:\n  dir: {ckpt}/${{BRAMBLE_JOB_ID}}\n  pattern: \"checkpoint-*\"\n"
            f"  complete_file: {MARKER}\n  replicas: 1\n  keep: 2\n"
            f"restart:\n  max: 3\n  on: [node_lost]\n")


def big(index):
    return index % 2 == 0


def quota_known(c, names):
    """Every node's replica quota is known to the coordinator (else a node counts
    as having room for anything)."""
    for n in names:
        rep = (c.cli_json("node", "show", n).get("disk") or {}).get("replicas") or {}
        if rep.get("quota") != QUOTA:
            return False
    return True


def ready_to_kill(c, jobs, victim):
    """Each job runs attempt 1 on victim, waits after checkpoint-2, and has
    checkpoint-1 copied off victim; checkpoint-2 too, or (big) no copy and the
    coordinator said no node has room. The job objects, or None."""
    got = {}
    for jid, index in jobs.items():
        j = c.job(jid)
        if (j["state"], j["attempt"], j["nodes"]) != ("running", 1, [victim]):
            return None
        if steps_of(j, 1) != [1, 2] or not copies_of(j, 1) - {victim}:
            return None
        if big(index):
            if copies_of(j, 2):
                raise Fatal(f"job {jid}'s big checkpoint-2 was copied, past the quota:\n"
                            f"{events_text(j)}")
            if not any(NO_ROOM in (e["reason"] or "") for e in j["events"]):
                return None
        elif not copies_of(j, 2) - {victim}:
            return None
        got[jid] = j
    return got


def check_job(c, tmp_path, jid, index, victim):
    j = c.job(jid)
    what = f"job {jid} (index {index}, victim {victim}):\n{events_text(j)}"
    reasons = [e["reason"] or "" for e in j["events"]]
    assert not [r for r in reasons if "no longer runs it" in r], what
    restarts = [e for e in j["events"] if "restarting as attempt" in (e["reason"] or "")]
    assert len(restarts) == 1 and restarts[0]["node"] == victim and \
        "restarting as attempt 2 (node_lost)" in restarts[0]["reason"], what
    assert (j["state"], j["attempt"], j["exit_code"]) == ("completed", 2, 0), \
        f"{brief(j)}\n{what}"
    assert j["nodes"] != [victim], what
    exits = [r for r in reasons if re.search(r"attempt \d+ exited", r)]
    assert exits == ["attempt 2 exited 0"], what
    log = c.logs(jid)
    node = j["nodes"][0]
    resumed = 1 if big(index) else 2
    assert f"attempt 2 resumed from step {resumed} on {node}" in log, f"{log}\n{what}"
    if big(index):  # held for the restore of the older one, and sent again
        fell = [r for r in reasons if "falls back to" in r]
        assert fell and "not visible" in fell[0] and "checkpoint-1 " in fell[0], what
    restored = [r for r in reasons if "restored and verified" in r]
    assert restored and f"checkpoint-{resumed} " in restored[-1], what
    assert log.count("LAST STEP") == 1 and "LAST STEP by attempt 2" in log, f"{log}\n{what}"
    effects = (tmp_path / f"effects-{jid}").read_text().splitlines()
    assert effects == [f"attempt 2 on {node}"], (effects, what)
    assert 3 in steps_of(j, 2), what
    return "fell back" if big(index) else "from replica"


def test_exit_after_a_checkpoint_is_taken_once_after_node_loss(make_cluster, tmp_path):
    c = make_cluster(heartbeat=HB, node_timeout=NT)
    ckpt = tmp_path / "ckpt"  # the same path on every node, a different disk
    ckpt.mkdir()
    all_names = node_names(3 + ROUNDS)
    tok = c.token(uses=len(all_names))

    def start(name):
        disk = tmp_path / f"disk-{name}"
        disk.mkdir()
        c.start_agent(name, token=tok, wrap=private_disk(disk, ckpt),
                      extra=["--probe-port", "0", "--replica-port", "0",
                             "--replica-quota", str(QUOTA)])

    live = all_names[:3]
    spare = all_names[3:]
    for n in live:
        start(n)
    c.wait_ready(*live)

    seen = {}
    t0 = time.monotonic()
    for rnd in range(ROUNDS):
        victim, others = live[0], live[1:]
        wait_for(lambda: quota_known(c, live), what=f"the replica quotas of {live}")
        # the round's jobs all on the victim: the others take none until undrained,
        # and the jobs write no checkpoint before that (a draining node holds no copy)
        for n in others:
            c.cli("node", "drain", n)
        first = c.submit(spec(tmp_path, ckpt, rnd))
        jobs = {first + i: i for i in range(JOBS)}

        def placed():
            js = c.jobs()
            mine = [j for j in js if j["id"] in jobs]
            return len(mine) == JOBS and all(j["state"] == "running" for j in mine)

        wait_for(placed, what=f"round {rnd}: jobs {sorted(jobs)} to run on {victim}")
        for n in others:
            c.cli("node", "undrain", n)
        c.wait_ready(*others)
        (tmp_path / f"step1-{rnd}").touch()
        wait_for(lambda: all(copies_of(c.job(jid), 1) - {victim} for jid in jobs),
                 what=f"round {rnd}: every job's checkpoint-1 to be copied off {victim}")
        (tmp_path / f"step2-{rnd}").touch()
        try:
            wait_for(lambda: ready_to_kill(c, jobs, victim), what=f"round {rnd}: every job "
                     f"to wait after checkpoint-2, with the copies made")
        except AssertionError as e:
            raise AssertionError(f"{e}\n" + "\n".join(
                f"job {jid}:\n{events_text(c.job(jid))}" for jid in jobs)) from None
        wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
                 what="the coordinator's start-up grace to pass")

        c.kill_node(victim)
        new = spare.pop(0)
        start(new)
        live = others + [new]

        def ended():
            c.fatal_if_dead()
            js = {j["id"]: j for j in c.jobs() if j["id"] in jobs}
            return all(j["state"] in ("completed", "failed", "cancelled")
                       for j in js.values()) and len(js) == JOBS

        try:
            wait_for(ended, 60, f"round {rnd}: jobs {sorted(jobs)} to end")
        except AssertionError as e:
            raise AssertionError(f"{e}\n" + "\n".join(
                f"job {jid}: {c.job(jid)['state']} attempt {c.job(jid)['attempt']}\n"
                f"{events_text(c.job(jid))}" for jid in jobs)) from None
        for jid, index in jobs.items():
            how = check_job(c, tmp_path, jid, index, victim)
            seen[how] = seen.get(how, 0) + 1
        c.wait_ready(new)
    print(f"\n{ROUNDS} rounds of {JOBS} jobs in {time.monotonic() - t0:.1f} s: {seen}")
    assert seen == {"fell back": ROUNDS * JOBS // 2, "from replica": ROUNDS * JOBS // 2}
