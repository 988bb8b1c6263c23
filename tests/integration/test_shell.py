"""`bramble shell JOB`: a shell, or a command, inside a running job on its node.

Under tmux, an interactive shell has the job's environment, follows the window's
size, takes Ctrl-C as the remote terminal's interrupt and hands its exit status
back. Without a terminal it is plain pipes: a tar of the job's files comes through
whole, stdin reaches the command up to its end, stdout and stderr stay apart and
the remote status is the CLI's. Jobs that are not the caller's, not running, or
have no such rank are refused. A shell ends with its job's cancel, its processes
are hung up when the CLI is killed, and each shell is an audit row. `--rank 1` of
a 2-node gang runs on rank 1's node, in its environment.

The tests share one coordinator with two agents, and one long job (`job`)."""

import filecmp
import json
import os
import secrets
import shlex
import shutil
import signal
import struct
import subprocess
import time
import uuid

import pytest
import zmq

from conftest import CLI_TIMEOUT, DEADLINE, RawClient, Tmux, procs_running, wait_for


@pytest.fixture
def cluster(shared_cluster2):
    return shared_cluster2


@pytest.fixture(scope="module")
def job(module_cluster2, tmp_path_factory):
    """A running job that wrote out/ (a 3 MB file among small ones) in its working
    directory: (id, working directory)."""
    c = module_cluster2
    workdir = tmp_path_factory.mktemp("jobdir")
    jid = c.submit(
        "name: shell-target\n"
        f"workdir: {workdir}\n"
        "resources: {cpus: 0}\n"
        "command: mkdir -p out/sub && head -c 3000000 /dev/urandom > out/big.bin && "
        "printf small > out/sub/small.txt && touch out/empty && echo ready; sleep 600\n")
    c.wait_job(jid, "running")
    c.wait_logs(jid, "ready")
    return jid, workdir


def shell_argv(c, jid, *args, credential=None):
    return [c.bin("bramble"), "--credential", str(credential or c.credential),
            "shell", str(jid), *map(str, args)]


def remote_procs(c, jid, *argv):
    """Pids of job jid's processes whose command line is argv."""
    return procs_running(argv, c.job_procs(jid))


# ---------------------------------------------------------------------------
# a terminal, under tmux

tmux = Tmux("brshell")  # a tmux server of our own


def pane(session):
    return tmux.pane(session, join=True)


def pane_size(session):
    out = tmux("display-message", "-p", "-t", session,
               "#{pane_height} #{pane_width}").stdout.split()
    return int(out[0]), int(out[1])


def type_until(session, line, pred, what, again=5.0):
    """Type line (and Enter) into the pane until pred(pane text) holds; typed again
    every `again` s, in case the keys came before the remote shell read any."""
    seen = {"text": None, "typed": None}

    def check():
        now = time.monotonic()
        if seen["typed"] is None or now - seen["typed"] >= again:
            tmux("send-keys", "-t", session, "-l", line)
            tmux("send-keys", "-t", session, "Enter")
            seen["typed"] = now
        seen["text"] = t = pane(session)
        return pred(t)

    try:
        return wait_for(check, DEADLINE, what)
    except AssertionError as e:
        raise AssertionError(f"{e}\npane:\n{seen['text']}") from None


def wait_pane(session, pred, what):
    return tmux.wait_pane(session, pred, what, join=True)


def last_value(text, key):
    """What the last `KEY=[...]` line of the pane holds, or None."""
    vals = [ln.split(f"{key}=[", 1)[1].split("]", 1)[0]
            for ln in text.splitlines() if f"{key}=[" in ln and "$" not in ln]
    return vals[-1] if vals else None


def test_interactive_shell_on_a_terminal(cluster, job):
    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed: cannot drive `bramble shell` in a terminal")
    c = cluster
    jid, _ = job
    log = c.log_path("bramble-shell-tty")
    c.extra_logs.append(log)  # scanned for sanitizer reports
    env = {"TERM": "xterm-256color", "BRAMBLE_TEST_CLUSTER": c.marker,
           "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1"}
    cmd = " ".join(["env", *(f"{k}={shlex.quote(v)}" for k, v in env.items()),
                    *map(shlex.quote, shell_argv(c, jid)), "2>", shlex.quote(str(log)),
                    "; echo EXITED=$?"])
    session = f"brshell-{uuid.uuid4().hex[:8]}"
    tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "30", cmd)
    try:
        tmux("set-option", "-t", session, "remain-on-exit", "on", check=False)

        # the job's environment
        type_until(session, 'echo "J=[$BRAMBLE_JOB_ID]"',
                   lambda t: last_value(t, "J") == str(jid),
                   f"the remote shell to print BRAMBLE_JOB_ID={jid}")

        # the terminal's size, and its change
        rows, cols = pane_size(session)
        type_until(session, 'echo "S=[$(stty size)]"',
                   lambda t: last_value(t, "S") == f"{rows} {cols}",
                   f"stty size to say {rows} {cols}")
        tmux("resize-window", "-t", session, "-x", "120", "-y", "40")
        wait_for(lambda: pane_size(session) != (rows, cols), what="tmux to resize the pane")
        new = pane_size(session)
        assert new != (rows, cols)
        type_until(session, 'echo "S=[$(stty size)]"',
                   lambda t: last_value(t, "S") == f"{new[0]} {new[1]}",
                   f"stty size to say {new[0]} {new[1]} after the resize")

        # Ctrl-C interrupts what runs there, and the shell goes on
        tmux("send-keys", "-t", session, "-l", "sleep 1003")
        tmux("send-keys", "-t", session, "Enter")
        pids = wait_for(lambda: remote_procs(c, jid, "sleep", "1003"),
                        what="the remote `sleep 1003` to run")
        tmux("send-keys", "-t", session, "C-c")
        wait_for(lambda: not remote_procs(c, jid, "sleep", "1003"),
                 what=f"Ctrl-C to end the remote sleep (pids {pids})")
        type_until(session, 'echo "A=[$((40+2))after]"',
                   lambda t: last_value(t, "A") == "42after",
                   "the remote shell to answer after Ctrl-C")

        # the remote exit status is the CLI's
        tmux("send-keys", "-t", session, "-l", "exit 3")
        tmux("send-keys", "-t", session, "Enter")
        text = wait_pane(session, lambda t: "EXITED=" in t and t,
                         "the CLI to exit after `exit 3`")
        assert "EXITED=3" in text, text
        assert c.job(jid)["state"] == "running"
    finally:
        tmux("kill-session", "-t", session, check=False)
        tmux.kill()


# ---------------------------------------------------------------------------
# plain pipes


def test_pipes(cluster, job, tmp_path):
    c = cluster
    jid, workdir = job

    # a tar of the job's files, from its node, unpacked here
    dest = tmp_path / "unpacked"
    dest.mkdir()
    src = subprocess.Popen(shell_argv(c, jid, "--", "tar", "c", "-C", workdir / "out", "."),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=c.env,
                           cwd=c.root)
    untar = subprocess.run(["tar", "x", "-C", dest], stdin=src.stdout, capture_output=True,
                           timeout=CLI_TIMEOUT)
    src.stdout.close()
    err = src.stderr.read().decode(errors="replace")
    assert src.wait(CLI_TIMEOUT) == 0, err
    assert untar.returncode == 0, untar.stderr
    names = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert names == ["big.bin", "empty", "sub", "sub/small.txt"], names
    for name in ("big.bin", "empty", "sub/small.txt"):
        assert filecmp.cmp(workdir / "out" / name, dest / name, shallow=False), name
    assert (dest / "big.bin").stat().st_size == 3000000

    # stdin reaches the command, and its end too
    assert c.cli("shell", jid, "--", "cat", input="data") == (0, "data", "")
    big = secrets.token_hex(500000)  # 1 MB
    rc, out, err = c.cli("shell", jid, "--", "wc", "-c", input=big)
    assert rc == 0 and out.split() == [str(len(big))], (rc, out, err)
    # stdin closed (`<&-`): the command sees its input end, not a wait for ever
    r = subprocess.run(shell_argv(c, jid, "--", "wc", "-c"), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=DEADLINE, env=c.env,
                       preexec_fn=lambda: os.close(0))
    assert (r.returncode, r.stdout.split()) == (0, ["0"]), r

    # stdout and stderr apart; the remote status is the CLI's
    rc, out, err = c.cli("shell", jid, "--", "sh", "-c", "echo out; echo err >&2; exit 3",
                         check=False)
    assert (rc, out, err) == (3, "out\n", "err\n")
    rc, out, err = c.cli("shell", jid, "--", "sh", "-c", "kill -TERM $$", check=False)
    assert rc == 128 + signal.SIGTERM, (rc, out, err)

    # the job's environment and working directory
    rc, out, err = c.cli("shell", jid, "--", "sh", "-c",
                         'echo "$BRAMBLE_JOB_ID $BRAMBLE_JOB_NAME"; pwd')
    lines = out.splitlines()
    assert lines[0] == f"{jid} shell-target", out
    assert os.path.realpath(lines[1]) == os.path.realpath(workdir), out

    # no command and no terminal: the user's shell reads stdin
    rc, out, err = c.cli("shell", jid, input='echo "id=$BRAMBLE_JOB_ID"; ls out; exit 4\n',
                         check=False)
    assert rc == 4, (rc, out, err)
    assert out.splitlines() == [f"id={jid}", "big.bin", "empty", "sub"], out


# ---------------------------------------------------------------------------
# refusals


def test_refusals(cluster, job):
    c = cluster
    jid, _ = job
    user = "u" + secrets.token_hex(4)
    cred = c.root / f"{user}.credential"
    c.cli("user", "add", user, "--out", cred)

    def refused(*args, credential=None):
        rc, out, err = c.cli("shell", *args, credential=credential, check=False)
        assert rc == 1 and out == "", (args, rc, out, err)
        return err

    # another user's job, as if there were none
    err = refused(jid, "--", "true", credential=cred)
    assert f"no job {jid}" in err, err
    err = refused(99999, "--", "true")
    assert err.strip().endswith("no job 99999"), err
    # a rank the job does not have
    err = refused(jid, "--rank", "3", "--", "true")
    assert f"job {jid} has one rank, 0; there is no rank 3" in err, err
    # a job that is not running
    done = c.submit("name: shell-done\nresources: {cpus: 0}\ncommand: \"true\"\n")
    assert c.wait_job(done)["state"] == "completed"
    err = refused(done, "--", "true")
    assert f"job {done} is completed: a shell needs a running job" in err, err
    # nothing ran, and the job is still there for its owner
    assert c.cli("shell", jid, "--", "echo", "still") == (0, "still\n", "")


# ---------------------------------------------------------------------------
# a shell's end


def test_cancel_ends_the_shell(cluster, tmp_path):
    """A cancel ends the shells open in the job at once: a command through pipes,
    and an interactive bash on a terminal, which ignores SIGTERM and is hung up
    instead, so that the job ends by its SIGTERM, not at its grace's SIGKILL."""
    c = cluster
    jid = c.submit("name: shell-cancel\nresources: {cpus: 0}\ncommand: sleep 600\n")
    c.wait_job(jid, "running")
    cli = c.spawn("bramble-shell-cancel", shell_argv(c, jid, "--", "sleep", "1000"))
    err = open(tmp_path / "tty.err", "wb")
    master, slave = os.openpty()  # (a terminal of our own to type nothing into)
    tty = subprocess.Popen(shell_argv(c, jid, "-t", "--", "bash", "--norc", "-i"),
                           stdin=slave, stdout=slave, stderr=err, env=c.env, cwd=c.root,
                           start_new_session=True)
    os.close(slave)
    try:
        wait_for(lambda: remote_procs(c, jid, "sleep", "1000"),
                 what="the shell's `sleep 1000` to run in the job")
        wait_for(lambda: remote_procs(c, jid, "bash", "--norc", "-i"),
                 what="the interactive bash to run in the job")
        assert cli.alive() and tty.poll() is None
        c.cli("cancel", jid)
        rc = cli.wait_exit(DEADLINE)
        assert rc != 0, cli.output()
        assert tty.wait(DEADLINE) != 0
        j = c.wait_job(jid)
        assert j["state"] == "cancelled"
        assert "killed after its grace" not in j["reason"], j["reason"]
        wait_for(lambda: not c.job_procs(jid), what=f"no process of job {jid} left")
    finally:
        if tty.poll() is None:
            tty.kill()
        tty.wait()
        err.close()
        os.close(master)
    said = (tmp_path / "tty.err").read_text(errors="replace")
    assert f"job {jid} is being stopped" in said, said


def test_killed_cli_hangs_up_the_remote_process(cluster, job):
    """The CLI killed: its connection's end is seen by the relay, the stream closed,
    and the remote shell gets SIGHUP (its trap runs) and its children go, one that
    left its process group (setsid) too: it carries the shell's BRAMBLE_SHELL."""
    c = cluster
    jid, workdir = job
    hup = workdir / "hup-seen"
    script = ("trap 'echo HUP > hup-seen; exit 1' HUP; setsid sleep 1002 & sleep 1001 & "
              "wait; echo never")
    cli = c.spawn("bramble-shell-killed", shell_argv(c, jid, "--", "sh", "-c", script))
    wait_for(lambda: remote_procs(c, jid, "sleep", "1001") and
             remote_procs(c, jid, "sleep", "1002"),
             what="the shell's `sleep 1001` and `setsid sleep 1002` to run in the job")
    alone = remote_procs(c, jid, "sleep", "1002")[0]
    assert os.getpgid(alone) == alone  # (its own group: kill(-pgrp) misses it)
    with open(f"/proc/{alone}/environ", "rb") as f:
        assert any(e.startswith(b"BRAMBLE_SHELL=") for e in f.read().split(b"\0"))
    cli.kill(signal.SIGKILL)
    wait_for(lambda: not remote_procs(c, jid, "sleep", "1001") and
             not remote_procs(c, jid, "sleep", "1002") and
             not remote_procs(c, jid, "sh", "-c", script), 20,
             "the remote sh and its sleeps to be hung up after their CLI was killed")
    assert hup.read_text() == "HUP\n"
    # the job itself goes on
    assert c.job(jid)["state"] == "running"
    assert c.cli("shell", jid, "--", "echo", "alive") == (0, "alive\n", "")


def test_a_replaced_key_cuts_what_it_opened(cluster, tmp_path):
    """A user who replaces their key (`bramble user rotate-key`: the old one is
    refused from then on) loses the shells the old key opened, at once: the CLI
    says why and exits, the remote command is hung up, the job goes on, and a
    shell with the new key works."""
    c = cluster
    cred = tmp_path / "sam.credential"
    c.cli("user", "add", "sam-shell", "--out", cred)
    spec = c.write_spec("name: sams\nresources: {cpus: 0}\ncommand: sleep 600\n")
    _, out, _ = c.cli("submit", spec, "--json", credential=cred)
    jid = json.loads(out)["id"]
    c.wait_job(jid, "running")
    cli = c.spawn("bramble-shell-sam", shell_argv(c, jid, "--", "sleep", "1003",
                                                  credential=cred))
    wait_for(lambda: remote_procs(c, jid, "sleep", "1003"),
             what="sam's shell's `sleep 1003` to run in the job")
    c.cli("user", "rotate-key", credential=cred)
    assert cli.wait_exit(DEADLINE) != 0
    assert "the key that opened it was replaced" in cli.output(), cli.output()
    wait_for(lambda: not remote_procs(c, jid, "sleep", "1003"), 20,
             "the remote sleep to be hung up once its key was replaced")
    assert c.job(jid)["state"] == "running"
    assert c.cli("shell", jid, "--", "echo", "new key", credential=cred) == \
        (0, "new key\n", "")
    c.cli("cancel", jid)


# ---------------------------------------------------------------------------
# audit


def test_each_shell_is_an_audit_row(cluster, job):
    c = cluster
    jid, _ = job
    before = {r["id"] for r in c.cli_json("audit")}
    word = "audit-" + secrets.token_hex(4)
    c.cli("shell", jid, "--", "echo", word)
    c.cli("shell", jid, input="exit 0\n")
    user = "u" + secrets.token_hex(4)
    cred = c.root / f"{user}.credential"
    c.cli("user", "add", user, "--out", cred)
    mine = c.cli_json("submit", c.write_spec(
        "name: shell-own\nresources: {cpus: 0}\ncommand: sleep 600\n"), credential=cred)["id"]
    c.wait_job(mine, "running")
    assert c.cli("shell", mine, "--", "echo", "hers", credential=cred) == (0, "hers\n", "")

    rows = [r for r in c.cli_json("audit") if r["id"] not in before]
    shells = [(r["who"], r["action"], r["target"], r["result"]) for r in rows
              if r["action"] == "shell"]
    assert shells == [("admin", "shell", f"job {jid} rank 0", f"command: echo {word}"),
                      ("admin", "shell", f"job {jid} rank 0", "interactive shell"),
                      (user, "shell", f"job {mine} rank 0", "command: echo hers")], rows
    _, out, _ = c.cli("audit")
    assert any("shell" in ln and f"job {jid} rank 0" in ln and word in ln
               for ln in out.splitlines()), out
    c.cli("cancel", mine)
    c.wait_job(mine)


# ---------------------------------------------------------------------------
# a client that never reads, and one that sends beyond its credit


def vm_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def written(pid):
    """Bytes pid has written so far (/proc/PID/io), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return int(next(line for line in f if line.startswith("wchar:")).split()[1])
    except (OSError, StopIteration):
        return None


def test_a_client_that_never_reads_stalls_only_its_stream(cluster, job):
    c = cluster
    jid, _ = job
    coord = c.coordinator.pid
    before = vm_rss_kb(coord)
    flood = subprocess.Popen(shell_argv(c, jid, "--", "yes", "flood"), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)  # its output never read
    try:
        pids = wait_for(lambda: remote_procs(c, jid, "yes", "flood"),
                        what="the remote `yes flood` to run")
        seen = {"w": None, "at": 0.0}

        def stalled():  # it wrote nothing more for a second: its stream is full
            w, now = written(pids[0]), time.monotonic()
            if w != seen["w"]:
                seen["w"], seen["at"] = w, now
                return False
            return now - seen["at"] >= 1.0

        wait_for(stalled, what="the remote `yes` to stall on its full stream")
        assert seen["w"] < 16 << 20, f"it wrote {seen['w']} bytes before it stalled"
        # nothing else stalls: another shell answers, the node stays ready
        assert c.cli("shell", jid, "--", "echo", "still-here") == (0, "still-here\n", "")
        nodes = json.loads(c.cli("nodes", "--json")[1])
        assert all(n["state"] == "ready" for n in nodes), nodes
        grown = vm_rss_kb(coord) - before
        assert grown < 32 * 1024, f"the coordinator grew by {grown} KiB"
    finally:
        flood.kill()
        flood.wait(timeout=CLI_TIMEOUT)
    wait_for(lambda: not remote_procs(c, jid, "yes", "flood"), 20,
             "the remote `yes` to be hung up once its client went")


SEALED = 1


def frame(type_, stream, arg=0, channel=0, flags=0):
    return struct.pack(">BBBBIQ", 2, type_, channel, flags, stream, arg)


ATTACH, ATTACHED, DATA, CLOSE, PING = 1, 2, 3, 8, 9


class Seal:
    """The client's end of a stream's seal (proto/streamseal.h), written again from
    its description: ChaCha20-Poly1305 with the stream's key, the header as
    associated data, the nonce the direction (0: from the client) and the frame's
    number."""

    def __init__(self, key_hex):
        from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
        self.key_hex = key_hex
        self.aead = ChaCha20Poly1305(bytes.fromhex(key_hex))
        self.sent = self.got = 0

    def frames(self, type_, stream, payload=b"", arg=0, channel=0):
        hdr = frame(type_, stream, arg, channel, SEALED)
        nonce = b"\0" * 4 + struct.pack(">Q", self.sent)
        self.sent += 1
        return [hdr, self.aead.encrypt(nonce, payload, hdr)]

    def open(self, msg):
        """The payload of a sealed frame from the node (the next it numbered)."""
        hdr, body = msg[0], msg[1] if len(msg) > 1 else b""
        assert hdr[3] == SEALED, f"an unsealed frame from the node: {msg}"
        nonce = b"\1" + b"\0" * 3 + struct.pack(">Q", self.got)
        self.got += 1
        return self.aead.decrypt(nonce, body, hdr)


def raw_stream(c, jid, *command):
    """A shell stream running command in job jid, opened and attached by hand (the
    frames this test sends are its own): (relay connection, stream id, its seal)."""
    main = c.raw_client()
    try:
        _, body, _ = main.request("stream.open", {"id": jid, "kind": "shell",
                                                  "command": list(command)})
    finally:
        main.close()
    assert "stream" in body, body
    relay = RawClient(f"tcp://{c.host}:{body['relay_port']}", None)
    sid = body["stream"]
    relay.send([frame(ATTACH, sid), body["ticket"].encode()])
    msg = relay.recv()  # (the relay pings an end that waits for the other)
    while msg and msg[0][1] == PING:
        msg = relay.recv()
    assert msg and msg[0][1] == ATTACHED, msg
    wait_for(lambda: remote_procs(c, jid, *command), what=f"the remote {command}")
    return relay, sid, Seal(body["key"])


def closed_why(relay, seal):
    """The reason of the CLOSE the relay passes on, or sends itself (None: none
    within DEADLINE); the node's frames before it are opened in turn."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        m = relay.recv(1)
        body = seal.open(m) if m and m[0][3] == SEALED else m and m[1:] and m[1]
        if m and m[0][1] == CLOSE:
            return body.decode()
    return None


def test_a_sender_beyond_its_credit_is_cut_off(cluster, job):
    c = cluster
    jid, _ = job
    relay, sid, seal = raw_stream(c, jid, "sleep", "1002")
    try:
        chunk = b"z" * 65536  # 16 of them: 1 MiB, where 512 KiB may be in flight
        for _ in range(16):
            relay.send(seal.frames(DATA, sid, chunk))
        closed = closed_why(relay, seal)
        assert closed and "beyond its credit" in closed, closed
    finally:
        relay.close()
    wait_for(lambda: not remote_procs(c, jid, "sleep", "1002"), 20,
             "the cut-off stream's process to be hung up")


CREDIT = 4


def test_a_receiver_granting_credit_it_was_not_sent_is_cut_off(cluster, job):
    """A client that grants the node more credit than it was ever sent (to have the
    relay hold the node's output for it without bound, while it reads nothing) is
    cut off, saying why; the remote process is hung up."""
    c = cluster
    jid, _ = job
    relay, sid, seal = raw_stream(c, jid, "sleep", "1003")
    try:
        relay.send(seal.frames(CREDIT, sid, arg=1 << 30))  # a GiB it was never sent
        closed = closed_why(relay, seal)
        assert closed and "credit beyond what it was sent" in closed, closed
    finally:
        relay.close()
    wait_for(lambda: not remote_procs(c, jid, "sleep", "1003"), 20,
             "the cut-off stream's process to be hung up")


def read_line(relay, seal, plain=None):
    """The node's output up to its first newline, every sealed frame of the node's
    opened in turn (a CREDIT too, which numbers as any); AssertionError when the
    stream is closed first, or when a DATA frame carries plain (bytes) as they are."""
    out, deadline = b"", time.monotonic() + DEADLINE
    while b"\n" not in out and time.monotonic() < deadline:
        m = relay.recv(1)
        if not m:
            continue
        body = seal.open(m) if m[0][3] == SEALED else (m[1] if len(m) > 1 else b"")
        if m[0][1] == CLOSE:
            raise AssertionError(f"closed: {body!r}")
        if m[0][1] == DATA:
            assert plain is None or plain not in m[1], "a DATA frame passed in plain text"
            out += body
    return out


def test_frames_are_sealed_end_to_end(cluster, job):
    """What passes the relay is sealed by its ends with the stream's key, which the
    relay never had: a client that seals as the protocol says is answered by the
    command, in frames it opens with that key and that carry no plain text; a frame
    changed on the way is refused by the node, which closes the stream saying why
    and hangs the command up; an unsealed one likewise (a relay, or anyone on the
    path, cannot inject bytes)."""
    c = cluster
    jid, _ = job
    relay, sid, seal = raw_stream(c, jid, "sed", "s/^/seen: /")
    try:
        word = "plain-" + secrets.token_hex(8)
        relay.send(seal.frames(DATA, sid, f"{word}\n".encode()))
        relay.send(seal.frames(5, sid))  # EOF on stdin: sed ends
        out = read_line(relay, seal, plain=word.encode())
        assert out == f"seen: {word}\n".encode(), out
    finally:
        relay.close()

    for bad in ("changed", "unsealed"):
        relay, sid, seal = raw_stream(c, jid, "sleep", "1005")
        try:
            if bad == "changed":
                hdr, body = seal.frames(DATA, sid, b"rm -rf /\n")
                relay.send([hdr, bytes([body[0] ^ 1]) + body[1:]])
            else:
                relay.send([frame(DATA, sid), b"rm -rf /\n"])
            closed = closed_why(relay, seal)
            assert closed and ("failed its check" in closed if bad == "changed"
                               else "an unsealed DATA frame" in closed), closed
        finally:
            relay.close()
        wait_for(lambda: not remote_procs(c, jid, "sleep", "1005"), 20,
                 f"the process of the stream with a {bad} frame to be hung up")


def test_a_stranger_on_the_relays_port_gets_nothing(cluster, job):
    """The relay's port takes anyone's connection (the ends seal their frames, not
    the connection), so a stranger with no key at all connects: a guessed ticket
    is refused; frames it sends for a stream it did not join (a well-sealed one, a
    forged CLOSE) go nowhere, and the stream's real ends go on; a frame larger than
    any stream's drops its connection; a shell beside it works throughout."""
    c = cluster
    jid, _ = job
    relay, sid, seal = raw_stream(c, jid, "sed", "s/^/got: /")
    stranger = RawClient(relay.endpoint, None, reconnect=False)
    try:
        stranger.send([frame(ATTACH, sid), secrets.token_hex(16).encode()])
        m = stranger.recv()
        assert m and m[0][1] == CLOSE and b"wrong ticket" in m[1], m
        # sealed with the stream's own key and number (as if it had them): were it
        # passed on, the node would print it and refuse the real end's next frame
        stranger.send(Seal(seal.key_hex).frames(DATA, sid, b"injected\n"))
        stranger.send([frame(CLOSE, sid), b"forged close"])
        assert stranger.recv(1) is None, "the stranger was answered"
        relay.send(seal.frames(DATA, sid, b"real\n"))
        relay.send(seal.frames(5, sid))  # EOF: sed ends
        out = read_line(relay, seal)
        assert out == b"got: real\n", out
        # a frame larger than a stream's largest: the stranger's connection dropped
        # (it does not connect again: what it sends after stays unsent)
        stranger.send([frame(DATA, sid), b"z" * (1 << 20)])
        wait_for(lambda: stranger.disconnected(), what="the relay to drop the stranger "
                 "whose frame was larger than a stream's")
        try:
            stranger.send([frame(ATTACH, sid), secrets.token_hex(16).encode()], zmq.NOBLOCK)
        except zmq.Again:
            pass  # (nowhere to send it: its only connection is gone)
        assert stranger.recv(1) is None, "an oversized frame's connection was answered"
    finally:
        stranger.close()
        relay.close()
    assert c.cli("shell", jid, "--", "echo", "still-here") == (0, "still-here\n", "")


# ---------------------------------------------------------------------------
# --rank: a gang's other ranks


def parent_pid(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("PPid:")).split()[1])


def test_rank_reaches_that_ranks_node(cluster):
    """`--rank 1` of a 2-node gang runs on rank 1's node, in rank 1's environment
    (RANK, NODE_RANK, the node's name), started by that node's agent; rank 0, the
    default, is the other node's, with its own values."""
    c = cluster
    jid = c.submit("name: shell-gang\nresources: {nodes: 2, cpus: 0}\ncommand: sleep 600\n")
    cli = None
    try:
        c.wait_job(jid, "running")
        # each rank's node, from the job's own processes (BRAMBLE_TASK: node/job.attempt.rank)
        tags = wait_for(lambda: len({t.rsplit(".", 1)[1] for t in c.job_procs(jid).values()})
                        == 2 and c.job_procs(jid), what="both ranks' processes to run")
        node_of = {int(t.rsplit(".", 1)[1]): t.split("/", 1)[0] for t in tags.values()}
        assert node_of[0] != node_of[1], node_of

        show = 'echo "$RANK $NODE_RANK $BRAMBLE_NODE_NAME $BRAMBLE_TASK"'
        said = {}
        for args in ([], ["--rank", "0"], ["--rank", "1"]):
            rc, out, err = c.cli("shell", jid, *args, "--", "sh", "-c", show, check=False)
            assert rc == 0, (args, rc, out, err)
            said[" ".join(args)] = out.split()
        assert said["--rank 1"] == ["1", "1", node_of[1], f"{node_of[1]}/{jid}.1.1"], said
        assert said["--rank 0"] == ["0", "0", node_of[0], f"{node_of[0]}/{jid}.1.0"], said
        assert said[""] == said["--rank 0"], said

        # it really runs there: its process is a child of rank 1's node's agent
        cli = c.spawn("bramble-shell-rank1", shell_argv(c, jid, "--rank", 1, "--",
                                                        "sleep", "1104"))
        pids = wait_for(lambda: remote_procs(c, jid, "sleep", "1104"),
                        what="rank 1's shell's `sleep 1104` to run")
        assert len(pids) == 1, pids
        assert parent_pid(pids[0]) == c.agents[node_of[1]].pid, \
            (pids, parent_pid(pids[0]), {n: p.pid for n, p in c.agents.items()})
        assert c.job_procs(jid)[pids[0]] == f"{node_of[1]}/{jid}.1.1"
        cli.kill(signal.SIGKILL)
        wait_for(lambda: not remote_procs(c, jid, "sleep", "1104"), 20,
                 "rank 1's shell to be hung up after its CLI was killed")

        # a rank the gang does not have
        rc, out, err = c.cli("shell", jid, "--rank", "2", "--", "true", check=False)
        assert (rc, out) == (1, "") and \
            f"job {jid} has ranks 0 to 1; there is no rank 2" in err, (rc, out, err)
    finally:
        if cli is not None and cli.alive():
            cli.kill(signal.SIGKILL)
        c.cli("cancel", jid, check=False)
        c.wait_job(jid)


def test_a_removed_node_loses_its_shells(make_cluster):
    """Removing a node (`bramble node remove`, its key revoked) ends the shells and
    forwards into its jobs at once, saying why, as a replaced key does."""
    c = make_cluster()
    c.add_agents(1)
    jid = c.submit("name: on-removed\nresources: {cpus: 0}\ncommand: sleep 600\n")
    c.wait_job(jid, "running")
    cli = c.spawn("bramble-shell-removed", shell_argv(c, jid, "--", "sleep", "1004"))
    wait_for(lambda: remote_procs(c, jid, "sleep", "1004"),
             what="the shell's `sleep 1004` to run in the job")
    c.cli("node", "remove", "node-1")
    assert cli.wait_exit(DEADLINE) != 0
    assert "node node-1 was removed" in cli.output(), cli.output()
    assert c.agents["node-1"].wait_exit() != 0  # (a removed node's agent is refused)


def test_a_terminals_last_output_reaches_a_reader_that_was_away(cluster, job):
    """`bramble shell -t`, its reader away (a terminal scrolled back): the command
    ends while what it left in the job's terminal cannot go yet (the reader's credit
    spent), here from a pipeline it started in the background (in a process group of
    its own, as an interactive shell's job, which the terminal's end does not hang
    up) that has filled every buffer on the way and waits; all 4 MB reach the
    reader once it is back, then the command's status."""
    import select
    c = cluster
    jid, workdir = job
    go = workdir / f"go-{uuid.uuid4().hex[:8]}"
    master, slave = os.openpty()
    p = subprocess.Popen(shell_argv(c, jid, "-t", "--", "sh", "-c",
                                    "setsid sh -c \"head -c 4000000 /dev/zero | tr "
                                    f"'\\\\0' x\" & while [ ! -e {go} ]; do sleep 0.05; "
                                    "done; exit 3"),
                         stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=c.env,
                         cwd=c.root, start_new_session=True)
    os.close(slave)
    got = bytearray()

    def written():  # what the remote `tr` has written so far (None: not there)
        pids = remote_procs(c, jid, "tr", "\\0", "x")
        try:
            with open(f"/proc/{pids[0]}/io") as f:
                return next(int(ln.split()[1]) for ln in f if ln.startswith("wchar:"))
        except (IndexError, OSError):
            return None

    try:
        seen = []

        def stalled():  # the same count five looks in a row: every buffer is full
            seen.append(written())
            return len(seen) >= 5 and seen[-1] is not None and len(set(seen[-5:])) == 1

        wait_for(stalled, 60, "the background writer to fill the buffers and wait",
                 interval=0.1)
        assert seen[-1] < 4000000, seen[-1]
        go.touch()  # the command ends; the last of the output is still in the terminal
        wait_for(lambda: not remote_procs(c, jid, "sh", "-c", p.args[-1]),
                 what="the shell's command to end, its output waiting for the reader")
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:  # the reader back: all of it, to the end
            if not select.select([master], [], [], 0.5)[0]:
                if p.poll() is not None:
                    break
                continue
            try:
                b = os.read(master, 65536)
            except OSError:  # EIO: the CLI ended, its terminal closed
                b = b""
            if not b:
                break
            got += b
        rc = p.wait(DEADLINE)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    assert got.count(b"x") == 4000000, (got.count(b"x"), p.stderr.read()[-300:])
    assert rc == 3, (rc, p.stderr.read()[-300:])


def test_output_waits_for_a_reader_that_takes_its_time(cluster, job):
    """`bramble shell J -- cat big | less`, with the user paging at leisure: the
    command ends while the last of its output still waits for the reader; every byte
    reaches it however long that takes, and then the command's status."""
    c = cluster
    jid, workdir = job
    size = (workdir / "out" / "big.bin").stat().st_size
    p = subprocess.Popen(shell_argv(c, jid, "--", "cat", "out/big.bin"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        got = 0
        while got < size - 200_000:  # all but the last 200 KB
            b = p.stdout.read1(min(65536, size - 200_000 - got))
            assert b, p.stderr.read()
            got += len(b)
        wait_for(lambda: not remote_procs(c, jid, "cat", "out/big.bin"),
                 what="the remote cat to end, its last bytes on their way")
        time.sleep(6)  # the reader away longer than the CLI once waited (5 s)
        rest = p.stdout.read()
        assert got + len(rest) == size, (got, len(rest), size)
        assert p.wait(DEADLINE) == 0, p.stderr.read()
    finally:
        p.kill()
        p.wait()


def test_a_shell_open_when_its_job_ends_is_closed_saying_so(cluster, tmp_path):
    """A job that ends on its own (its command exits) while a shell is open in it:
    the shell's process goes with the job, and the client says `job N ended` and
    exits 255, not as if the command had died of a signal."""
    c = cluster
    go = tmp_path / "go"
    jid = c.submit("name: ends-itself\nresources: {cpus: 0}\n"
                   f"command: echo up; while [ ! -e {go} ]; do sleep 0.1; done\n")
    cli = None
    try:
        c.wait_job(jid, "running")
        c.wait_logs(jid, "up")
        cli = c.spawn("bramble-shell-job-ends", shell_argv(c, jid, "--", "sleep", "1004"))
        wait_for(lambda: remote_procs(c, jid, "sleep", "1004"),
                 what="the shell's `sleep 1004` to run in the job")
        go.touch()
        assert c.wait_job(jid)["state"] == "completed"
        rc = cli.wait_exit(DEADLINE)
        out = cli.output()
        assert rc == 255 and f"job {jid} ended" in out, (rc, out)
        wait_for(lambda: not procs_running(["sleep", "1004"]), 20,
                 "the shell's `sleep 1004` to go with its job")
    finally:
        go.touch()
        if cli:
            cli.kill()
