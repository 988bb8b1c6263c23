"""What a first-time user runs into: requests that can never run and wait in
silence, endpoints that are wrong, messages that misread, small commands that are
missing. Each test holds one of those to a clear answer."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import BIN, CLI_TIMEOUT, DEADLINE, free_port, wait_for, write_credential

BIG_CPUS = 4096  # more CPUs than any test machine has


def bramble(*args, env=None, timeout=60, cwd=None):
    r = subprocess.run([str(BIN / "bramble"), *[str(a) for a in args]],
                       capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


# ---- requests that can never run


def test_reason_names_what_the_node_has_and_what_the_job_needs(cluster):
    c = cluster
    c.add_agents(1)
    cpus = c.nodes()["node-1"]["cpus"]
    jid = c.submit(f"name: big\ncommand: 'true'\nresources: {{cpus: {BIG_CPUS}}}\n")
    j = wait_for(lambda: (lambda x: x if "CPUs free" in (x.get("reason") or "") else None)(
        c.job(jid)), what="the pending reason")
    assert f"node-1 has {cpus} CPUs free, the job needs {BIG_CPUS}" in j["reason"], j
    assert f"of {BIG_CPUS} CPUs" not in j["reason"], j


def test_submit_warns_when_no_node_could_ever_run_the_job(cluster):
    c = cluster
    c.add_agents(2)
    cpus = c.nodes()["node-1"]["cpus"]
    spec = c.write_spec(f"name: big\ncommand: 'true'\nresources: {{cpus: {BIG_CPUS}}}\n")
    rc, out, err = c.cli("submit", spec)
    assert rc == 0 and out.strip().isdigit(), (rc, out, err)
    jid = int(out.strip())
    assert "warning: no current node could ever run job" in err, err
    assert f"node-1 has {cpus} CPUs, the job needs {BIG_CPUS}" in err, err
    assert c.job(jid)["state"] == "pending"  # submitted all the same

    # a gang larger than the cluster
    spec = c.write_spec("name: gang\ncommand: 'true'\nresources: {nodes: 3, cpus: 0}\n")
    rc, out, err = c.cli("submit", spec)
    assert rc == 0, err
    assert "needs 3 nodes at once, but only 2 could ever run it" in err, err

    # a label nobody carries, a GPU nobody has
    spec = c.write_spec("name: lab\ncommand: 'true'\n"
                        "resources: {cpus: 0, labels: {site: moon}}\n")
    rc, _, err = c.cli("submit", spec)
    assert rc == 0 and "has no label site=moon" in err, err
    spec = c.write_spec("name: gpu\ncommand: 'true'\nresources: {cpus: 0, gpus: 1}\n")
    rc, _, err = c.cli("submit", spec)
    assert rc == 0 and "has 0 GPUs, the job needs 1" in err, err

    # a job that fits draws no warning
    spec = c.write_spec("name: small\ncommand: 'true'\nresources: {cpus: 0}\n")
    rc, _, err = c.cli("submit", spec, "--wait")
    assert rc == 0 and "warning" not in err, err


def test_wait_says_why_pending_and_gives_up_at_the_timeout(cluster):
    c = cluster
    c.add_agents(1)
    spec = c.write_spec(f"name: big\ncommand: 'true'\nresources: {{cpus: {BIG_CPUS}}}\n")
    t0 = time.monotonic()
    rc, out, err = c.cli("submit", spec, "--wait", "--timeout", "3s", check=False)
    took = time.monotonic() - t0
    assert rc == 1, (rc, out, err)
    jid = int(out.strip())
    pend = [ln for ln in err.splitlines()
            if f"job {jid} is pending:" in ln and "gave up" not in ln]
    assert len(pend) == 1, err  # once, not at every poll
    assert f"the job needs {BIG_CPUS}" in pend[0], err
    assert re.search(rf"gave up waiting after 3s: job {jid} is pending: .*needs {BIG_CPUS}",
                     err), err
    assert took < 3 + 20, took
    assert c.job(jid)["state"] == "pending"  # the job is left alone

    # --follow too, and --timeout alone is a usage error
    rc, out, err = c.cli("submit", spec, "--follow", "--timeout", "1s", "--set",
                         "name=big2", check=False)
    assert rc == 1 and "gave up waiting after 1s" in err and "is pending" in err, err
    rc, _, err = c.cli("submit", spec, "--timeout", "2s", check=False)
    assert rc == 2 and "--timeout bounds --wait, --follow or --shell: give one of them" in err, err

    # a job that completes in time is not affected
    ok = c.write_spec("name: ok\ncommand: 'true'\nresources: {cpus: 0}\n")
    rc, _, err = c.cli("submit", ok, "--wait", "--timeout", "2m")
    assert rc == 0, err


def test_probe_nodes_with_an_unknown_name_is_an_error(cluster):
    c = cluster
    c.add_agents(2)
    rc, out, err = c.cli("probe", "--bandwidth", "--nodes", "node-1,ghost", check=False)
    assert rc == 1, (rc, out, err)
    assert "'ghost'" in err and "node-1" in err and "node-2" in err, err
    assert c.jobs() == []  # nothing submitted


# ---- endpoints


def test_unresolvable_endpoint_says_so_at_once(cluster):
    c = cluster
    cred = c.root / "nowhere.credential"
    pub, sec, server = c.admin_keys()
    write_credential(cred, "tcp://no-such-host.invalid:7700", server, "admin", pub, sec)
    t0 = time.monotonic()
    rc, _, err = c.cli("jobs", credential=cred, check=False, timeout_flag="20s")
    assert rc == 1 and "cannot resolve no-such-host.invalid" in err, err
    assert time.monotonic() - t0 < 15, "it waited out the timeout"


def test_wrong_server_key_is_named(cluster):
    c = cluster
    cred = c.root / "wrongkey.credential"
    pub, sec, server = c.admin_keys()
    wrong_pub, _ = _keypair()
    write_credential(cred, c.endpoint, wrong_pub, "admin", pub, sec)
    rc, _, err = c.cli("jobs", credential=cred, check=False, timeout_flag="1s")
    assert rc == 1 and "server_public_key" in err and "handshake" in err, err
    # nothing listens
    cred2 = c.root / "closed.credential"
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    write_credential(cred2, nowhere, server, "admin", pub, sec)
    rc, _, err = c.cli("jobs", credential=cred2, check=False, timeout_flag="1s")
    assert rc == 1 and f"nothing answers at {nowhere} (is brambled running?)" in err, err
    assert "server_public_key" not in err, err


def tcp_connected(pid, port):
    """Whether process pid holds an established TCP connection to port (the kernel
    completes it from the listener's backlog even while the listener is stopped)."""
    mine = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            mine.add(link[len("socket:["):-1])
    with open(f"/proc/{pid}/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return any(r[3] == "01" and int(r[2].split(":")[1], 16) == port and r[9] in mine
               for r in rows)


def bramble_bg(c, err_path, *args):
    with open(err_path, "w") as err:
        return subprocess.Popen([str(BIN / "bramble"), "--credential", str(c.credential),
                                 *map(str, args)], stdout=subprocess.DEVNULL, stderr=err,
                                env=c.env, cwd=c.root)


def test_a_coordinator_killed_under_waiting_requests_is_named(cluster):
    """brambled SIGKILLed while requests wait for its answers: one whose connection
    had completed its handshake (a submit --wait, its job pending: no node), and one
    whose handshake never completed (sent while brambled was stopped). Both say the
    coordinator went away, not that the server key may be wrong; after that,
    nothing answers there."""
    c = cluster
    gone = f"the coordinator at {c.endpoint} went away before answering " \
           "(is brambled still running?)"
    waiter_err, submit_err = c.root / "waiter.err", c.root / "submit.err"
    waiter = bramble_bg(c, waiter_err, "--timeout", "5s", "submit",
                        c.write_spec("name: waits\ncommand: 'true'\n"), "--wait")
    submit = None
    try:
        wait_for(lambda: "is pending" in waiter_err.read_text(),
                 what="the submit --wait to be answered and wait")
        c.coordinator.send_signal(signal.SIGSTOP)  # takes connections, answers nothing
        submit = bramble_bg(c, submit_err, "--timeout", "5s", "submit",
                            c.write_spec("name: orphan\ncommand: 'true'\n"))
        wait_for(lambda: tcp_connected(submit.pid, c.port), what="the submit to connect")
        c.coordinator.kill(signal.SIGKILL)
        assert submit.wait(CLI_TIMEOUT) == 1
        text = submit_err.read_text()
        assert gone in text and "server_public_key" not in text, text
        wait_for(lambda: gone in waiter_err.read_text(),
                 what="the submit --wait to say the coordinator went away")
        assert "server_public_key" not in waiter_err.read_text()
    finally:
        for p in (waiter, submit):
            if p and p.poll() is None:
                p.kill()
                p.wait(CLI_TIMEOUT)
    rc, _, err = c.cli("jobs", check=False, timeout_flag="1s")
    assert rc == 1 and f"nothing answers at {c.endpoint} (is brambled running?)" in err, err


def _keypair():
    import zmq
    pub, sec = zmq.curve_keypair()
    return pub.decode(), sec.decode()


def test_user_add_endpoint_sets_the_credentials_endpoint(cluster):
    c = cluster
    cred = c.root / "bob.credential"
    c.cli("user", "add", "bob", "--out", cred, "--endpoint", "tcp://gw.example:7700")
    assert "tcp://gw.example:7700" in cred.read_text()
    rc, _, err = c.cli("user", "add", "carol", "--out", c.root / "c.cred", "--endpoint",
                       "gw.example", check=False)
    assert rc == 2 and "tcp://HOST:PORT" in err, err


# ---- small things


def test_logs_of_a_rank_that_does_not_exist(cluster):
    c = cluster
    c.add_agents(1)
    jid = c.submit("name: two\ncommand: echo hi\nresources: {cpus: 0, tasks_per_node: 2}\n")
    c.wait_job(jid)
    rc, _, err = c.cli("logs", jid, "--rank", "5", check=False)
    assert rc == 1 and f"job {jid} has no rank 5" in err and "0 to 1" in err, err
    rc, out, _ = c.cli("logs", jid, "--rank", "1")
    assert "hi" in out


def test_version_and_help_commands():
    rc, out, _ = bramble("version")
    assert rc == 0 and re.match(r"bramble \d+\.\d+\.\d+", out), out
    assert out == bramble("--version")[1]
    rc, out, _ = bramble("help")
    assert rc == 0 and out == bramble("--help")[1]
    assert "version" in out and "help" in out
    for words in (["submit"], ["token", "create"]):
        rc, out, _ = bramble("help", *words)
        assert rc == 0 and out == bramble(*words, "--help")[1], words
    rc, _, err = bramble("help", "nosuch")
    assert rc == 2 and "nosuch" in err, err


def test_denials_name_the_action(cluster):
    c = cluster
    cred = c.root / "dora.credential"
    c.cli("user", "add", "dora", "--out", cred)
    rc, _, err = c.cli("token", "create", credential=cred, check=False)
    assert rc == 1 and "not allowed: managing join tokens needs the admin key" in err, err
    assert "token.create" not in err, err


def test_numbers_past_a_limit_name_the_limit(tmp_path):
    rc, _, err = bramble("--timeout", "30d", "nodes")
    assert rc == 2 and "at most 2147483647ms" in err, err
    spec = tmp_path / "big.yaml"
    spec.write_text("name: a\ncommand: x\nresources: {cpus: 99999999999999999999}\n")
    rc, _, err = bramble("submit", spec)
    assert rc == 1 and "out of range (0..100000)" in err, err
    spec.write_text("name: a\ncommand: x\ntime_limit: 0.0001ms\n")
    rc, _, err = bramble("submit", spec)
    assert rc == 1 and "rounds to 0, which means no limit" in err, err
    spec.write_text("name: a\ncommand: x\nenv: {%s: 1}\n" % ("K" * 1100))
    rc, _, err = bramble("submit", spec)
    assert rc == 1 and "keys are at most 1024 characters" in err, err


def test_a_command_past_the_kernels_limit_is_refused_at_submit(tmp_path):
    spec = tmp_path / "long.yaml"
    spec.write_text("name: a\ncommand: echo %s\n" % ("x" * 140000))
    rc, _, err = bramble("submit", spec)
    assert rc == 1 and "longer than the kernel's limit for one argument" in err, err


# ---- checkpoint dirs shared between runs

CKPT_CMD = ("echo \"dir=$BRAMBLE_CHECKPOINT_DIR\"; "
            "mkdir -p \"$BRAMBLE_CHECKPOINT_DIR/checkpoint-5\" && "
            "echo '{}' > \"$BRAMBLE_CHECKPOINT_DIR/checkpoint-5/trainer_state.json\" && "
            "echo wrote; sleep 600")


def _ckpt_spec(name, d):
    return (f"name: {name}\ncommand: {json.dumps(CKPT_CMD)}\nresources: {{cpus: 0}}\n"
            f"checkpoint:\n  dir: {json.dumps(d)}\n  pattern: \"checkpoint-*\"\n"
            f"  complete_file: trainer_state.json\n")


def test_checkpoint_dir_takes_the_job_id_and_a_shared_dir_is_named(cluster, tmp_path):
    c = cluster
    c.add_agents(1)
    base = tmp_path / "ckpt"
    jid = c.submit(_ckpt_spec("run-a", f"{base}/${{BRAMBLE_JOB_ID}}"))
    mine = base / str(jid)
    c.wait_logs(jid, f"dir={mine}\n")
    j = wait_for(lambda: (lambda x: x if x["checkpoints"] else None)(c.job(jid)),
                 what="the checkpoint to be reported")
    assert j["checkpoints"][0]["path"] == str(mine / "checkpoint-5"), j["checkpoints"]

    # the $NAME form too, in another job: its own dir, and no word about sharing
    jid2 = c.submit(_ckpt_spec("run-b", f"{base}/b-$BRAMBLE_JOB_ID"))
    c.wait_logs(jid2, f"dir={base}/b-{jid2}\n")
    assert not [e for e in c.job(jid2)["events"] if "already holds" in (e["reason"] or "")]

    # a fresh job pointed at the first one's dir is told so
    jid3 = c.submit(_ckpt_spec("run-c", str(mine)))
    ev = wait_for(lambda: [e for e in c.job(jid3)["events"]
                           if "already holds" in (e["reason"] or "")],
                  what="the shared-dir event")
    assert f"checkpoint dir {mine} already holds steps of another run (job {jid}: " in \
        ev[0]["reason"], ev
    for j in (jid, jid2, jid3):
        c.cli("cancel", j)


# ---- joining


def test_name_clash_suggests_name_and_rejoin_after_remove(cluster):
    c = cluster
    c.add_agents(1)
    argv = [c.bin("bramble-agent"), "--data-dir", c.root / "other", "--join", c.token(1),
            "--name", "node-1", "--probe-port", "0"]
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                       timeout=DEADLINE, env=c.env)
    assert r.returncode != 0 and "node name 'node-1' is taken" in r.stderr, r.stderr
    assert "--name" in r.stderr, r.stderr

    c.agents["node-1"].kill()
    _, out, _ = c.cli("node", "remove", "node-1")
    assert "removed node node-1" in out and "agent.yaml" in out and "credential" in out, out
    # do what it says: delete the old key, join with a new token
    for f in ("agent.yaml", "credential"):
        (c.agent_dir("node-1") / f).unlink()
    c.start_agent("node-1")
    c.wait_ready("node-1")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a root agent")
def test_a_node_that_refuses_every_job_says_so(cluster):
    """A root agent with no one else to run jobs as (no --job-uids, --job-user or
    --allow-root-jobs) refuses every job: `bramble nodes` shows it, nothing is placed
    there, and a waiting job's reason names the cause, not an earlier failure."""
    c = cluster
    c.start_agent("strict", root_jobs=False)
    c.wait_ready("strict")
    node = c.nodes()["strict"]
    assert "running as root without --job-uids or --job-user" in node["refuses"], node
    _, table, _ = c.cli("nodes")
    row = next(ln for ln in table.splitlines() if ln.startswith("strict "))
    assert row.split()[1] == "refusing", table
    _, out, _ = c.cli("node", "show", "strict")
    assert "refuses jobs:" in out and "--allow-root-jobs" in out, out
    jid = c.submit("name: waits\ncommand: \"true\"\n")
    wait_for(lambda: "strict refuses every job: running as root" in
             (c.job(jid)["reason"] or ""), what="the job's reason to name the cause")
    assert c.job(jid)["state"] == "pending"
    assert "earlier attempt failed" not in c.job(jid)["reason"]
    c.start_agent("open")  # (with --allow-root-jobs)
    c.wait_ready("open")
    j = c.wait_job(jid)
    assert (j["state"], j["nodes"]) == ("completed", ["open"]), j
