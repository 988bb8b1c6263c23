"""Node loss and recovery (issue 3, "Must hold"; ARCHITECTURE.md "Job life",
"Failure model", "What a job process sees"; PROTOCOL.md heartbeat and fencing).

Every test runs real daemons and real job processes and uses real signals: a node
is "killed" by stopping and SIGKILLing its agent and every process whose
environment carries BRAMBLE_TASK=<node>/...; the coordinator is SIGKILLed or
SIGSTOPped; a partition is a network namespace whose veth link goes down.

Node names carry a random part: an agent restarted on its data dir kills every
process tagged with its node name on the host, so names shared with another
cluster on the same machine would hit that cluster's jobs.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import (BIN, DEADLINE, KIND_RESPONSE, REPO, header, parse_header, proc_state,
                      wait_for)
from netlan import sh as _sh, veth_ns

# the interpreter running the tests (/usr/bin/python3): no wrapper (pyenv shims fork
# helpers that would carry the job's BRAMBLE_TASK tag)
PYTHON = sys.executable

# "fast" settings, for the tests about loss detection
HB, NT = "200ms", "2s"
NT_S = 2.0
FENCE_S = NT_S * 3 / 5  # PROTOCOL.md: fence_timeout = 3/5 of node_timeout

STOPPED = ("T", "t")
GONE = (None, "Z", "X")


# ---------------------------------------------------------------------------
# helpers


def node_names(n):
    tag = uuid.uuid4().hex[:6]
    return [f"r{tag}-{chr(ord('a') + i)}" for i in range(n)]


def make_nodes(make_cluster, n=2, **kw):
    kw.setdefault("heartbeat", HB)
    kw.setdefault("node_timeout", NT)
    c = make_cluster(**kw)
    names = c.add_agents(n, names=node_names(n))
    return c, names


def other(names, name):
    (o,) = [n for n in names if n != name]
    return o


def task_tag(node, job, attempt, rank=0):
    return f"{node}/{job}.{attempt}.{rank}"


def attempt_of(tag):
    """Attempt number of a BRAMBLE_TASK tag `<node>/<job>.<attempt>.<rank>`."""
    return int(tag.rsplit("/", 1)[1].split(".")[1])


def newest_complete(ckpt_dir, marker="trainer_state.json"):
    """Highest N of ckpt_dir/checkpoint-N that holds the marker, or None."""
    best = None
    for p in Path(ckpt_dir).glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", p.name)
        if m and (p / marker).exists():
            best = max(best or 0, int(m.group(1)))
    return best


def steps_of(job, attempt=None):
    return sorted(ck["step"] for ck in job.get("checkpoints") or []
                  if attempt is None or ck["attempt"] == attempt)


def events_text(job):
    return "\n".join(f"  {e.get('time')} {e.get('state')} [{e.get('node')}] {e.get('reason')}"
                     for e in job.get("events") or [])


def brief(job):
    return {k: v for k, v in job.items() if k not in ("spec",)}


def wait_attempt_running(c, jid, attempt, timeout=DEADLINE):
    """Wait until job jid runs as `attempt` (or a later one); the job object."""
    seen = {}

    def check():
        c.fatal_if_dead()
        seen["job"] = j = c.job(jid)
        return j if j["attempt"] >= attempt and j["state"] == "running" else None

    try:
        return wait_for(check, timeout, f"job {jid} to run as attempt {attempt}")
    except AssertionError as e:
        j = seen.get("job") or {}
        raise AssertionError(f"{e}\nlast seen: {json.dumps(brief(j), indent=1)}\n"
                             f"events:\n{events_text(j)}") from None


def last_running_time(job):
    """Time of the job's latest `running` event."""
    return [e["time"] for e in job["events"] if e["state"] == "running"][-1]


def max_count(text):
    counts = [int(m) for m in re.findall(r"^count (\d+)$", text, re.M)]
    return max(counts) if counts else 0


# A long-running job: one process (exec'd by the command) that prints a counter,
# appends to out-<node>-<attempt>.txt in its first argument's directory (if any)
# every 100 ms, and writes a checkpoint every second (when it has a checkpoint dir).
# It outlives its agent: output to a dead agent's pipe is dropped, not fatal.
COUNTER = r'''
import os, sys, time
attempt = os.environ.get("BRAMBLE_ATTEMPT", "?")
node = os.environ.get("BRAMBLE_NODE_NAME", "?")
args = sys.argv[1:]
out_dir = args[0] if args else ""


def say(text):
    try:
        os.write(1, (text + "\n").encode())
    except OSError:
        pass


say("start attempt %s on %s" % (attempt, node))
ckpt = os.environ.get("BRAMBLE_CHECKPOINT_DIR", "")
i = 0
while True:
    i += 1
    if out_dir:
        with open(os.path.join(out_dir, "out-%s-%s.txt" % (node, attempt)), "a") as f:
            f.write("%d\n" % i)
    if ckpt and i % 10 == 0:
        d = os.path.join(ckpt, "checkpoint-%s%03d" % (attempt, i // 10))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "state.json"), "w") as f:
            f.write('{"i": %d}' % i)
        with open(os.path.join(d, "trainer_state.json"), "w") as f:
            f.write("{}")
    if i % 2 == 0:
        say("count %d" % (i // 2))
    time.sleep(0.1)
'''

CKPT_JOB = r'''
import json, os, sys, time
mode = sys.argv[1]
d = os.environ["BRAMBLE_CHECKPOINT_DIR"]
attempt = os.environ.get("BRAMBLE_ATTEMPT", "?")
print("attempt=%s node=%s resume_from=[%s] resume_step=[%s]" % (
    attempt, os.environ.get("BRAMBLE_NODE_NAME"),
    os.environ.get("BRAMBLE_RESUME_FROM", "<unset>"),
    os.environ.get("BRAMBLE_RESUME_STEP", "<unset>")), flush=True)
if attempt != "1":
    print("attempt %s done" % attempt, flush=True)
    sys.exit(0)


def write(path, name, text):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "w") as f:
        f.write(text)


c10, c20 = os.path.join(d, "checkpoint-10"), os.path.join(d, "checkpoint-20")
write(c10, "state.json", json.dumps({"step": 10}))
if mode in ("marker", "single"):
    write(c10, "trainer_state.json", json.dumps({"global_step": 10}))
if mode == "marker":
    write(c20, "state.json", json.dumps({"step": 20}))  # never gets its marker
if mode in ("marker", "single"):
    print("wrote checkpoints", flush=True)
    while True:
        time.sleep(0.1)
# growing: checkpoint-10 stays quiet, checkpoint-20 keeps changing
os.makedirs(c20, exist_ok=True)
n = 0
while True:
    with open(os.path.join(c20, "state.json"), "a") as f:
        f.write("x" * 64 + "\n")
    n += 1
    if n % 10 == 0:
        print("appended %d" % n, flush=True)
    time.sleep(0.1)
'''


def write_script(tmp_path, name, text):
    p = Path(tmp_path) / name
    p.write_text(text)
    return p


def counter_spec(name, script, workdir, out_dir="", restart="max: 2\n  on: [node_lost]",
                 checkpoint_dir=None):
    spec = (f"name: {name}\n"
            f"command: exec {PYTHON} -u {script} {out_dir}\n"
            f"workdir: {workdir}\n"
            f"restart:\n  {restart}\n")
    if checkpoint_dir:
        spec += (f"checkpoint:\n  dir: {checkpoint_dir}\n  pattern: \"checkpoint-*\"\n"
                 f"  complete_file: trainer_state.json\n")
    return spec


def dying(pid):
    """True when pid has SIGKILL pending: a stopped process that is killed is woken
    to die and shows state R for that instant, running none of its own code."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("SigPnd:", "ShdPnd:")) and \
                        int(line.split()[1], 16) & (1 << (signal.SIGKILL - 1)):
                    return True
    except OSError:
        return True
    return False


class RunMonitor(threading.Thread):
    """Samples /proc every ~20 ms: records the moments when processes of two
    different attempts of one job were running (not stopped, not being killed)
    at once."""

    def __init__(self, cluster, jid):
        super().__init__(daemon=True)
        self.c, self.jid = cluster, jid
        self.halt = threading.Event()
        self.violations = []
        self.samples = 0

    def run(self):
        while not self.halt.is_set():
            live = {}
            for pid, tag in self.c.job_procs(self.jid).items():
                st = proc_state(pid)
                if st not in STOPPED and st not in GONE and not dying(pid):
                    live.setdefault(attempt_of(tag), []).append((pid, tag, st))
            if len(live) > 1:
                self.violations.append((time.time(), live))
            self.samples += 1
            self.halt.wait(0.02)

    def stop(self):
        self.halt.set()
        self.join(10)


# ---------------------------------------------------------------------------
# node killed while a checkpointing job runs


def test_node_killed_job_resumes_elsewhere_from_newest_checkpoint(make_cluster, tmp_path):
    steps, every, step_time = 100, 5, 0.1
    args = ["--steps", str(steps), "--every", str(every), "--step-time", str(step_time)]
    script = REPO / "examples" / "train_checkpoint.py"

    # the uninterrupted reference run, straight from the test, alongside
    ref_env = {k: v for k, v in os.environ.items() if not k.startswith("BRAMBLE_")}
    ref_env["BRAMBLE_CHECKPOINT_DIR"] = str(tmp_path / "ref-ckpt")
    ref = subprocess.Popen([PYTHON, str(script)] + args, env=ref_env, cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        c, names = make_nodes(make_cluster)
        ckpt = tmp_path / "ckpt"
        out = c.cli_json("submit", REPO / "examples" / "train-checkpoint.yaml",
                         "--set", f"workdir={REPO}",
                         "--set", f"checkpoint.dir={ckpt}",
                         "--set", f"command={PYTHON} examples/train_checkpoint.py " + " ".join(args))
        jid = out["id"]
        j = c.wait_job(jid, "running")
        victim = j["nodes"][0]
        survivor = other(names, victim)

        # some checkpoints reported, and past the coordinator's start-up grace
        wait_for(lambda: (steps_of(c.job(jid), 1) or [0])[-1] >= 3 * every, 60,
                 "attempt 1 to report three checkpoints")
        wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
                 what="the coordinator's start-up grace to pass")

        # Hold the job still for a moment so that "the newest complete checkpoint at
        # the time of the kill" is one definite step, and let the agent report it.
        pids = c.task_procs(task_tag(victim, jid, 1))
        assert pids, f"no process of job {jid} attempt 1 on {victim}"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        on_disk = newest_complete(ckpt)
        assert on_disk and on_disk >= 3 * every, on_disk
        wait_for(lambda: steps_of(c.job(jid), 1)[-1] == on_disk,
                 what=f"the agent to report checkpoint-{on_disk}, the newest on disk")

        t_kill = c.kill_node(victim)
        assert newest_complete(ckpt) == on_disk

        j = wait_attempt_running(c, jid, 2, timeout=DEADLINE)
        t_seen = time.time()
        assert j["attempt"] == 2, brief(j)
        assert j["nodes"] == [survivor], brief(j)
        running = [e for e in j["events"] if e["state"] == "running"]
        assert len(running) == 2, events_text(j)
        back_after = running[-1]["time"] - t_kill
        limit = NT_S + 3.0
        print(f"kill -> attempt 2 running: {back_after:.2f}s (polled {t_seen - t_kill:.2f}s), "
              f"resuming from step {on_disk}")
        assert back_after <= limit, (
            f"job ran again {back_after:.2f}s after the kill (seen by polling after "
            f"{t_seen - t_kill:.2f}s); node_timeout + 3s = {limit:.1f}s\n{events_text(j)}")
        assert any(e["state"] == "lost" or "lost" in (e["reason"] or "")
                   for e in j["events"]), events_text(j)

        # resumed from the newest complete checkpoint of attempt 1: not older, not zero
        newest = steps_of(j, 1)[-1]
        assert newest == on_disk, (steps_of(j, 1), on_disk)
        assert not steps_of(j, 2) or min(steps_of(j, 2)) > newest, j["checkpoints"]
        log = c.wait_logs(jid, "attempt 2 on")
        m = re.search(r"^attempt 2 on (\S+): resumed from step (\d+) \((.*)\)$", log, re.M)
        assert m, f"attempt 2 did not resume from a checkpoint:\n{log}"
        assert m.group(1) == survivor, log
        assert int(m.group(2)) == newest, f"resumed from step {m.group(2)}, newest {newest}"
        assert Path(m.group(3)) == ckpt / f"checkpoint-{newest}", m.group(3)

        j = c.wait_job(jid, timeout=120)
        assert (j["state"], j["attempt"], j["exit_code"]) == ("completed", 2, 0), brief(j)
        log = c.wait_logs(jid, "final ")
        finals = [ln for ln in log.splitlines() if ln.startswith("final ")]

        ref_out, _ = ref.communicate(timeout=120)
        assert ref.returncode == 0, ref_out
        ref_finals = [ln for ln in ref_out.splitlines() if ln.startswith("final ")]
        assert len(ref_finals) == 1, ref_out
        assert finals == ref_finals, f"bramble: {finals}\nuninterrupted: {ref_finals}"
    finally:
        if ref.poll() is None:
            ref.kill()
            ref.wait()


# ---------------------------------------------------------------------------
# restart policy for non-zero exits


def test_nonzero_exit_restart_policy(make_cluster):
    c, names = make_nodes(make_cluster, heartbeat="250ms", node_timeout="10s")
    cmd = 'echo "try $BRAMBLE_ATTEMPT"; '
    jobs = {
        # restarted twice (max 2), then failed
        "always-fails": (cmd + "exit 3", "max: 2\n  on: [nonzero_exit]", "failed", 3),
        # not restarted: only node_lost is listed
        "lost-only": (cmd + "exit 5", "max: 3\n  on: [node_lost]", "failed", 1),
        # nonzero_exit listed but no restarts allowed
        "max-zero": (cmd + "exit 6", "max: 0\n  on: [nonzero_exit, node_lost]", "failed", 1),
        # restarted only as long as needed
        "second-ok": (cmd + '[ "$BRAMBLE_ATTEMPT" -ge 2 ] || exit 4',
                      "max: 3\n  on: [nonzero_exit]", "completed", 2),
    }
    ids = {name: c.submit(f"name: {name}\ncommand: {cmd_}\nrestart:\n  {restart}\n")
           for name, (cmd_, restart, _, _) in jobs.items()}
    for name, (cmd_, restart, state, attempts) in jobs.items():
        jid = ids[name]
        j = c.wait_job(jid, timeout=90)
        what = f"{name}: {json.dumps(brief(j))}\n{events_text(j)}"
        assert j["state"] == state, what
        assert j["attempt"] == attempts, what
        exit_code = int(re.search(r"exit (\d+)", cmd_).group(1))
        assert j["exit_code"] == (0 if state == "completed" else exit_code), what
        ev = j["events"]
        # one start per attempt, one restart between two attempts, one end
        assert sum(e["state"] == "running" for e in ev) == attempts, what
        assert sum(e["state"] == "pending" for e in ev[1:]) == attempts - 1, what
        assert [e["state"] for e in ev].count(state) == 1 and ev[-1]["state"] == state, what
        for e in ev:
            if e["state"] == "pending" and e is not ev[0]:
                assert "nonzero_exit" in e["reason"], what
        if state == "failed":
            assert re.search(rf"\b{exit_code}\b", j["reason"] or ""), what
        out = c.wait_logs(jid, f"try {attempts}")
        assert re.findall(r"^try (\d+)$", out, re.M) == [str(i) for i in
                                                        range(1, attempts + 1)], out


# ---------------------------------------------------------------------------
# an incomplete checkpoint is never used to resume


def _kill_and_check_resume(c, names, jid, ckpt):
    j = c.job(jid)
    victim = j["nodes"][0]
    c.kill_node(victim)
    j = c.wait_job(jid, ("completed", "failed", "cancelled"), timeout=60)
    what = f"{json.dumps(brief(j))}\n{events_text(j)}"
    assert (j["state"], j["attempt"]) == ("completed", 2), what
    assert j["nodes"] == [other(names, victim)], what
    out = c.wait_logs(jid, "attempt 2 done")
    lines = [ln for ln in out.splitlines() if ln.startswith("attempt=2 ")]
    assert len(lines) == 1, out
    assert f"resume_from=[{ckpt / 'checkpoint-10'}]" in lines[0], lines[0]
    assert "resume_step=[10]" in lines[0], lines[0]
    assert steps_of(j) == [10], j["checkpoints"]


def test_checkpoint_without_marker_is_never_used(make_cluster, tmp_path):
    c, names = make_nodes(make_cluster)
    script = write_script(tmp_path, "ckpt_job.py", CKPT_JOB)
    ckpt = tmp_path / "ckpt-marker"
    jid = c.submit(f"name: marker-ckpt\n"
                   f"command: exec {PYTHON} -u {script} marker\n"
                   f"workdir: {tmp_path}\n"
                   f"checkpoint:\n  dir: {ckpt}\n  pattern: \"checkpoint-*\"\n"
                   f"  complete_file: trainer_state.json\n"
                   f"restart:\n  max: 2\n  on: [node_lost]\n")
    c.wait_logs(jid, "wrote checkpoints")
    wait_for(lambda: steps_of(c.job(jid)) == [10], what="checkpoint-10 to be reported")
    assert (ckpt / "checkpoint-20" / "state.json").exists()
    _kill_and_check_resume(c, names, jid, ckpt)


def test_checkpoint_still_changing_is_never_used(make_cluster, tmp_path):
    c, names = make_nodes(make_cluster)
    script = write_script(tmp_path, "ckpt_job.py", CKPT_JOB)
    ckpt = tmp_path / "ckpt-growing"
    jid = c.submit(f"name: growing-ckpt\n"
                   f"command: exec {PYTHON} -u {script} growing\n"
                   f"workdir: {tmp_path}\n"
                   f"checkpoint:\n  dir: {ckpt}\n  pattern: \"checkpoint-*\"\n"
                   f"restart:\n  max: 2\n  on: [node_lost]\n")
    # checkpoint-10 went quiet and was reported; checkpoint-20 has kept changing for
    # more than twice the quiet time that makes an unmarked checkpoint complete
    wait_for(lambda: steps_of(c.job(jid)) == [10], 60, "checkpoint-10 to be reported")
    c.wait_logs(jid, "appended 50", timeout=60)
    j = c.job(jid)
    assert steps_of(j) == [10], f"a checkpoint still being written was reported: " \
                                f"{j['checkpoints']}"
    _kill_and_check_resume(c, names, jid, ckpt)


# ---------------------------------------------------------------------------
# coordinator SIGKILLed during a burst of submissions


def _burst(c, indices, acked, errors, kill_after=None, window=8, silence=3.0):
    """Pipelined job.submit requests (at most `window` unanswered) on one raw CURVE
    client; acked[i] = id for each acknowledged submission i. With kill_after,
    SIGKILL brambled as soon as that many have been acknowledged, and stop
    sending. Returns when every request is answered or nothing came for `silence`."""
    cl = c.raw_client()
    try:
        todo = list(indices)
        outstanding = {}
        seq = 70000 + (todo[0] if todo else 0)
        last = time.monotonic()
        killed = False
        while True:
            while todo and len(outstanding) < window and not killed:
                i = todo.pop(0)
                seq += 1
                spec = (f"name: burst-{i}\ncommand: \"true\"\n"
                        f"resources:\n  cpus: 100000\n")
                cl.send([header("job.submit", seq),
                         json.dumps({"spec": spec, "sets": []}).encode()])
                outstanding[seq] = i
            if not outstanding and (not todo or killed):
                return
            msg = cl.recv(0.1)
            if msg is None:
                if time.monotonic() - last > silence:
                    return
                continue
            h = parse_header(msg[0])
            if not h or h["kind"] != KIND_RESPONSE or h["seq"] not in outstanding:
                continue
            last = time.monotonic()
            i = outstanding.pop(h["seq"])
            body = json.loads(msg[1])
            if isinstance(body.get("id"), int):
                acked[i] = body["id"]
            else:
                errors[i] = body
            if kill_after is not None and not killed and len(acked) >= kill_after:
                os.kill(c.coordinator.pid, signal.SIGKILL)
                killed = True
    finally:
        cl.close()


def test_coordinator_sigkill_during_submission_burst(make_cluster, tmp_path):
    nt = 3.0
    c, names = make_nodes(make_cluster, heartbeat="250ms", node_timeout="3s")
    script = write_script(tmp_path, "counter.py", COUNTER)
    long_id = c.submit(counter_spec("long-counter", script, tmp_path))
    j = c.wait_job(long_id, "running")
    tag = task_tag(j["nodes"][0], long_id, 1)
    procs = wait_for(lambda: c.job_procs(long_id), what="the long job's process")
    assert list(procs.values()) == [tag], procs
    (pid_before,) = procs
    c.wait_logs(long_id, "count 2")

    n = 200
    acked, errors = {}, {}
    c.coordinator.expected_exit = True  # the burst thread SIGKILLs it
    first = c.coordinator
    th = threading.Thread(target=_burst, args=(c, range(n), acked, errors),
                          kwargs={"kill_after": 60}, daemon=True)
    th.start()
    th.join(180)
    assert not th.is_alive(), "the submission burst hung"
    first.wait_exit()
    assert first.returncode() == -signal.SIGKILL, first.returncode()
    assert not errors, errors
    assert 60 <= len(acked) < n, f"{len(acked)} acknowledged: the kill was not mid-burst"
    assert len(set(acked.values())) == len(acked), acked

    print(f"{len(acked)} of {n} acknowledged before the kill")
    t_restart = time.time()
    c.start_coordinator()
    # the agents reconnect on their own
    wait_for(lambda: all(nd["last_seen"] > t_restart and nd["state"] == "ready"
                         for nd in c.nodes().values()) and len(c.nodes()) == 2,
             what="both agents to reconnect to the restarted coordinator")

    jobs = {jb["id"]: jb for jb in c.jobs(all=True)}
    missing = {i: jid for i, jid in acked.items() if jid not in jobs}
    assert not missing, f"acknowledged but gone after the restart: {missing}"
    wrong = {i: jobs[jid]["name"] for i, jid in acked.items()
             if jobs[jid]["name"] != f"burst-{i}"}
    assert not wrong, wrong

    # the rest of the burst goes to the restarted coordinator
    rest = [i for i in range(n) if i not in acked and f"burst-{i}" not in
            {jb["name"] for jb in jobs.values()}]
    acked2, errors2 = {}, {}
    _burst(c, rest, acked2, errors2, silence=30)
    assert not errors2 and len(acked2) == len(rest), (errors2, len(acked2), len(rest))

    # the long job: past the new coordinator's grace, still attempt 1, same process,
    # running (thawed if its agent froze it meanwhile), its counter going on
    wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * nt + 1,
             what="the restarted coordinator's grace period to pass")
    count = max_count(c.logs(long_id))
    c.wait_logs(long_id, f"count {count + 3}")
    j = c.job(long_id)
    what = f"{json.dumps(brief(j))}\n{events_text(j)}"
    assert (j["state"], j["attempt"]) == ("running", 1), what
    procs = c.job_procs(long_id)
    assert procs == {pid_before: tag}, f"processes of the job now: {procs}"
    assert proc_state(pid_before) not in STOPPED, proc_state(pid_before)
    out = c.logs(long_id)
    assert len(re.findall(r"^start attempt", out, re.M)) == 1, out
    assert all(nd["state"] == "ready" for nd in c.nodes().values()), c.nodes()


# ---------------------------------------------------------------------------
# an agent restarted on its data dir


def waiter_of(pid):
    """The bramble-wait process whose child pid is (the job's leader), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        comm = Path(f"/proc/{ppid}/comm").read_text().strip()
    except (OSError, ValueError, IndexError):
        return None
    return ppid if comm == "bramble-wait" else None


def test_agent_restart_that_cannot_adopt_kills_leftovers_and_job_restarts(make_cluster,
                                                                          tmp_path):
    """An agent killed together with its job's waiter (as `pkill -9 -f bramble-agent`
    does: the waiter is a fork of the agent) leaves a job it cannot adopt: no one
    holds its exit status. The restarted agent kills what is left and reports the
    attempt gone, and the coordinator restarts it at once, not after the node
    timeout."""
    # node_timeout long: the loss must come from the restarted agent's report
    c, names = make_nodes(make_cluster, heartbeat="250ms", node_timeout="30s")
    script = write_script(tmp_path, "counter.py", COUNTER)
    jid = c.submit(counter_spec("agent-restart", script, tmp_path))
    j = c.wait_job(jid, "running")
    node = j["nodes"][0]
    old = task_tag(node, jid, 1)
    wait_for(lambda: list(c.job_procs(jid).values()) == [old], what="the job's process")
    c.wait_logs(jid, "count 2")

    t_kill = time.time()
    waiters = {w for w in map(waiter_of, c.task_procs(old)) if w}
    assert waiters, f"no bramble-wait parent for {c.task_procs(old)}"
    c.agents[node].kill(signal.SIGKILL)
    for w in waiters:
        os.kill(w, signal.SIGKILL)
    left = c.task_procs(old)
    assert left, "the job died with its agent: nothing for the restarted agent to clean"
    agent = c.start_agent(node, join=False)
    wait_for(lambda: "not adopted: " in agent.output(), what="the agent to give up the job")
    assert "its waiter" in agent.output(), agent.output()

    j = wait_attempt_running(c, jid, 2)
    what = f"{json.dumps(brief(j))}\n{events_text(j)}"
    assert j["attempt"] == 2 and j["nodes"][0] in names, what
    assert time.time() - t_kill < 25, "restarted by the node timeout, not by the agent"
    assert not c.task_procs(old), f"processes of the old attempt left: {c.task_procs(old)}"
    for pid in left:
        assert proc_state(pid) in GONE, (pid, proc_state(pid))
    restarts = [e for e in j["events"] if e["state"] == "pending" and e is not j["events"][0]]
    assert len(restarts) == 1 and restarts[0]["node"] == node, what
    assert "node_lost" in restarts[0]["reason"], what
    c.wait_ready(node)
    out = c.wait_logs(jid, "start attempt 2")
    assert len(re.findall(r"^start attempt", out, re.M)) == 2, out
    procs = c.job_procs(jid)
    assert list(procs.values()) == [task_tag(j["nodes"][0], jid, 2)], procs


# ---------------------------------------------------------------------------
# fencing without a partition: the coordinator stopped


def test_coordinator_stopped_jobs_freeze_then_thaw_or_restart(make_cluster, tmp_path):
    c, names = make_nodes(make_cluster)
    script = write_script(tmp_path, "counter.py", COUNTER)
    jid = c.submit(counter_spec("fenced", script, tmp_path))
    j = c.wait_job(jid, "running")
    node = j["nodes"][0]
    tag1 = task_tag(node, jid, 1)
    wait_for(lambda: list(c.job_procs(jid).values()) == [tag1], what="the job's process")
    c.wait_logs(jid, "count 2")
    wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
             what="the coordinator's start-up grace to pass")

    mon = RunMonitor(c, jid)
    mon.start()
    try:
        t0 = time.monotonic()
        os.kill(c.coordinator.pid, signal.SIGSTOP)
        try:
            def frozen():
                procs = c.task_procs(tag1)
                return procs and all(proc_state(p) in STOPPED for p in procs)

            wait_for(frozen, what="the job's processes to be stopped (fenced)")
            frozen_after = time.monotonic() - t0
        finally:
            os.kill(c.coordinator.pid, signal.SIGCONT)
        assert frozen_after <= FENCE_S + 2.0, (
            f"job stopped {frozen_after:.2f}s after the coordinator went silent; "
            f"fence_timeout + 2s = {FENCE_S + 2:.1f}s")

        def outcome():
            j = c.job(jid)
            procs1 = c.task_procs(tag1)
            if j["attempt"] == 1 and j["state"] == "running" and procs1 and \
                    all(proc_state(p) not in STOPPED + GONE for p in procs1):
                return "thawed", j
            if j["attempt"] >= 2 and j["state"] == "running" and not procs1:
                return "restarted", j
            return None

        kind, j = wait_for(outcome, what="the job to be thawed, or killed and restarted")
        print(f"frozen {frozen_after:.2f}s after SIGSTOP; after SIGCONT: {kind}")
        if kind == "thawed":
            count = max_count(c.logs(jid))
            c.wait_logs(jid, f"count {count + 3}")
            j = c.job(jid)
            assert (j["attempt"], j["state"]) == (1, "running"), brief(j)
            assert list(c.job_procs(jid).values()) == [tag1], c.job_procs(jid)
        else:
            assert not c.task_procs(f"{node}/{jid}.1."), c.task_procs(f"{node}/{jid}.1.")
            c.wait_logs(jid, f"start attempt {j['attempt']}")
            assert all(attempt_of(t) == j["attempt"] for t in c.job_procs(jid).values()), \
                c.job_procs(jid)
    finally:
        mon.stop()
    assert mon.samples > 10
    assert not mon.violations, f"two attempts ran at once: {mon.violations[:3]}"


def test_sparse_heartbeat_answers_still_fence_in_time(make_cluster, tmp_path):
    """With a node timeout of 50 heartbeat intervals the coordinator answers only
    about one heartbeat in nine (PROTOCOL.md, node.heartbeat: at least every third
    of the fence time). A coordinator stalled for less than half the fence time
    freezes nothing; stalled longer, the job is frozen within the fence time and
    thawed after, as when every heartbeat was answered."""
    nt_s = 10.0
    fence_s = nt_s * 3 / 5
    c, names = make_nodes(make_cluster, n=1, node_timeout="10s")
    script = write_script(tmp_path, "counter.py", COUNTER)
    jid = c.submit(counter_spec("sparse", script, tmp_path))
    j = c.wait_job(jid, "running")
    tag1 = task_tag(j["nodes"][0], jid, 1)
    wait_for(lambda: list(c.job_procs(jid).values()) == [tag1], what="the job's process")
    c.wait_logs(jid, "count 2")

    def stopped():
        procs = c.task_procs(tag1)
        return bool(procs) and any(proc_state(p) in STOPPED for p in procs)

    # a stall of 2.5 s: at most a third of the fence time since the last answer,
    # plus the stall, stays under the fence time (6 s)
    os.kill(c.coordinator.pid, signal.SIGSTOP)
    try:
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            assert not stopped(), "the job was frozen while the coordinator was silent " \
                                  "for less than half its fence time"
            time.sleep(0.05)
    finally:
        os.kill(c.coordinator.pid, signal.SIGCONT)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        assert not stopped(), "the job was frozen after a short stall of the coordinator"
        time.sleep(0.05)
    count = max_count(c.logs(jid))
    c.wait_logs(jid, f"count {count + 2}")

    # a longer stall: frozen within the fence time, thawed after
    t0 = time.monotonic()
    os.kill(c.coordinator.pid, signal.SIGSTOP)
    try:
        wait_for(stopped, timeout=fence_s + 5, what="the job's process to be frozen (fenced)")
        frozen_after = time.monotonic() - t0
    finally:
        os.kill(c.coordinator.pid, signal.SIGCONT)
    assert frozen_after <= fence_s + 2.0, \
        f"frozen {frozen_after:.2f}s after the coordinator went silent (fence {fence_s}s)"
    wait_for(lambda: c.task_procs(tag1) and not stopped(), what="the job to be thawed")
    count = max_count(c.logs(jid))
    c.wait_logs(jid, f"count {count + 2}")
    j = c.job(jid)
    assert (j["attempt"], j["state"]) == (1, "running"), brief(j)


# ---------------------------------------------------------------------------
# a real partition: network namespace, link down


@pytest.fixture
def netns(request):
    """A network namespace joined to the host by a veth pair: host side
    10.231.0.1/30, namespace side 10.231.0.2/30. Yields (ns, host_veth)."""
    v = veth_ns(request, ["10.231.0.1/30"], ["10.231.0.2/30"], prefix="brt",
                what="network partition test")
    yield v.ns, v.host_veth


class FileMonitor(threading.Thread):
    """Records (time.time(), size) of a file whenever its size changes."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path = Path(path)
        self.halt = threading.Event()
        self.changes = []

    def size(self):
        try:
            return self.path.stat().st_size
        except OSError:
            return -1

    def run(self):
        last = None
        while not self.halt.is_set():
            s = self.size()
            if s != last:
                self.changes.append((time.time(), s))
                last = s
            self.halt.wait(0.02)

    def stop(self):
        self.halt.set()
        self.join(10)


def test_network_partition_fences_and_kills_stale_copy(netns, make_cluster, tmp_path):
    # (netns first: its link and namespace go only after the cluster has stopped)
    ns, host_veth = netns
    c = make_cluster(heartbeat=HB, node_timeout=NT, host="10.231.0.1")
    cut_name, host_name = node_names(2)
    tok = c.token(uses=2)
    c.start_agent(cut_name, token=tok, wrap=["ip", "netns", "exec", ns])
    c.start_agent(host_name, token=tok)
    c.wait_ready(cut_name, host_name)

    # the job starts on the namespaced node
    c.cli("node", "drain", host_name)
    wait_for(lambda: c.nodes()[host_name]["state"] == "draining", what="host node draining")
    script = write_script(tmp_path, "counter.py", COUNTER)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    ckpt = tmp_path / "ckpt-part"
    jid = c.submit(counter_spec("partitioned", script, tmp_path, out_dir=out_dir,
                                checkpoint_dir=ckpt))
    j = c.wait_job(jid, "running")
    assert j["nodes"] == [cut_name], brief(j)
    c.cli("node", "undrain", host_name)
    wait_for(lambda: c.nodes()[host_name]["state"] == "ready", what="host node ready")
    tag1 = task_tag(cut_name, jid, 1)
    wait_for(lambda: steps_of(c.job(jid), 1), what="attempt 1 to report a checkpoint")
    wait_for(lambda: time.monotonic() - c.coordinator_started > 2 * NT_S + 0.5,
             what="the coordinator's start-up grace to pass")

    out1 = out_dir / f"out-{cut_name}-1.txt"
    mon = FileMonitor(out1)
    mon.start()
    run_mon = RunMonitor(c, jid)
    run_mon.start()
    try:
        wait_for(lambda: len(mon.changes) >= 3, what="attempt 1 to write its file")
        t_cut = time.time()
        _sh("ip", "link", "set", host_veth, "down")

        j = wait_attempt_running(c, jid, 2)
        what = f"{json.dumps(brief(j))}\n{events_text(j)}"
        assert j["attempt"] == 2 and j["nodes"] == [host_name], what
        assert c.nodes()[cut_name]["state"] == "lost", c.nodes()[cut_name]
        lost = [e for e in j["events"] if e["state"] == "pending"]
        assert lost and lost[-1]["time"] - t_cut >= NT_S - 0.5, what
        c.wait_logs(jid, "start attempt 2")
        # the cut-off copy is frozen: its file stopped growing
        wait_for(lambda: time.time() - mon.changes[-1][0] > 1.5,
                 what="attempt 1's file to stop growing")
        stopped_at = mon.changes[-1][0]
        print(f"attempt 2 running {last_running_time(j) - t_cut:.2f}s after the cut; attempt 1 "
              f"wrote last {stopped_at - t_cut:.2f}s after the cut")
        assert stopped_at - t_cut <= FENCE_S + 1.0, (
            f"attempt 1 wrote {stopped_at - t_cut:.2f}s after the cut; "
            f"fence_timeout + 1s = {FENCE_S + 1:.1f}s")
        size_frozen = mon.changes[-1][1]
        assert c.task_procs(tag1), "the cut-off copy vanished while cut off"
        assert all(proc_state(p) in STOPPED for p in c.task_procs(tag1)), \
            {p: proc_state(p) for p in c.task_procs(tag1)}

        # link back: the stale copy is killed, the node is ready again
        _sh("ip", "link", "set", host_veth, "up")
        wait_for(lambda: not c.task_procs(tag1), 60,
                 "the stale copy (attempt 1) to be killed after the link came back")
        wait_for(lambda: c.nodes()[cut_name]["state"] == "ready", 60,
                 f"{cut_name} to be ready again")
        assert mon.size() == size_frozen
        assert mon.changes[-1][1] == size_frozen and mon.changes[-1][0] == stopped_at, \
            f"attempt 1's file grew again: {mon.changes[-5:]}"
        j = c.job(jid)
        what = f"{json.dumps(brief(j))}\n{events_text(j)}"
        assert (j["state"], j["attempt"], j["nodes"]) == ("running", 2, [host_name]), what
        # no checkpoint of the cut-off copy counts after the fence
        late = [ck for ck in j["checkpoints"]
                if ck["attempt"] == 1 and ck["time"] > t_cut + FENCE_S + 1.0]
        assert not late, late
        procs = c.job_procs(jid)
        assert list(procs.values()) == [task_tag(host_name, jid, 2)], procs
    finally:
        _sh("ip", "link", "set", host_veth, "up", check=False)
        mon.stop()
        run_mon.stop()
    assert not run_mon.violations, f"two attempts ran at once: {run_mon.violations[:3]}"


# ---------------------------------------------------------------------------
# the checkpoint to resume from is not visible on the node that would resume
# (last in the file: with -x a failure here does not hide the tests above)


@pytest.mark.parametrize("victim_index", [0, 1], ids=["first-node", "last-node"])
def test_invisible_checkpoint_is_not_restarted_from_zero(make_cluster, tmp_path,
                                                         victim_index):
    """(The job is placed on the first or the last node by name, so the pending
    reason cannot depend on the order in which the scheduler looks at nodes.)"""
    c, names = make_nodes(make_cluster)
    script = write_script(tmp_path, "ckpt_job.py", CKPT_JOB)
    ckpt = tmp_path / "ckpt-gone"
    victim = names[victim_index]
    survivor = other(names, victim)
    c.cli("node", "drain", survivor)
    wait_for(lambda: c.nodes()[survivor]["state"] == "draining", what="survivor draining")
    jid = c.submit(f"name: invisible-ckpt\n"
                   f"command: exec {PYTHON} -u {script} single\n"
                   f"workdir: {tmp_path}\n"
                   f"checkpoint:\n  dir: {ckpt}\n  pattern: \"checkpoint-*\"\n"
                   f"  complete_file: trainer_state.json\n"
                   f"  replicas: 0\n"  # (with replicas, the survivor would restore it)
                   f"restart:\n  max: 3\n  on: [node_lost]\n")
    c.wait_logs(jid, "wrote checkpoints")
    assert c.job(jid)["nodes"] == [victim]
    c.cli("node", "undrain", survivor)
    wait_for(lambda: c.nodes()[survivor]["state"] == "ready", what="survivor ready")
    wait_for(lambda: steps_of(c.job(jid)) == [10], what="checkpoint-10 to be reported")
    t_kill = c.kill_node(victim)
    shutil.rmtree(ckpt)  # well before node_timeout: the survivor cannot see it
    assert time.time() - t_kill < NT_S, "too slow to remove the checkpoint in time"

    def refused():
        j = c.job(jid)
        return j if any("not visible" in (e["reason"] or "") for e in j["events"]) else None

    j = wait_for(refused, what="an event saying the checkpoint is not visible")
    # a few scheduler passes (other traffic), then: still pending, never ran again
    for _ in range(3):
        c.cli("nodes")
    j = c.job(jid)
    what = f"{json.dumps(brief(j))}\n{events_text(j)}"
    ev = [e for e in j["events"] if "not visible" in (e["reason"] or "")]
    assert ev and all(e["node"] == survivor for e in ev), what
    assert str(ckpt / "checkpoint-10") in ev[0]["reason"], what
    assert j["state"] == "pending", what
    assert re.search(r"not visible|cannot run it", j["reason"] or ""), what
    assert sum(e["state"] == "running" for e in j["events"]) == 1, what
    assert not c.job_procs(jid), c.job_procs(jid)
    out = c.logs(jid)
    # attempt 1 alone ever ran (a later attempt from zero would print its line)
    assert re.findall(r"^attempt=(\d+) ", out, re.M) == ["1"], out


# ---------------------------------------------------------------------------
# a job reports its own checkpoint through the local agent socket


def test_checkpoint_reported_by_the_job_itself(make_cluster, tmp_path):
    c, names = make_nodes(make_cluster)
    bramble = BIN / "bramble"
    mine = tmp_path / "weights-7"
    script = write_script(tmp_path, "self_report.sh", f"""
if [ "$BRAMBLE_ATTEMPT" = 1 ]; then
    mkdir -p {mine}
    {bramble} checkpoint {mine} --step 7 || exit 3
    echo "reported sock=$BRAMBLE_AGENT_SOCK"
    exec sleep 1000
fi
echo "attempt=$BRAMBLE_ATTEMPT resume_from=[$BRAMBLE_RESUME_FROM] resume_step=[$BRAMBLE_RESUME_STEP]"
echo "attempt $BRAMBLE_ATTEMPT done"
""")
    jid = c.submit(f"name: self-report\ncommand: sh {script}\n"
                   f"restart:\n  max: 2\n  on: [node_lost]\n")
    out = c.wait_logs(jid, "reported sock=")
    wait_for(lambda: steps_of(c.job(jid)) == [7], what="the job's own report to count")
    j = c.job(jid)
    assert j["checkpoints"][0]["path"] == str(mine), j["checkpoints"]

    # a process outside every job is refused, even with the job's socket address
    sock = re.search(r"reported sock=(\S+)", out).group(1)
    env = dict(os.environ, BRAMBLE_AGENT_SOCK=sock)
    env.pop("BRAMBLE_TASK", None)
    r = subprocess.run([str(bramble), "checkpoint", str(tmp_path), "--step", "99"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r
    assert "not inside a running job" in r.stderr, r.stderr
    assert steps_of(c.job(jid)) == [7]

    victim = j["nodes"][0]
    c.kill_node(victim)
    j = c.wait_job(jid, ("completed", "failed", "cancelled"), timeout=60)
    assert (j["state"], j["attempt"]) == ("completed", 2), events_text(j)
    out = c.wait_logs(jid, "attempt 2 done")
    assert f"attempt=2 resume_from=[{mine}] resume_step=[7]" in out, out
