"""Gang jobs (ARCHITECTURE.md "The job spec": resources.nodes and tasks_per_node,
"What a job process sees", "Job life"; PROTOCOL.md section 6, job.run).

Real daemons, real job processes. The multi-host tests run each agent in its own
network namespace on a bridged LAN (netlan.py), the coordinator listening on the
bridge's address: MASTER_ADDR must then be an address that really reaches rank 0,
which the ranks prove by talking to each other over TCP, and the DDP acceptance
test trains a real PyTorch model across the namespaces, kills a node mid-run and
checks that the resumed gang ends with exactly the parameters of an uninterrupted
run.

Node names carry a random part (an agent kills processes tagged with its node name
on the host when it starts on its data dir, so names shared with another cluster
on the same machine would hit that cluster's jobs).
"""

import json
import os
import re
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import REPO, Fatal, free_port, pid_alive, wait_for
from netlan import PYTHON, make_lan  # noqa: F401  (make_lan is a fixture)

# Deadlines: the machine may have 2 loaded cores and ASan builds; torch imports
# alone can take many seconds there.
LONG = 120
VERY_LONG = 300

GPUS4 = "RTX 4090:24GiB,RTX 4090:24GiB,RTX 3090:24GiB,RTX 3090:24GiB"
GPUS2 = "RTX 4090:24GiB,RTX 3090:24GiB"

ENV_KEYS = ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "BRAMBLE_NODELIST", "MASTER_ADDR",
            "MASTER_PORT", "BRAMBLE_NODE_NAME", "BRAMBLE_JOB_ID", "BRAMBLE_ATTEMPT",
            "BRAMBLE_TASK", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
            "CUDA_VISIBLE_DEVICES", "BRAMBLE_RESUME_FROM", "GLOO_SOCKET_IFNAME",
            "NCCL_SOCKET_IFNAME")


# ---------------------------------------------------------------------------
# helpers


def tag():
    return uuid.uuid4().hex[:6]


def write(path, text):
    p = Path(path)
    p.write_text(text)
    return p


# A rank that prints its environment as one JSON line ("ENV {...}") and proves
# that MASTER_ADDR:MASTER_PORT reaches rank 0: rank 0 listens there, every other
# rank connects and exchanges a message with it.
RENDEZVOUS = r'''
import json, os, socket, sys, time
KEYS = %(keys)r
e = os.environ
info = {k: e.get(k) for k in KEYS}
info["pid"] = os.getpid()
info["netns"] = os.stat("/proc/self/ns/net").st_ino
print("ENV " + json.dumps(info, sort_keys=True), flush=True)
n, r = int(e["NNODES"]), int(e["NODE_RANK"])
addr, port = e["MASTER_ADDR"], int(e["MASTER_PORT"])
deadline = time.time() + 240


def line(conn):
    buf = b""
    while not buf.endswith(b"\n"):
        b = conn.recv(256)
        if not b:
            break
        buf += b
    return buf.decode().strip()


if r == 0:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(16)
    s.settimeout(240)
    print("LISTENING %%s:%%d" %% (addr, port), flush=True)
    peers = {}
    while len(peers) < n - 1:
        conn, peer = s.accept()
        with conn:
            conn.settimeout(60)
            words = line(conn).split()
            if len(words) != 3 or words[0] != "hello":
                continue
            peers[words[1]] = {"node": words[2], "from": peer[0]}
            conn.sendall(("welcome %%s from %%s\n" %% (words[1], e["BRAMBLE_NODE_NAME"])).encode())
    print("PEERS " + json.dumps(peers, sort_keys=True), flush=True)
else:
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=10)
            break
        except OSError as err:
            if time.time() > deadline:
                print("cannot reach %%s:%%d: %%s" %% (addr, port, err), flush=True)
                sys.exit(3)
            time.sleep(0.2)
    with conn:
        conn.settimeout(60)
        conn.sendall(("hello %%d %%s\n" %% (r, e["BRAMBLE_NODE_NAME"])).encode())
        reply = line(conn)
        print("TALKED " + json.dumps({"rank": r, "reply": reply,
                                      "local": conn.getsockname()[0]}), flush=True)
    if not reply.startswith("welcome %%d " %% r):
        sys.exit(4)
''' % {"keys": ENV_KEYS}

# A task that prints its environment and a few labelled lines, then exits 0.
SHOW_ENV = r'''
import json, os
KEYS = %(keys)r
info = {k: os.environ.get(k) for k in KEYS}
info["pid"] = os.getpid()
print("ENV " + json.dumps(info, sort_keys=True), flush=True)
for i in range(3):
    print("line %%d of task %%s" %% (i, os.environ.get("RANK", os.environ.get("NODE_RANK"))),
          flush=True)
''' % {"keys": ENV_KEYS}


def env_lines(text):
    """The ENV {...} objects in text (unlabelled or "R: " labelled lines)."""
    out = []
    for ln in text.splitlines():
        m = re.match(r"^(?:\d+: )?ENV (\{.*\})$", ln)
        if m:
            out.append(json.loads(m.group(1)))
    return out


def tagged_lines(text, word):
    out = []
    for ln in text.splitlines():
        m = re.match(rf"^(?:\d+: )?{word} (.*)$", ln)
        if m:
            out.append(m.group(1))
    return out


def spec(name, command, workdir, nodes=1, extra_resources="", extra=""):
    res = f"  nodes: {nodes}\n" + extra_resources
    return (f"name: {name}\nkind: train\ncommand: {command}\nworkdir: {workdir}\n"
            f"resources:\n{res}{extra}")


def job_reason(job):
    """The newest reason the coordinator gave for job (its `reason` field, else
    the newest event's)."""
    if job.get("reason"):
        return job["reason"]
    evs = job.get("events") or []
    return evs[-1].get("reason", "") if evs else ""


def ranks_env(c, jid, n):
    """{rank: ENV object} from `bramble logs ID --rank R` for R in 0..n-1."""
    out = {}
    for r in range(n):
        envs = env_lines(c.logs(jid, "--rank", r))
        assert len(envs) == 1, f"rank {r} printed {len(envs)} ENV lines: {envs}"
        out[r] = envs[0]
    return out


# ---------------------------------------------------------------------------
# 2. the gang's environment and MASTER_ADDR, across network namespaces


@pytest.mark.parametrize("n", [2, 3])
def test_gang_env_and_master_addr_across_namespaces(make_lan, make_cluster, tmp_path, n):
    # (make_lan first: the LAN goes only after the cluster has stopped)
    lan = make_lan(n)
    c = make_cluster(host=lan.host_ip)
    t = tag()
    names = lan.start_agents(c, {r: f"{r}-{t}" for r in lan.roles})  # role -> node
    role_of = {v: k for k, v in names.items()}

    script = write(tmp_path / "rendezvous.py", RENDEZVOUS)
    jid = c.submit(spec(f"gang{n}", f"{PYTHON} {script}", tmp_path, nodes=n))
    j = c.wait_job(jid, timeout=LONG)
    out = c.logs(jid)
    assert j["state"] == "completed", f"gang job ended {j['state']}:\n{out}"
    assert j["attempt"] == 1
    nodes = j["nodes"]
    assert len(nodes) == n and len(set(nodes)) == n, nodes
    assert set(nodes) == set(names.values()), (nodes, names)

    env = ranks_env(c, jid, n)
    # consistent gang size, ranks 0..n-1, one per node
    assert {e["NNODES"] for e in env.values()} == {str(n)}, env
    assert sorted(int(e["NODE_RANK"]) for e in env.values()) == list(range(n)), env
    for r, e in env.items():
        assert e["NODE_RANK"] == str(r), (r, e)
        assert e["NPROC_PER_NODE"] == "1", e
        # one process per node: it is RANK r of NNODES, for init_process_group("env://")
        assert (e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) == \
            (str(r), str(n), "0", "1"), e
        # the node list, in rank order, is the job's nodes; rank r runs on nodes[r]
        assert e["BRAMBLE_NODELIST"] == ",".join(nodes), (e["BRAMBLE_NODELIST"], nodes)
        assert e["BRAMBLE_NODE_NAME"] == nodes[r], (r, e["BRAMBLE_NODE_NAME"], nodes)
        # and really in the namespace its node name says
        role = role_of[e["BRAMBLE_NODE_NAME"]]
        # gloo and NCCL on the interface that holds the node's address, in its netns
        ifname = f"bgn{lan.tag}{lan.roles.index(role) + 1}"
        assert e["GLOO_SOCKET_IFNAME"] == ifname and e["NCCL_SOCKET_IFNAME"] == ifname, e
        assert e["netns"] == lan.ns_inode(role), \
            (f"rank {r} ({e['BRAMBLE_NODE_NAME']}) ran in netns inode {e['netns']}, "
             f"not in {lan.ns[role]} ({lan.ns_inode(role)})")
    # one master for everyone: rank 0's namespace address and a port
    masters = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in env.values()}
    assert len(masters) == 1, f"ranks disagree on the master: {masters}"
    (addr, port), = masters
    assert addr == lan.addr[role_of[nodes[0]]], \
        f"MASTER_ADDR {addr} is not rank 0's ({nodes[0]}) address {lan.addr[role_of[nodes[0]]]}"
    assert port and 0 < int(port) < 65536, port

    # and it reaches rank 0 for real: every other rank talked to it
    r0 = c.logs(jid, "--rank", 0)
    assert f"LISTENING {addr}:{port}" in r0, r0
    peers = json.loads(tagged_lines(r0, "PEERS")[0])
    assert sorted(peers) == [str(r) for r in range(1, n)], peers
    for r in range(1, n):
        role = role_of[nodes[r]]
        assert peers[str(r)] == {"node": nodes[r], "from": lan.addr[role]}, peers
        talked = json.loads(tagged_lines(c.logs(jid, "--rank", r), "TALKED")[0])
        assert talked["reply"] == f"welcome {r} from {nodes[0]}", talked
        assert talked["local"] == lan.addr[role], talked


# ---------------------------------------------------------------------------
# 3. a gang that does not fit waits, holding nothing


def test_gang_that_cannot_fit_waits_and_holds_nothing(make_cluster, tmp_path):
    c = make_cluster()
    t = tag()
    names = [f"g{t}-a", f"g{t}-b", f"g{t}-c"]
    c.add_agents(2, names=names[:2])
    cpus = min(n["cpus"] for n in c.nodes().values())

    script = write(tmp_path / "env.py", SHOW_ENV)
    gang = c.submit(spec("big-gang", f"{PYTHON} {script}", tmp_path, nodes=3,
                         extra_resources=f"  cpus: {cpus}\n"))
    want = "waiting: a gang of 3 nodes, and 2 fit"

    def waiting():
        j = c.job(gang)
        assert j["state"] == "pending", j["state"]
        return want in job_reason(j) or want in json.dumps(j)

    wait_for(waiting, what=f"gang {gang} pending with reason {want!r}")
    j = c.job(gang)
    assert j["state"] == "pending" and not j["nodes"] and j["attempt"] in (0, 1), j

    # a smaller job submitted later takes every CPU of both nodes: the waiting gang
    # holds nothing
    small = c.submit(spec("small-pair", f"{PYTHON} {script}", tmp_path, nodes=2,
                          extra_resources=f"  cpus: {cpus}\n"))
    js = c.wait_job(small, timeout=LONG)
    assert js["state"] == "completed", js
    assert sorted(js["nodes"]) == names[:2], js["nodes"]
    j = c.job(gang)
    assert j["state"] == "pending", f"the gang left pending without a third node: {j}"
    assert want in json.dumps(j), j

    # the missing node joins: the gang runs, on all three
    c.start_agent(names[2])
    c.wait_ready(names[2])
    j = c.wait_job(gang, timeout=LONG)
    assert j["state"] == "completed", j
    assert sorted(j["nodes"]) == names, j["nodes"]
    env = ranks_env(c, gang, 3)
    assert [e["BRAMBLE_NODE_NAME"] for e in env.values()] == j["nodes"]
    assert {e["NNODES"] for e in env.values()} == {"3"}


# ---------------------------------------------------------------------------
# 4. tasks_per_node: gpus


def check_task_env(env, nodes, per_node):
    world = len(nodes) * per_node
    assert sorted(env) == list(range(world)), sorted(env)
    for r, e in env.items():
        node_rank, local = divmod(r, per_node)
        assert e["RANK"] == str(r), e
        assert e["LOCAL_RANK"] == str(local), e
        assert e["WORLD_SIZE"] == str(world), e
        assert e["LOCAL_WORLD_SIZE"] == str(per_node), e
        assert e["NODE_RANK"] == str(node_rank), e
        assert e["NNODES"] == str(len(nodes)), e
        assert e["NPROC_PER_NODE"] == str(per_node), e
        assert e["BRAMBLE_NODE_NAME"] == nodes[node_rank], (e, nodes)
        assert e["BRAMBLE_NODELIST"] == ",".join(nodes), (e, nodes)
        cvd = e["CUDA_VISIBLE_DEVICES"]
        assert cvd and re.fullmatch(r"\d+", cvd), f"rank {r}: CUDA_VISIBLE_DEVICES={cvd!r}"
    masters = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in env.values()}
    assert len(masters) == 1 and all(masters.pop()), env
    # each task of a node has its own GPU
    for nr in range(len(nodes)):
        gpus = [env[nr * per_node + i]["CUDA_VISIBLE_DEVICES"] for i in range(per_node)]
        assert len(set(gpus)) == per_node, f"node rank {nr}: GPUs {gpus} shared"
    pids = {e["pid"] for e in env.values()}
    assert len(pids) == world, "tasks share a process"


def test_tasks_per_node_gpus_one_process_per_gpu(make_cluster, tmp_path):
    c = make_cluster()
    node = f"g{tag()}-gpu"
    c.add_agents(1, names=[node], extra=["--gpus", GPUS4])
    assert len(c.nodes()[node]["gpus"]) == 4, c.nodes()[node]

    script = write(tmp_path / "env.py", SHOW_ENV)
    jid = c.submit(spec("per-gpu", f"{PYTHON} {script}", tmp_path, nodes=1,
                        extra_resources="  gpus: 4\n  tasks_per_node: gpus\n"))
    j = c.wait_job(jid, timeout=LONG)
    assert j["state"] == "completed", (j, c.logs(jid, stream="both"))
    assert j["nodes"] == [node], j
    env = ranks_env(c, jid, 4)
    check_task_env(env, [node], 4)
    assert sorted(e["CUDA_VISIBLE_DEVICES"] for e in env.values()) == ["0", "1", "2", "3"]

    # --rank 2: only rank 2's lines, unlabelled
    r2 = c.logs(jid, "--rank", 2)
    lines = [ln for ln in r2.splitlines() if ln.strip()]
    assert lines, r2
    assert not any(re.match(r"^\d+: ", ln) for ln in lines), r2
    assert [ln for ln in lines if ln.startswith("line ")] == \
        [f"line {i} of task 2" for i in range(3)], r2
    assert env_lines(r2)[0]["RANK"] == "2"
    # all ranks: every line labelled "R: " with its task's rank
    both = c.logs(jid)
    lines = [ln for ln in both.splitlines() if ln.strip()]
    assert len(lines) == 4 * 4, both
    for ln in lines:
        m = re.match(r"^(\d+): (.*)$", ln)
        assert m, f"unlabelled line {ln!r} in:\n{both}"
        rank, text = int(m.group(1)), m.group(2)
        if text.startswith("ENV "):
            assert json.loads(text[4:])["RANK"] == str(rank), ln
        else:
            assert text.endswith(f"of task {rank}"), ln


def test_tasks_per_node_gpus_across_two_nodes(make_cluster, tmp_path):
    c = make_cluster()
    t = tag()
    names = c.add_agents(2, names=[f"g{t}-a", f"g{t}-b"], extra=["--gpus", GPUS2])
    script = write(tmp_path / "env.py", SHOW_ENV)
    jid = c.submit(spec("per-gpu-2", f"{PYTHON} {script}", tmp_path, nodes=2,
                        extra_resources="  gpus: 2\n  tasks_per_node: gpus\n"))
    j = c.wait_job(jid, timeout=LONG)
    assert j["state"] == "completed", (j, c.logs(jid, stream="both"))
    assert sorted(j["nodes"]) == sorted(names), j
    env = ranks_env(c, jid, 4)
    check_task_env(env, j["nodes"], 2)


# ---------------------------------------------------------------------------
# 5. a failing rank stops the gang; restart; cancel


# Each task writes its pid to OUT/pid-<attempt>-<rank>. Attempt 1: rank 1 waits
# until every other rank has written its pid, then fails; the others sleep.
# Later attempts: everyone exits 0 at once.
FAIL_RANK1 = r'''
import os, sys, time
out = sys.argv[1]
e = os.environ
att, r, n = int(e["BRAMBLE_ATTEMPT"]), int(e["NODE_RANK"]), int(e["NNODES"])
with open(os.path.join(out, "pid-%d-%d.tmp" % (att, r)), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(out, "pid-%d-%d.tmp" % (att, r)),
          os.path.join(out, "pid-%d-%d" % (att, r)))
print("attempt %d rank %d pid %d" % (att, r, os.getpid()), flush=True)
if att > 1:
    sys.exit(0)
if r == 1:
    deadline = time.time() + 600
    while not all(os.path.exists(os.path.join(out, "pid-1-%d" % i)) for i in range(n)):
        if time.time() > deadline:
            sys.exit(9)
        time.sleep(0.1)
    print("rank 1 fails now", flush=True)
    sys.exit(7)
time.sleep(600)
'''


def read_pid(path):
    return int(Path(path).read_text())


def test_failing_rank_stops_gang_and_restarts_it(make_cluster, tmp_path):
    c = make_cluster()
    t = tag()
    names = c.add_agents(3, names=[f"g{t}-a", f"g{t}-b", f"g{t}-c"])
    out = tmp_path / "out"
    out.mkdir()
    script = write(tmp_path / "fail1.py", FAIL_RANK1)
    jid = c.submit(spec("fail-rank", f"{PYTHON} {script} {out}", tmp_path, nodes=3,
                        extra="restart:\n  max: 2\n  on: [nonzero_exit]\n"))

    # every rank of attempt 1 started; rank 1 fails
    wait_for(lambda: all((out / f"pid-1-{r}").exists() for r in range(3)), LONG,
             "the three ranks of attempt 1 to start")
    first = {r: read_pid(out / f"pid-1-{r}") for r in range(3)}
    # the others are stopped (their processes gone) and the gang restarts whole
    wait_for(lambda: not any(pid_alive(first[r]) for r in (0, 2)), LONG,
             "ranks 0 and 2 of attempt 1 to be stopped after rank 1 failed")
    j = c.wait_job(jid, timeout=LONG)
    assert j["state"] == "completed", j
    assert j["attempt"] == 2, j
    assert all((out / f"pid-2-{r}").exists() for r in range(3)), sorted(os.listdir(out))
    assert sorted(j["nodes"]) == sorted(names), j
    assert not any(pid_alive(p) for p in first.values())
    logs = c.logs(jid)
    assert "rank 1 fails now" in logs, logs
    for r in range(3):
        assert f"attempt 2 rank {r} pid" in logs, logs
    # the events tell why: back to pending after rank 1's exit
    requeues = [e for e in j["events"][1:] if e["state"] == "pending"]
    assert len(requeues) == 1, j["events"]
    assert "rank 1" in requeues[0]["reason"] and "7" in requeues[0]["reason"], requeues
    assert not c.job_procs(jid), c.job_procs(jid)


CANCEL_ME = r'''
import os, subprocess, sys, time
out = sys.argv[1]
e = os.environ
r = int(e["NODE_RANK"])
child = subprocess.Popen(["sleep", "600"])
with open(os.path.join(out, "pids-%d.tmp" % r), "w") as f:
    f.write("%d %d" % (os.getpid(), child.pid))
os.rename(os.path.join(out, "pids-%d.tmp" % r), os.path.join(out, "pids-%d" % r))
print("rank %d running" % r, flush=True)
time.sleep(600)
'''


def test_cancel_stops_every_rank(make_cluster, tmp_path):
    c = make_cluster()
    t = tag()
    c.add_agents(3, names=[f"g{t}-a", f"g{t}-b", f"g{t}-c"])
    out = tmp_path / "out"
    out.mkdir()
    script = write(tmp_path / "cancel.py", CANCEL_ME)
    jid = c.submit(spec("cancel-gang", f"{PYTHON} {script} {out}", tmp_path, nodes=3))
    c.wait_job(jid, "running", timeout=LONG)
    wait_for(lambda: all((out / f"pids-{r}").exists() for r in range(3)), LONG,
             "the three ranks to start")
    pids = [int(p) for r in range(3) for p in (out / f"pids-{r}").read_text().split()]
    assert all(pid_alive(p) for p in pids), pids
    assert len(c.job_procs(jid)) >= 6, c.job_procs(jid)
    # every node of the gang counts the job among its own
    on = {n["name"]: n["jobs"] for n in c.cli_json("nodes")}
    assert all(on[n] == [int(jid)] for n in (f"g{t}-a", f"g{t}-b", f"g{t}-c")), on
    c.cli("cancel", jid)
    j = c.wait_job(jid, timeout=LONG)
    assert j["state"] == "cancelled", j
    wait_for(lambda: not any(pid_alive(p) for p in pids) and not c.job_procs(jid), LONG,
             "every process of every rank to be gone after cancel")


# ---------------------------------------------------------------------------
# 6. acceptance: a real PyTorch DDP gang across namespaces survives a node loss


def have_torch():
    r = subprocess.run([PYTHON, "-c", "import torch, torch.distributed as d; "
                        "assert d.is_available()"],
                       capture_output=True, text=True, timeout=300)
    return r.returncode == 0, r.stderr.strip().splitlines()[-1:] if r.stderr else ""


DDP_STEPS, DDP_EVERY, DDP_STEP_TIME = 40, 4, 0.3


def reference_run(tmp_path):
    """train.py with 2 processes on loopback, never interrupted: its final JSON."""
    ref = tmp_path / "reference"
    ref.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("BRAMBLE_") and k not in ("RANK", "WORLD_SIZE")}
    env.update(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               GLOO_SOCKET_IFNAME="lo", BRAMBLE_CHECKPOINT_DIR=str(ref / "ckpt"), OMP_NUM_THREADS="1")
    procs = []
    for r in range(2):
        argv = [PYTHON, str(REPO / "examples/ddp/train.py"), "--steps", str(DDP_STEPS),
                "--every", str(DDP_EVERY), "--step-time", "0"]
        if r == 0:
            argv += ["--out", str(ref / "final.json")]
        log = open(ref / f"rank{r}.log", "wb")
        procs.append((subprocess.Popen(argv, env={**env, "RANK": str(r)}, cwd=REPO,
                                       stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True), log))
    try:
        wait_for(lambda: all(p.poll() is not None for p, _ in procs), VERY_LONG,
                 "the reference DDP run to finish")
    finally:
        for p, log in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
            log.close()
    for r, (p, _) in enumerate(procs):
        assert p.returncode == 0, \
            f"reference rank {r} exited {p.returncode}:\n{(ref / f'rank{r}.log').read_text()}"
    return json.loads((ref / "final.json").read_text())


def test_ddp_gang_survives_node_loss_bit_identical(make_lan, make_cluster, tmp_path):
    ok, why = have_torch()
    if not ok:
        pytest.skip(f"PyTorch is not usable from {PYTHON} (`import torch` fails: {why})")
    expected = reference_run(tmp_path)
    assert expected["step"] == DDP_STEPS

    lan = make_lan(3)
    c = make_cluster(host=lan.host_ip, heartbeat="250ms", node_timeout="4s")
    t = tag()
    names = lan.start_agents(c, {r: f"{r}-{t}" for r in lan.roles})
    role_of = {v: k for k, v in names.items()}

    ckpt = tmp_path / "ckpt"
    final = tmp_path / "final.json"
    # the first attempt steps slowly, so that the node is killed mid-run; a later
    # one (what it computes does not depend on it) runs its steps at full speed
    step_time = f'$([ "$BRAMBLE_ATTEMPT" = 1 ] && echo {DDP_STEP_TIME} || echo 0)'
    command = (f"{PYTHON} examples/ddp/train.py --steps {DDP_STEPS} --every {DDP_EVERY} "
               f"--step-time {step_time} --out {final}")
    spec_path = REPO / "examples" / "ddp" / "ddp.yaml"
    out = c.cli_json("submit", spec_path, "--set", f"workdir={REPO}",
                     "--set", f"checkpoint.dir={ckpt}",
                     "--set", f"command={json.dumps(command)}",
                     "--set", "env.OMP_NUM_THREADS=1")
    jid = out["id"]

    # running, and rank 0 reported a checkpoint
    def checkpointed():
        c.fatal_if_dead()
        j = c.job(jid)
        if j["state"] in ("completed", "failed", "cancelled"):
            raise Fatal(f"job ended before a node could be killed: {j['state']}\n"
                        f"{c.logs(jid, stream='both')}")
        steps = [cp["step"] for cp in j["checkpoints"] or []]
        return j if j["state"] == "running" and steps and max(steps) >= 10 else None

    # killed at step 10 or later: a real resume, not a restart from the first save
    j = wait_for(checkpointed, VERY_LONG, f"job {jid} running with a checkpoint of step 10+")
    assert j["attempt"] == 1 and len(j["nodes"]) == 2, j
    first_nodes = list(j["nodes"])
    # kill the node of rank 0 (the master): the gang must move its master too
    victim = first_nodes[0]
    alive = sorted(n for n in names.values() if n != victim)
    c.kill_node(victim)
    # (kill_node stops the agent, by its pid, and the node's job processes, the
    # python ranks in its namespace, found by their BRAMBLE_TASK tag)

    # the gang goes back to pending and restarts as attempt 2. (The surviving rank
    # sees its peer vanish and exits non-zero, usually before the node's loss is
    # detected; its failure is held until the loss is, so the restart is node_lost,
    # the only reason ddp.yaml restarts on, and never goes to the dead node.)
    def requeued():
        j = c.job(jid)
        return j["attempt"] >= 2 and any(i > 0 and e["state"] == "pending"
                                         for i, e in enumerate(j["events"]))

    wait_for(requeued, LONG, f"job {jid} back to pending and requeued after {victim} died")
    wait_for(lambda: c.nodes()[victim]["state"] == "lost", LONG, f"{victim} to be lost")
    j = c.wait_job(jid, timeout=VERY_LONG)
    logs = c.logs(jid)
    assert j["state"] == "completed", f"{json.dumps(j, indent=1)}\n{logs}"
    last = j["attempt"]
    assert last == 2, f"attempt {last}: {json.dumps(j['events'], indent=1)}"
    assert sorted(j["nodes"]) == alive, (j["nodes"], victim)
    restarts = [e["reason"] for e in j["events"] if "restarting as attempt" in
                (e.get("reason") or "")]
    assert len(restarts) == 1 and restarts[0].endswith("(node_lost)"), restarts
    placed = [e["reason"] for e in j["events"] if "placed on" in (e.get("reason") or "")]
    assert len(placed) == 2 and victim not in placed[1], placed
    states = [e["state"] for e in j["events"]]
    assert states.count("pending") >= 2, j["events"]

    # no process of the job is left, on any node, of any attempt
    assert not c.job_procs(jid), c.job_procs(jid)

    # the last attempt resumed from the newest complete checkpoint that rank 0
    # reported before it started
    cps = j["checkpoints"]
    before = [cp for cp in cps if cp["attempt"] < last]
    assert before and all(cp["attempt"] >= 1 for cp in cps), cps
    newest = max(before, key=lambda cp: cp["step"])
    assert 10 <= newest["step"] < DDP_STEPS, f"not killed mid-run at step 10+: {newest}"
    assert Path(newest["path"]) == ckpt / f"checkpoint-{newest['step']}", newest
    assert (Path(newest["path"]) / "trainer_state.json").exists(), newest
    for r in range(2):
        starts = re.findall(r"(resumed from \d+|starting fresh)", c.logs(jid, "--rank", r))
        assert starts and starts[0] == "starting fresh", (r, starts)
        assert starts[-1] == f"resumed from {newest['step']}", \
            f"rank {r} of attempt {last} did not resume from step {newest['step']}: {starts}"
    resumes = [e for e in j["events"]
               if f"attempt {last} resumes from {newest['path']}" in (e.get("reason") or "")]
    assert resumes, f"no event says attempt {last} resumes from {newest['path']}: {j['events']}"

    # the new master is the new rank 0's namespace address
    r0 = c.logs(jid, "--rank", 0)
    masters = re.findall(r"master (\S+):(\d+)", r0)
    assert masters and masters[-1][0] == lan.addr[role_of[j["nodes"][0]]], (masters, j["nodes"])

    # and the result is exactly that of a run never interrupted
    got = json.loads(final.read_text())
    assert got == expected, "the resumed DDP run ended with other parameters than the reference"
    finals = tagged_lines(r0, "final")
    assert len(finals) == 1 and json.loads(finals[0]) == expected, finals
