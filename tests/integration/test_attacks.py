"""The attack suite: each test plays an attacker (another key, process or uid)
against a real coordinator and real agents, and checks that the cluster holds.
The node-side attacks (job socket, uids, environment) and the fencing attacks
(noisy jobs, a crashed or paused agent) are in test_attacks_node.py and
test_attacks_fence.py."""

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import time

import zmq

from conftest import (FLAG_DATA, KIND_EVENT, free_port, header, proc_state, read_yaml_flat,
                      wait_for)


def _user(c, name):
    """A user credential (path) and its keys."""
    cred = c.root / f"{name}.credential"
    c.cli("user", "add", name, "--out", str(cred))
    y = read_yaml_flat(cred)
    return cred, y["public_key"], y["secret_key"], y["server_public_key"]


def _admin_ping_time(c):
    t = time.monotonic()
    c.cli_json("nodes")
    return time.monotonic() - t


def test_flood_that_never_reads_cannot_stall_the_coordinator(make_cluster):
    """A user that sends requests as fast as it can and never reads the replies
    (its queue fills) must not block the coordinator: admin requests answer,
    agents are heard, no job is frozen, and SIGTERM still stops it."""
    c = make_cluster(heartbeat="200ms", node_timeout="2s")
    c.add_agents(1)
    jid = c.submit("name: steady\ncommand: sleep 1000\n")
    c.wait_job(jid, "running")
    _, pub, sec, server = _user(c, "mallory")
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, 1)       # reads nothing, and lets little pile up here
    s.setsockopt(zmq.RCVBUF, 4096)
    s.setsockopt(zmq.SNDHWM, 100000)
    s.curve_serverkey, s.curve_publickey, s.curve_secretkey = (
        server.encode(), pub.encode(), sec.encode())
    s.connect(c.endpoint)
    body = json.dumps({"all": True}).encode()
    admin = c.raw_client()
    try:
        # flood until the coordinator counts a reply it dropped: the replies fill
        # the kernel's socket buffers first (megabytes on loopback), which on a
        # loaded machine takes a while; meanwhile the admin is answered at once
        sent = dropped = 0
        deadline = time.monotonic() + 120
        next_check = time.monotonic() + 1
        while not dropped:
            now = time.monotonic()
            assert now < deadline, f"no reply dropped after {sent} requests"
            try:
                s.send_multipart([header("job.list", sent + 1), body], zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                time.sleep(0.001)
            if now >= next_check:  # once a second: is it dropped yet, and quick?
                next_check = now + 1
                dropped = admin.request("ping", timeout=2)[1].get("sends_dropped", 0)
                assert time.monotonic() - now < 2.0
        assert sent > 5000, sent
        assert _admin_ping_time(c) < 2.0
        j = c.job(jid)
        assert j["state"] == "running" and j["attempt"] == 1, j
        for pid in c.job_procs(jid):
            assert proc_state(pid) != "T", f"job process {pid} was frozen"
        assert c.nodes()["node-1"]["state"] == "ready"
        assert "dropped" in c.coordinator.output()
    finally:
        admin.close()
        s.close(0)
        ctx.term()
    c.coordinator.expected_exit = True
    c.coordinator.send_signal(15)
    assert c.coordinator.wait_exit() == 0


def test_unknown_key_is_refused_at_the_handshake(make_cluster):
    """A stranger's key (no user, node or live token behind it) never gets a
    message through: no reply at all, while a flood from it leaves the admin's
    requests answered and the running job untouched."""
    c = make_cluster(heartbeat="200ms", node_timeout="2s")
    c.add_agents(1)
    jid = c.submit("name: steady\ncommand: sleep 1000\n")
    c.wait_job(jid, "running")
    pub, sec = (k.decode() for k in zmq.curve_keypair())
    stranger = c.raw_client(pub, sec)
    try:
        stranger.sock.setsockopt(zmq.SNDHWM, 100000)
        body = json.dumps({}).encode()
        for i in range(20000):
            try:
                stranger.sock.send_multipart([header("ping", i + 1), body], zmq.NOBLOCK)
            except zmq.Again:
                break
        assert stranger.recv(timeout=1.0) is None, "a stranger's request was answered"
        for _ in range(3):
            assert _admin_ping_time(c) < 2.0
        for pid in c.job_procs(jid):
            assert proc_state(pid) != "T", f"job process {pid} was frozen"
        assert c.job(jid)["attempt"] == 1
    finally:
        stranger.close()


def test_new_user_under_old_name_sees_nothing_of_the_old(cluster):
    """Ownership is by a user id that is never reused: alice removed and a new
    alice added sees none of the old alice's jobs, logs or events; the old
    alice's running job was cancelled on removal (or handed to the admin)."""
    c = cluster
    c.add_agents(1)
    old, *_ = _user(c, "alice")
    spec = c.write_spec("name: secret\ncommand: echo TOKEN=hunter2; sleep 1000\n")
    _, out, _ = c.cli("submit", spec, credential=old)
    kept_spec = c.write_spec("name: kept\ncommand: sleep 1000\n", name="kept.yaml")
    _, out2, _ = c.cli("submit", kept_spec, credential=old)
    secret, kept = int(out.strip()), int(out2.strip())
    c.wait_job(secret, "running")
    c.wait_logs(secret, "hunter2")
    # the removal hands her jobs to the admin when asked, else cancels them
    rc, out, _ = c.cli("user", "remove", "alice", "--jobs", "admin")
    assert "2 active job(s) handed to the admin" in out, out
    assert c.job(kept)["owner"] == "admin"
    c.cli("cancel", kept)

    new, *_ = _user(c, "alice")
    rc, out, err = c.cli("jobs", "--all", "--json", credential=new)
    assert json.loads(out) == [], out
    for args in (["job", "show", str(secret)], ["logs", str(secret)],
                 ["cancel", str(secret)]):
        rc, out, err = c.cli(*args, credential=new, check=False)
        assert rc == 1 and "hunter2" not in out, (args, out, err)
    _, out, _ = c.cli("events", "--json", credential=new)
    assert all(json.loads(l)["job"] is None for l in out.splitlines() if l.strip()), out
    # the admin still has everything
    assert c.job(secret)["state"] == "running"

    # removing the new alice cancels her running job
    mine_spec = c.write_spec("name: hers\ncommand: sleep 1000\n", name="hers.yaml")
    _, out, _ = c.cli("submit", mine_spec, credential=new)
    hers = int(out.strip())
    c.wait_job(hers, "running")
    _, out, _ = c.cli("user", "remove", "alice")
    assert "1 active job(s) cancelled" in out, out
    assert c.wait_job(hers)["state"] == "cancelled"


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_store_files_are_0600(make_cluster):
    """The store holds every key and token: its files are 0600 whatever the
    umask, and a store left 0644 by an older brambled is tightened at start."""
    old = os.umask(0o022)
    try:
        c = make_cluster()
        c.submit("name: one\ncommand: \"true\"\n")
        files = [c.data / n for n in ("bramble.db", "bramble.db-wal", "bramble.db-shm")]
        wait_for(lambda: all(f.exists() for f in files), what="the store's files")
        for f in files:
            assert _mode(f) == 0o600, (f, oct(_mode(f)))
        c.coordinator.kill(signal.SIGTERM)
        for f in files:
            if f.exists():
                os.chmod(f, 0o644)
        c.start_coordinator()
        for f in files:
            if f.exists():
                assert _mode(f) == 0o600, (f, oct(_mode(f)))
    finally:
        os.umask(old)


def test_second_coordinator_on_same_data_dir_is_refused(cluster2):
    c = cluster2
    jid = c.submit("name: steady\ncommand: sleep 1000\n")
    c.wait_job(jid, "running")
    second = c.spawn("brambled-second", [c.bin("brambled"), "--data-dir", str(c.data),
                                         "--listen", f"tcp://127.0.0.1:{free_port()}"])
    rc = second.wait_exit()
    out = second.output()
    assert rc != 0, out
    assert (f"pid {c.coordinator.pid} holds {c.data}/brambled.lock: another brambled "
            "runs on this data dir") in out, out
    # the first one noticed nothing: nodes ready, the job running on its first attempt
    assert {n["state"] for n in c.nodes().values()} == {"ready"}
    assert c.job(jid)["attempt"] == 1
    c.assert_alive()


def test_store_that_lost_commits_is_refused(make_cluster):
    """Acknowledged jobs must not vanish silently: a store whose WAL was deleted,
    or which was emptied or removed, is refused at start with words naming it."""
    c = make_cluster()
    ids = [c.submit(f"name: j{i}\ncommand: \"true\"\n") for i in range(5)]
    # SIGKILL: the WAL is not folded into bramble.db
    c.coordinator.kill(signal.SIGKILL)
    wal = c.data / "bramble.db-wal"
    assert wal.exists() and wal.stat().st_size > 0
    saved = {n: (c.data / n).read_bytes() for n in ("bramble.db", "bramble.db-wal")}
    wal.unlink()
    (c.data / "bramble.db-shm").unlink(missing_ok=True)
    p = c.start_coordinator(wait=False)
    assert p.wait_exit() != 0
    out = p.output()
    assert "behind its mark (store.mark): 0 of 5 jobs" in out, out
    assert "bramble.db-wal deleted" in out, out

    (c.data / "bramble.db").write_bytes(b"")
    p = c.start_coordinator(wait=False)
    assert p.wait_exit() != 0 and "bramble.db is empty" in p.output(), p.output()
    (c.data / "bramble.db").unlink()
    p = c.start_coordinator(wait=False)
    assert p.wait_exit() != 0 and "bramble.db is missing" in p.output(), p.output()

    # put the files back: every acknowledged job is there, and new ids follow them
    for n, data in saved.items():
        (c.data / n).write_bytes(data)
    c.start_coordinator()
    assert [j["id"] for j in c.jobs()] == ids
    assert c.submit("name: after\ncommand: \"true\"\n") == max(ids) + 1


@contextlib.contextmanager
def _small_disk(make_cluster):
    """A cluster whose coordinator's data dir is a tmpfs of 6 MiB (started, its
    coordinator running), unmounted after."""
    c = make_cluster(start=False)
    saved = c.root / "data-copy"
    shutil.copytree(c.data, saved)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", str(c.data)],
                   check=True)
    try:
        for f in saved.iterdir():
            shutil.copy2(f, c.data / f.name)
        c.start_coordinator()
        yield c
    finally:
        if c.coordinator and c.coordinator.alive():
            c.coordinator.kill(signal.SIGTERM)
        subprocess.run(["umount", "-l", str(c.data)], check=False)


def _fill(path):
    """Write zeros to path until the disk under it is full; the file."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return path


def test_full_disk_gives_refusals_and_service_resumes(make_cluster):
    """With the coordinator's disk full, requests that would change the store are
    refused with "store full" (not a timeout), nothing half-written stays, the
    coordinator keeps running, and it takes requests again once space is freed."""
    with _small_disk(make_cluster) as c:
        first = c.submit("name: before\ncommand: \"true\"\n")
        filler = _fill(c.data / "filler")
        big = "x" * 60000  # each env entry under the kernel's limit for one
        refused = 0
        for i in range(5):
            spec = c.write_spec(f"name: full-{i}\ncommand: \"true\"\n"
                                f"env: {{A: {big}, B: {big}, C: {big}}}\n", name=f"f{i}.yaml")
            rc, out, err = c.cli("submit", spec, check=False)
            if rc != 0:
                assert "store full" in err, err
                refused += 1
        assert refused == 5, f"only {refused} of 5 submits refused on a full disk"
        c.assert_alive()
        assert [j["id"] for j in c.jobs()] == [first]
        # the log never claims a job that was not stored
        assert c.coordinator.output().count("submitted by admin") == 1
        filler.unlink()
        after = c.submit("name: after\ncommand: \"true\"\n")
        names = [j["name"] for j in c.jobs()]
        assert "before" in names and "after" in names, names
        assert after > first
        c.assert_alive()


FLOOD = 8000000  # bytes the flooding job prints: more than _small_disk holds


def _torn(line, whole):
    """Whether line is the start of whole followed by its end (either may be empty):
    what is left of lines of whole where the bytes between were dropped."""
    return any(whole.startswith(line[:k]) and whole.endswith(line[k:])
               for k in range(len(line) + 1))


def test_output_shipped_while_the_disk_is_full_is_kept(make_cluster):
    """Output a job prints while the coordinator's disk is full is kept by its agent
    and stored once there is room: nothing of a running job's output and nothing of
    a job that ended meanwhile is lost, and the lines stay in order. What the agent's
    bounded buffer cannot hold is counted (log_dropped), with an event."""
    with _small_disk(make_cluster) as c:
        flags = c.root / "flags"
        flags.mkdir()
        f1, f2 = flags / "full", flags / "room"
        wait = "while [ ! -e {0} ]; do sleep 0.05; done"
        c.add_agents(1)
        steady = c.submit(
            "name: steady\nresources: {cpus: 0}\ncommand: \"for i in 1 2 3 4; do echo A-$i; "
            f"done; {wait.format(f1)}; for i in 5 6 7 8; do echo A-$i; done; "
            f"touch {flags}/a-mid; {wait.format(f2)}; "
            "for i in 9 10 11 12; do echo A-$i; done\"\n")
        ended = c.submit(
            f"name: ends-meanwhile\nresources: {{cpus: 0}}\ncommand: \"{wait.format(f1)}; "
            f"for i in 1 2 3 4; do echo B-$i; done; touch {flags}/b-done\"\n")
        flood = c.submit(
            f"name: floods-meanwhile\nresources: {{cpus: 0}}\ncommand: \"{wait.format(f1)}; "
            f"yes C-flood | head -c {FLOOD}; echo C-END; touch {flags}/c-done\"\n")
        for j in (steady, ended, flood):
            c.wait_job(j, "running")
        c.wait_logs(steady, "A-4")
        filler = _fill(c.data / "filler")
        f1.touch()  # the jobs print while nothing can be stored
        agent = c.agents["node-1"]
        wait_for(lambda: all((flags / n).exists() for n in ("a-mid", "b-done", "c-done")),
                 what="the jobs to print while the disk is full")
        wait_for(lambda: "output not stored by the coordinator" in agent.output(),
                 what="the agent to be told its output was not stored")
        filler.unlink()
        j = c.wait_job(ended)
        assert j["state"] == "completed", j
        f2.touch()
        assert c.wait_job(steady)["state"] == "completed"
        assert c.wait_job(flood)["state"] == "completed"
        c.assert_alive()
        # everything of the steady job and of the one that ended meanwhile, in order
        assert c.logs(steady).split() == [f"A-{i}" for i in range(1, 13)], c.logs(steady)
        assert c.logs(ended).split() == [f"B-{i}" for i in range(1, 5)], c.logs(ended)
        for jid in (steady, ended):
            assert c.job(jid).get("log_lost", 0) == 0, c.job(jid)
            _, out, _ = c.cli("job", "show", jid)
            assert "dropped" not in out, out
        # the flood did not fit the agent's 1 MiB, nor the coordinator's 6 MiB disk:
        # its newest part is there, in order, the rest counted (what was stored and
        # what was dropped make what it wrote), and an event says so. (How much was
        # stored depends on the room SQLite's write-ahead log had kept when the disk
        # filled, up to a few MiB, so it is not bounded here: the flood is larger than
        # the whole disk, so that some of it is dropped however much that was. What
        # was stored before the disk filled comes first, then what the agent kept: a
        # line where bytes were dropped is torn, the start of one line and the end of
        # another, as the pipe's reads fell.)
        out = c.logs(flood)
        assert out.endswith("C-END\n"), out[-200:]
        lines = out.splitlines()
        torn = [line for line in lines[:-1] if line != "C-flood"]
        assert all(_torn(line, "C-flood") for line in torn), torn
        assert len(torn) <= 8, torn  # (one where each drop began)
        printed = FLOOD + len("C-END\n")
        assert len(out) < printed, len(out)
        wait_for(lambda: len(out) + c.job(flood).get("log_lost", 0) == printed, 30,
                 f"stored ({len(out)}) and dropped bytes to make the {printed} printed")
        _, show, _ = c.cli("job", "show", flood)
        assert "dropped on its node" in show, show
        events = [e["reason"] for e in c.job(flood)["events"]]
        assert any("output dropped on node-1" in t for t in events), events
        assert "the coordinator stores output again" in agent.output()


def test_rogue_node_cannot_write_into_other_nodes_attempts(make_cluster):
    """A node may ship output, starts and exits only for attempts it was given:
    node-2, which never ran the job, gets its log chunks dropped (refused, when sent
    as requests) and its start and exit refused, for the current attempt and for an
    older one."""
    c = make_cluster()
    c.add_agents(1, extra=("--label", "role=worker"), names=["node-1"])
    c.add_agents(1, names=["node-2"])
    jid = c.submit("name: pinned\ncommand: test \"$BRAMBLE_ATTEMPT\" -ge 2 || exit 1; "
                   "echo real-output; sleep 1000\nresources:\n  labels: {role: worker}\n"
                   "restart: {max: 3, on: [nonzero_exit]}\n")
    wait_for(lambda: c.job(jid)["attempt"] == 2 and c.job(jid)["state"] == "running",
             what="attempt 2 to run on node-1")
    c.wait_logs(jid, "real-output")
    events_before = len(c.job(jid)["events"])
    y = read_yaml_flat(c.agent_dir("node-2") / "credential")
    rogue = c.raw_client(y["public_key"], y["secret_key"])
    try:
        for attempt in (1, 2):
            body = {"job": jid, "attempt": attempt, "rank": 0, "stream": 1, "seq": 99}
            rogue.send([header("job.log", 7, kind=KIND_EVENT, flags=FLAG_DATA),
                        json.dumps(body).encode(), b"FORGED-OUTPUT\n"])
            # as a request (what agents send now), it is refused, naming why
            _, r, _ = rogue.request("job.log", dict(body, seq=100), data=b"FORGED-OUTPUT\n")
            assert r.get("errnum") and "never ran on node-2" in r.get("error", ""), r
            _, r, _ = rogue.request("job.exited", {"job": jid, "attempt": attempt,
                                                   "exit_code": 0, "signal": None,
                                                   "reason": ""})
            assert r.get("errnum") and "never ran on node-2" in r.get("error", ""), r
            # its start is refused the same way, not answered {}
            _, r, _ = rogue.request("job.started", {"job": jid, "attempt": attempt,
                                                    "pid": 4242, "port": 1234})
            assert r.get("errnum") and "never ran on node-2" in r.get("error", ""), r
    finally:
        rogue.close()
    # the real node's output is there, the forged one is not, and nothing changed
    c.wait_logs(jid, "real-output")
    assert "FORGED" not in c.logs(jid)
    j = c.job(jid)
    assert j["state"] == "running" and j["attempt"] == 2, j
    assert len(j["events"]) == events_before, j["events"][events_before:]
    assert "not its attempt" in c.coordinator.output()


def _store_bytes(c):
    return sum((c.data / n).stat().st_size for n in ("bramble.db", "bramble.db-wal")
               if (c.data / n).exists())


def test_a_gigabyte_of_output_keeps_the_store_under_its_cap(make_cluster):
    """A job printing 1 GB grows the store by about the per-job cap, not by 1 GB:
    the newest output is kept, and what was dropped is counted and shown."""
    cap = 8 << 20
    c = make_cluster()
    c.coordinator.kill(signal.SIGTERM)
    c.start_coordinator(extra=("--log-max-per-job", "8MiB"))
    c.add_agents(1)
    before = _store_bytes(c)
    jid = c.submit("name: chatty\ncommand: head -c 1000000000 /dev/zero | tr '\\\\0' x; "
                   "echo; echo THE-END\n")
    j = c.wait_job(jid, timeout=300)
    assert j["state"] == "completed", j
    c.wait_logs(jid, "THE-END")
    j = c.job(jid)
    assert j["log_bytes"] <= cap, j["log_bytes"]
    assert j["log_dropped"] + j.get("log_lost", 0) >= 1000000000 - cap, j
    grown = _store_bytes(c) - before
    assert grown < 3 * cap, f"the store grew by {grown} bytes"
    _, out, _ = c.cli("job", "show", str(jid))
    assert "dropped" in out, out


def _cmdlines_holding(needle):
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if needle.encode() in f.read():
                        found.append(int(d))
            except OSError:
                pass
    return found


def test_no_join_token_in_any_cmdline(cluster):
    """A join token read from a file or standard input never shows in
    /proc/*/cmdline; one given on the command line is wiped there at once."""
    c = cluster
    tok_file = c.root / "token"
    tok = c.token(1)
    tok_file.write_text(tok + "\n")
    tok_file.chmod(0o600)
    a = c.spawn("agent-filed", [c.bin("bramble-agent"), "--data-dir", str(c.agent_dir("filed")),
                                "--join-file", str(tok_file), "--name", "filed",
                                "--probe-port", "0", "--allow-root-jobs"])
    c.agents["filed"] = a
    tok2 = c.token(1)
    p = subprocess.Popen([c.bin("bramble-agent"), "--data-dir", str(c.agent_dir("piped")),
                          "--join-file", "-", "--name", "piped", "--probe-port", "0",
                          "--allow-root-jobs"], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=c.env)
    try:
        p.stdin.write((tok2 + "\n").encode())
        p.stdin.close()
        tok3 = c.token(1)
        b = c.start_agent("argv", token=tok3)
        c.wait_ready("filed", "piped", "argv")
        for t in (tok, tok2, tok3):
            assert _cmdlines_holding(t) == [], "a join token shows in /proc/*/cmdline"
        assert "visible to local users" in b.output()
        c.assert_alive()
    finally:
        p.terminate()
        p.wait(timeout=30)


def test_join_file_errors_name_the_file(cluster):
    c = cluster
    empty = c.root / "empty-token"
    empty.write_text("\n")
    for path, words in ((empty, "no token in it"), (c.root / "absent", "No such file")):
        r = subprocess.run([c.bin("bramble-agent"), "--data-dir", str(c.agent_dir("x")),
                            "--join-file", str(path)], capture_output=True, text=True,
                           timeout=30, env=c.env)
        assert r.returncode == 2, r
        assert f"--join-file {path}: {words}" in r.stderr, r.stderr


def test_join_sh_takes_the_token_from_a_file_and_keeps_it_off_command_lines(cluster):
    from test_install import join_sh
    c = cluster
    tok = c.token(1)
    f = c.root / "join-token"
    f.write_text(tok + "\n")
    f.chmod(0o600)
    seen = []
    import threading
    done = threading.Event()

    def watch():  # every command line while join.sh runs
        while not done.is_set():
            seen.extend(_cmdlines_holding(tok))
            time.sleep(0.005)

    t = threading.Thread(target=watch)
    t.start()
    try:
        r = join_sh(c, c.root / "joined-agent", str(f), "--name", "from-file")
    finally:
        done.set()
        t.join()
    assert r.returncode == 0, r.stderr
    assert "from-file" in c.nodes()
    assert seen == [], "the token showed on a command line"


def test_audit_log_records_every_admin_action(cluster2):
    c = cluster2
    c.cli("node", "drain", "node-2")
    c.cli("node", "undrain", "node-2")
    c.cli("user", "add", "carol", "--out", str(c.root / "carol.credential"))
    jid = c.submit("name: audited\ncommand: sleep 1000\n")
    c.cli("cancel", jid)
    rc, _, _ = c.cli("node", "drain", "no-such-node", check=False)
    assert rc == 1
    c.cli("user", "remove", "carol")
    c.cli_json("nodes")  # reads are not actions
    entries = c.cli_json("audit")
    got = [(e["who"], e["action"], e["target"], e["result"].split(":")[0]) for e in entries]
    assert ("admin", "node.drain", "node-2", "done") in got, got
    assert ("admin", "node.undrain", "node-2", "done") in got, got
    assert ("admin", "user.add", "carol", "done") in got, got
    assert ("admin", "job.submit", f"job {jid}", "done") in got, got
    assert ("admin", "job.cancel", f"job {jid}", "done") in got, got
    assert ("admin", "node.drain", "no-such-node", "refused") in got, got
    assert ("admin", "user.remove", "carol", "done") in got, got
    assert all(e["action"] != "node.list" for e in entries)
    assert all(isinstance(e["time"], float) for e in entries)
    # users may not read it
    alice, *_ = _user(c, "alice")
    rc, _, err = c.cli("audit", credential=alice, check=False)
    assert rc == 1 and "not allowed" in err, err


def test_user_rotate_key_refuses_the_old_key_at_once(cluster):
    c = cluster
    c.add_agents(1)
    cred, old_pub, old_sec, server = _user(c, "dave")
    saved = cred.read_text()
    jid = int(c.cli("submit", c.write_spec("name: daves\ncommand: sleep 1000\n"),
                    credential=cred)[1].strip())
    _, out, _ = c.cli("user", "rotate-key", credential=cred)
    assert "old key is refused" in out, out
    y = read_yaml_flat(cred)
    assert y["public_key"] != old_pub and y["name"] == "dave"
    assert _mode(cred) == 0o600
    # the new key is the same user: same jobs
    jobs = c.cli_json("jobs", "--all", credential=cred)
    assert [j["id"] for j in jobs] == [jid]
    # the old key is refused, by an old credential and on a raw connection
    old = c.root / "old.credential"
    old.write_text(saved)
    old.chmod(0o600)
    rc, _, err = c.cli("jobs", credential=old, check=False)
    assert rc == 1, err
    raw = c.raw_client(old_pub, old_sec)
    try:
        raw.send([header("ping", 1), b"{}"])
        assert raw.recv(timeout=2.0) is None
    finally:
        raw.close()
    # a user's own rotation is no admin action: it is an event, not an audit entry
    assert not any(e["action"] == "user.rotate_key" for e in c.cli_json("audit"))
    events = [json.loads(l) for l in c.cli("events", "--json")[1].splitlines() if l.strip()]
    assert any("dave rotated its key" in (e["reason"] or "") for e in events)


def test_a_node_without_the_job_user_is_the_nodes_fault(make_cluster):
    """A node that has no user to run a job as (its --job-user does not exist)
    is a broken node, not a failed job: the job runs elsewhere, no restart is
    used up, and the node is excluded for it."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("switching to a job user needs a root agent")
    c = make_cluster()
    c.add_agents(1, extra=("--job-user", "no-such-user-here", "--label", "first=yes"),
                 names=["broken"])
    jid = c.submit("name: elsewhere\ncommand: echo ran-on-$BRAMBLE_NODE_NAME\n"
                   "restart: {max: 0}\n")
    wait_for(lambda: any("no-such-user-here" in (e["reason"] or "")
                         for e in c.job(jid)["events"]),
             what="the broken node to refuse the job")
    c.add_agents(1, names=["good"])
    j = c.wait_job(jid)
    assert j["state"] == "completed", j
    assert c.wait_logs(jid, "ran-on-good")
    assert j["nodes"] == ["good"], j


def test_restart_on_another_listen_endpoint_warns(cluster):
    """Tokens and credentials carry the endpoint init recorded: a coordinator
    restarted on another one says so, and what to do."""
    c = cluster
    c.coordinator.kill(signal.SIGTERM)
    other = f"tcp://127.0.0.1:{free_port()}"
    p = c.start_coordinator(extra=("--listen", other), wait=False)
    wait_for(lambda: "listening on" in p.output(), what="brambled to start")
    out = p.output()
    assert f"warning: listening on {other}, not on {c.endpoint}" in out, out
    assert "--advertise" in out, out


def test_scheduler_knows_how_many_attempts_an_agent_runs(cluster):
    """More cpus: 0 jobs than an agent runs at once: the scheduler stops at the
    agent's limit and the rest wait, saying why; none of them fails."""
    c = cluster
    c.add_agents(1)
    raw = c.raw_client()
    ids = []
    try:
        for i in range(266):
            _, r, _ = raw.request("job.submit", {"spec": f"name: many-{i}\ncommand: sleep 1000\n"
                                                         "resources: {cpus: 0}\n", "sets": []})
            ids.append(r["id"])
    finally:
        raw.close()

    def counts():
        jobs = c.jobs()
        by = {}
        for j in jobs:
            by[j["state"]] = by.get(j["state"], 0) + 1
        return by, jobs

    wait_for(lambda: counts()[0].get("running", 0) == 256,
             timeout=120, what="256 jobs to run on the one node")
    by, jobs = counts()
    assert by.get("failed", 0) == 0, by
    waiting = [j for j in jobs if j["state"] == "pending"]
    assert len(waiting) == 10, by
    assert all("runs 256 attempts" in (j.get("reason") or "") for j in waiting), waiting[0]
    c.assert_alive()


def test_node_rotate_key_keeps_jobs_and_refuses_the_old_key(cluster):
    c = cluster
    c.add_agents(1)
    jid = c.submit("name: steady\ncommand: sleep 1000\n")
    c.wait_job(jid, "running")
    pids = sorted(c.job_procs(jid))
    cred_file = c.agent_dir("node-1") / "credential"
    old = read_yaml_flat(cred_file)
    _, out, _ = c.cli("node", "rotate-key", "node-1")
    assert "has a new key" in out, out
    new = read_yaml_flat(cred_file)
    assert new["public_key"] != old["public_key"] and new["name"] == "node-1"
    assert _mode(cred_file) == 0o600
    assert not (c.agent_dir("node-1") / "credential.new").exists()
    # the node is ready under its new key, and its job ran on untouched
    c.wait_ready("node-1")
    j = c.job(jid)
    assert j["state"] == "running" and j["attempt"] == 1, j
    assert sorted(c.job_procs(jid)) == pids
    # the old key cannot connect any more
    raw = c.raw_client(old["public_key"], old["secret_key"])
    try:
        raw.send([header("ping", 1), b"{}"])
        assert raw.recv(timeout=2.0) is None
    finally:
        raw.close()
    # a restarted agent comes back with the new key
    c.agents["node-1"].kill(signal.SIGTERM)
    c.start_agent("node-1", join=False)
    c.wait_ready("node-1")
    assert any(e["action"] == "node.rotate_key" and e["result"] == "done"
               for e in c.cli_json("audit"))
    rc, _, err = c.cli("node", "rotate-key", "no-such-node", check=False)
    assert rc == 1 and "no node named 'no-such-node'" in err, err


def test_user_mapped_to_a_local_account_runs_as_it(cluster):
    """user add/set --unix-user: the user's jobs run as that local account on a
    node that has it; --no-unix-user goes back to the node's uid for the user."""
    import pwd
    import pytest
    if os.geteuid() != 0:
        pytest.skip("switching to another uid needs a root agent")
    account = "brtest" + str(os.getpid() % 100000)
    subprocess.run(["useradd", "--no-create-home", "--system", account], check=True)
    try:
        uid = pwd.getpwnam(account).pw_uid
        c = cluster
        c.add_agents(1, extra=("--job-uids", "70000-79999"))
        cred = c.root / "erin.credential"
        c.cli("user", "add", "erin", "--unix-user", account, "--out", str(cred))
        spec = c.write_spec("name: whoami\ncommand: id -u\n")
        jid = int(c.cli("submit", spec, credential=cred)[1].strip())
        assert c.wait_job(jid)["state"] == "completed"
        assert c.wait_logs(jid, str(uid)).strip() == str(uid)
        c.cli("user", "set", "erin", "--no-unix-user")
        spec2 = c.write_spec("name: whoami-2\ncommand: id -u\n", name="w2.yaml")
        jid2 = int(c.cli("submit", spec2, credential=cred)[1].strip())
        assert c.wait_job(jid2)["state"] == "completed"
        owner = c.job(jid2)["owner_id"]
        assert c.wait_logs(jid2, str(70000 + owner)).strip() == str(70000 + owner)
        rc, _, err = c.cli("user", "set", "erin", "--unix-user", "Bad Name", check=False)
        assert rc == 1 and "a local account name" in err, err
    finally:
        subprocess.run(["userdel", account], check=False)
