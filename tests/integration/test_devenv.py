"""Dev environments (`kind: dev`): a job that runs until cancelled, or until its
idle_stop passes with no shell, no forward connection and no output; it is then
stopped with an event that says so. `bramble submit dev.yaml --shell` waits for it
to run and attaches a shell.

Each test makes its own dev environment on one shared cluster of two agents. The
idle_stop is a few seconds; what keeps one alive is checked by what happens while
it is in use (a shell that outlives idle_stop ends normally; output written for
longer than idle_stop leaves it running; a forward's connection, open and silent
for three times idle_stop, leaves it running), never by how long something took."""

import json
import re
import socket
import subprocess
import time

import pytest

from conftest import CLI_TIMEOUT, DEADLINE, Fatal, free_port, sanitizer_lines, wait_for


@pytest.fixture
def c(shared_cluster2):
    return shared_cluster2


def dev_spec(name, command="sleep 600", idle_stop="2s"):
    return (f"name: {name}\nkind: dev\nidle_stop: {idle_stop}\n"
            f"resources: {{cpus: 0}}\ncommand: {command}\n")


def events(c, jid):
    out = c.cli("events", "--job", jid, "--json")[1]
    return [json.loads(x)["reason"] or "" for x in out.splitlines() if x.strip()]


def test_idle_dev_environment_stops_itself(c):
    jid = c.submit(dev_spec("idle-box"))
    c.wait_job(jid, "running")
    j = c.wait_job(jid, "cancelled")
    assert "idle for 2s (idle_stop): no shell, no forward connection and no output" \
        in j["reason"], j["reason"]
    said = [r for r in events(c, jid) if "idle for 2s (idle_stop)" in r]
    assert any("SIGTERM sent" in r for r in said), events(c, jid)
    assert not c.job_procs(jid)


def test_open_shell_keeps_it_running(c):
    """A shell that runs twice idle_stop ends as it would anywhere (exit 0, its
    output whole): the environment was not stopped under it. Once it is closed
    the environment stops itself."""
    jid = c.submit(dev_spec("shell-box"))
    c.wait_job(jid, "running")
    rc, out, err = c.cli("shell", jid, "--", "sh", "-c", "sleep 4; echo still-here",
                         check=False, timeout=CLI_TIMEOUT + 10)
    assert (rc, out) == (0, "still-here\n"), (rc, out, err)
    # (it may already be stopping; it is not over while the shell ran)
    j = c.wait_job(jid, "cancelled")
    assert "idle for 2s (idle_stop)" in j["reason"], j["reason"]


def test_output_keeps_it_running(c):
    """Output is use: a job that prints every half second for twice its idle_stop
    is still running (the 4 s leave room for output shipped late on a loaded
    machine)."""
    jid = c.submit(dev_spec("busy-box", "i=0; while :; do i=$((i+1)); echo tick-$i; "
                            "sleep 0.5; done", idle_stop="4s"))
    try:
        c.wait_job(jid, "running")
        c.wait_logs(jid, "tick-18\n")  # (at least 8.5 s of output, twice idle_stop)
        j = c.job(jid)
        assert j["state"] == "running", j
        shown = c.cli("job", "show", jid)[1]
        assert "dev:" in shown and "stops after 4s idle" in shown, shown
    finally:
        c.cli("cancel", jid, check=False)
    assert not any("idle_stop" in r for r in events(c, jid)), events(c, jid)


# An echo server that prints once, when it listens, and never again.
ECHO = r'''
import socketserver, sys
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.request.sendall(data)
class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
server = Server(("127.0.0.1", int(sys.argv[1])), Echo)
print("listening", flush=True)
server.serve_forever()
'''


def echoes(s, word):
    s.sendall(word + b"\n")
    got = b""
    while not got.endswith(b"\n"):
        b = s.recv(100)
        assert b, f"closed before echoing {word!r} (got {got!r})"
        got += b
    return got == word + b"\n"


def test_open_forward_connection_keeps_it_running(c, tmp_path):
    """A connection through `bramble forward`, open with no byte moving, is use: the
    environment, silent otherwise, runs on for three times its idle_stop. Once the
    connection is closed (the forward still listening, which is no use) it stops
    itself after idle_stop, and the forward ends with it."""
    port = free_port()
    script = tmp_path / "echo.py"
    script.write_text(ECHO)
    quiet = tmp_path / "quiet"
    # output keeps it alive until the connection is up; then it falls silent
    command = (f"/usr/bin/python3 -u {script} {port} & "
               f"while [ ! -e {quiet} ]; do echo tick; sleep 0.5; done; echo quiet; wait")
    jid = c.submit(dev_spec("fwd-box", json.dumps(command)))
    out, err = open(tmp_path / "forward.out", "wb"), open(tmp_path / "forward.err", "wb")
    fwd = subprocess.Popen([c.bin("bramble"), "--credential", str(c.credential), "forward",
                            str(jid), f"0:{port}"], stdin=subprocess.DEVNULL,
                           stdout=out, stderr=err, env=c.env, cwd=c.root,
                           start_new_session=True)
    s = None
    try:
        c.wait_job(jid, "running")
        c.wait_logs(jid, "listening")
        m = wait_for(lambda: re.match(r"forwarding 127\.0\.0\.1:(\d+) to port ",
                                      (tmp_path / "forward.out").read_text()),
                     what="the forward to say where it listens")
        s = socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=DEADLINE)
        assert echoes(s, b"hello")
        wait_for(lambda: c.job(jid)["dev"]["streams"] == 1,
                 what="the coordinator to count the open connection")

        quiet.touch()
        c.wait_logs(jid, "quiet\n")
        silent = time.monotonic()  # its last output is in: only the connection is use

        def held():
            j = c.job(jid)  # (what fails here fails at once: no waiting it out)
            if j["state"] != "running":
                raise Fatal(f"it stopped with the connection open: {j['reason']}")
            if (j["dev"]["idle"], j["dev"]["streams"]) != (0, 1):
                raise Fatal(f"not counted as in use with the connection open: {j['dev']}")
            return time.monotonic() - silent >= 6.0

        wait_for(held, 6.0 + DEADLINE, "three times idle_stop with the connection open",
                 interval=0.25)
        assert echoes(s, b"still carried")
        assert c.job(jid)["state"] == "running"
        assert not any("idle_stop" in r for r in events(c, jid)), events(c, jid)

        s.close()
        s = None
        closed = time.time()
        j = c.wait_job(jid, "cancelled")
        assert "idle for 2s (idle_stop): no shell, no forward connection and no output" \
            in j["reason"], j["reason"]
        # idle counts from the connection's end, not from the coordinator's next look
        stop = next(e for e in c.job(jid)["events"] if "idle_stop" in (e["reason"] or ""))
        assert stop["time"] >= closed + 2.0 - 0.05, (stop["time"] - closed, stop)
        said = [r for r in events(c, jid) if "idle for 2s (idle_stop)" in r]
        assert any("SIGTERM sent" in r for r in said), events(c, jid)
        assert fwd.wait(DEADLINE) == 1
        said = (tmp_path / "forward.err").read_text()
        assert f"job {jid} is cancelled: a forward needs a running job" in said, said
    finally:
        if s is not None:
            s.close()
        if fwd.poll() is None:
            fwd.kill()
        fwd.wait()
        out.close()
        err.close()
        c.cli("cancel", jid, check=False)
    said = (tmp_path / "forward.err").read_text(errors="replace")
    if sanitizer_lines(said):
        c.problems.append(f"sanitizer report from `bramble forward {jid}`:\n{said}")


def test_submit_shell_attaches(c):
    """submit --shell waits for it to run, then a shell in it reads its stdin (no
    terminal here): the job's environment, the exit status handed back; the job
    runs on afterwards."""
    spec = c.write_spec(dev_spec("attach-box", idle_stop="1h"))
    r = subprocess.run([c.bin("bramble"), "--credential", str(c.credential), "submit",
                        str(spec), "--shell"],
                       input='echo "in-$BRAMBLE_JOB_ID"; exit 4\n', capture_output=True,
                       text=True, env=c.env, cwd=c.root, timeout=CLI_TIMEOUT + DEADLINE)
    head = [x for x in r.stderr.splitlines() if x.startswith("bramble: submitted job ")]
    assert head, r.stderr
    jid = int(head[0].rsplit(" ", 1)[1])
    try:
        assert (r.returncode, r.stdout) == (4, f"in-{jid}\n"), (r.returncode, r.stdout,
                                                               r.stderr)
        assert f"'bramble shell {jid}' attaches again" in r.stderr, r.stderr
        assert c.job(jid)["state"] == "running"
    finally:
        c.cli("cancel", jid, check=False)


def test_bad_dev_specs_refused(c, tmp_path):
    before = len(c.jobs())
    for text, why in [
        ("name: t\ncommand: x\nidle_stop: 1h\n", "line 3: idle_stop: only for kind: dev"),
        ("name: t\nkind: dev\ncommand: x\nidle_stop: 0s\n", "idle_stop: must be at least 1s"),
        ("name: t\nkind: dev\ncommand: x\narray: 0-3\n", "array: only for kind: train"),
    ]:
        rc, _, err = c.cli("submit", c.write_spec(text), check=False)
        assert rc != 0 and why in err, (text, err)
    rc, _, err = c.cli("submit", c.write_spec(dev_spec("x")), "--shell", "--wait",
                       check=False)
    assert rc != 0 and "--shell attaches to the job once it runs: not with --wait" in err, err
    assert len(c.jobs()) == before
