"""Forwards: `bramble forward JOB [LOCAL:]PORT` listens on this machine and carries
each connection, through the coordinator's relay, to 127.0.0.1:PORT on the node of
the job's rank, many at once; with --stdio, standard input and output are the one
connection (an ssh ProxyCommand). Reached here: Python's HTTP server, Debian's
Jupyter server and a real sshd, each started inside a job; a port where nothing
listens; who may (the owner, the admin) and the refusals (another user's job,
a job that ended); the bound of 32 streams per user; and `--rank 1` of a gang,
whose connections rank 1's node's agent makes."""

import hashlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import DEADLINE, Fatal, free_port, pid_alive, sanitizer_lines, wait_for

PYTHON = "/usr/bin/python3"
BR_STREAM_GONE_S = 3.5  # proto/stream.h: a stream silent this long is taken for gone


@pytest.fixture
def c(shared_cluster2):
    return shared_cluster2


class Forward:
    """A `bramble forward` running in the background, its stdout and stderr in
    files of the test's tmp dir."""

    def __init__(self, c, tmp_path, args, credential=None, stdin=subprocess.DEVNULL):
        n = len(list(tmp_path.glob("forward-*.out")))
        self.out, self.err = tmp_path / f"forward-{n}.out", tmp_path / f"forward-{n}.err"
        self.argv = [c.bin("bramble"), "--credential", str(credential or c.credential),
                     "forward"] + [str(a) for a in args]
        with open(self.out, "wb") as o, open(self.err, "wb") as e:
            self.p = subprocess.Popen(self.argv, stdin=stdin, stdout=o, stderr=e,
                                      env=c.env, cwd=c.root, start_new_session=True)

    def stdout(self):
        return self.out.read_bytes().decode(errors="replace")

    def stderr(self):
        return self.err.read_bytes().decode(errors="replace")

    def alive(self):
        return self.p.poll() is None

    def line(self):
        """The `forwarding HOST:PORT to ...` line, once printed (None while not)."""
        out = self.stdout()
        if "\n" in out:
            return out.split("\n", 1)[0]
        if not self.alive():
            raise Fatal(f"`{' '.join(self.argv)}` exited {self.p.returncode} before "
                        f"saying where it listens:\n{out}{self.stderr()}")
        return None

    def local_port(self, job, port):
        line = wait_for(self.line, what="forward to print where it listens")
        m = re.fullmatch(rf"forwarding 127\.0\.0\.1:(\d+) to port {port} of job {job} "
                         r"\(rank 0\); Ctrl-C stops", line)
        assert m, line
        return int(m.group(1))

    def wait_exit(self, timeout=DEADLINE):
        wait_for(lambda: not self.alive(), timeout, f"`{' '.join(self.argv)}` to exit")
        return self.p.returncode

    def stop(self):
        """SIGTERM (as Ctrl-C), then SIGKILL; a problem string or None."""
        if not self.alive():
            return None
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(10)
            return f"`{' '.join(self.argv)}` did not exit on SIGTERM"
        # (--stdio: killed by it, as a shell reports; listening: done)
        want = 128 + signal.SIGTERM if "--stdio" in self.argv else 0
        return None if rc == want else f"`{' '.join(self.argv)}` exited {rc} on SIGTERM"


@pytest.fixture
def forward(c, tmp_path):
    """forward(*args, credential=None, stdin=...) -> Forward; each one is stopped
    afterwards, and a sanitizer report on its stderr fails the test."""
    started = []

    def start(*args, **kw):
        f = Forward(c, tmp_path, args, **kw)
        started.append(f)
        return f

    yield start
    for f in started:
        msg = f.stop()
        if msg:
            c.problems.append(msg)
        if sanitizer_lines(f.stderr()):
            c.problems.append(f"sanitizer report from `{' '.join(f.argv)}`:\n{f.stderr()}")


@pytest.fixture
def job(c, tmp_path):
    """job(name, command, env=None, credential=None) -> (id, its workdir): a job of
    the shared cluster, running; cancelled afterwards."""
    jobs = []

    def submit(name, command, env=None, credential=None):
        d = tmp_path / name
        d.mkdir()
        spec = {"name": name, "workdir": str(d), "command": command,
                "resources": {"cpus": 0}, "env": env or {}}
        path = c.write_spec(json.dumps(spec))  # (JSON is YAML)
        _, out, _ = c.cli("submit", path, "--json", credential=credential)
        jid = json.loads(out)["id"]
        jobs.append(jid)
        c.wait_job(jid, "running")
        return jid, d

    yield submit
    for jid in jobs:
        c.cli("cancel", jid, check=False)


def fetch(port, path, headers=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    with urllib.request.urlopen(req, timeout=DEADLINE) as r:
        return r.status, r.read()


def http_server(port):
    return f"exec {PYTHON} -u -m http.server {port} --bind 127.0.0.1"


def test_bind_listens_where_it_is_told(c, job, forward):
    """--bind ADDR: the local end listens on that address (here 127.0.0.2, another
    loopback address), not on 127.0.0.1; a name that does not resolve is refused,
    naming it."""
    port = free_port()
    jid, d = job("web-bind", "printf 'bound\\n' > b.txt && " + http_server(port))
    c.wait_logs(jid, "Serving HTTP on")
    lport = free_port()
    f = forward(jid, f"{lport}:{port}", "--bind", "127.0.0.2")
    line = wait_for(f.line, what="forward to print where it listens")
    assert line.startswith(f"forwarding 127.0.0.2:{lport} to port {port} of job {jid}"), line
    with urllib.request.urlopen(f"http://127.0.0.2:{lport}/b.txt", timeout=DEADLINE) as r:
        assert (r.status, r.read()) == (200, b"bound\n")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", lport), timeout=5).close()
    rc, _, err = c.cli("forward", jid, f"0:{port}", "--bind", "no-such-host.invalid",
                       check=False)
    assert rc != 0 and "--bind no-such-host.invalid" in err, err


def test_http_through_forward(c, job, forward):
    port = free_port()
    jid, d = job("web", "printf 'hello through the relay\\n' > hello.txt && "
                 "head -c 4000000 /dev/urandom > big.bin && " + http_server(port))
    c.wait_logs(jid, "Serving HTTP on")
    f = forward(jid, f"0:{port}")
    local = f.local_port(jid, port)

    for _ in range(3):
        assert fetch(local, "/hello.txt") == (200, b"hello through the relay\n")

    # eight at once, each its own stream
    go, got = threading.Barrier(8), [None] * 8

    def one(i):
        try:
            go.wait(DEADLINE)
            got[i] = fetch(local, "/hello.txt")
        except Exception as e:  # (reported by the assert below)
            got[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * DEADLINE)
    assert got == [(200, b"hello through the relay\n")] * 8, (got, f.stderr())

    # a few MB arrive whole
    status, body = fetch(local, "/big.bin")
    assert status == 200 and len(body) == 4000000, (status, len(body))
    assert hashlib.sha256(body).hexdigest() == \
        hashlib.sha256((d / "big.bin").read_bytes()).hexdigest()
    assert f.alive(), f.stderr()

    # left idle longer than a stream's silence may last (nothing is due from the
    # relay while no connection is open), the next connection works all the same
    time.sleep(BR_STREAM_GONE_S + 1)
    assert fetch(local, "/hello.txt") == (200, b"hello through the relay\n")
    assert "stopped answering" not in f.stderr(), f.stderr()


def test_jupyter_through_forward(c, forward, tmp_path):
    """examples/dev/jupyter.yaml as shipped (a dev environment), on a port and with
    a token of the test's own."""
    port, token = free_port(), os.urandom(12).hex()
    home = tmp_path / "jupyter"  # (the job's workdir)
    home.mkdir()
    example = Path(__file__).resolve().parents[2] / "examples" / "dev" / "jupyter.yaml"
    sets = {"env.JUPYTER_PORT": port, "env.JUPYTER_TOKEN": token, "env.HOME": home,
            "env.JUPYTER_CONFIG_DIR": f"{home}/config", "workdir": home,
            "resources.cpus": 0}
    _, out, _ = c.cli("submit", example, "--json",
                      *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")])
    jid = json.loads(out)["id"]
    try:
        assert c.job(jid)["kind"] == "dev"
        c.wait_job(jid, "running")
        f = forward(jid, f"0:{port}")
        local = f.local_port(jid, port)

        def status():
            code, body = fetch(local, "/api/status", {"Authorization": f"token {token}"})
            return code == 200 and json.loads(body)

        st = wait_for(status, 90, "Jupyter's /api/status through the forward")
        assert "started" in st, st
        with pytest.raises(urllib.error.HTTPError) as e:
            fetch(local, "/api/status")
        assert e.value.code == 403
        assert f.alive(), f.stderr()
    finally:
        c.cli("cancel", jid, check=False)


def test_ssh_through_stdio_forward(c, job, tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name,
                        "-f", str(keys / name)], check=True, timeout=DEADLINE)
    (keys / "authorized_keys").write_text((keys / "user.pub").read_text())
    port = free_port()
    config = keys / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys}/host\n"
                      f"AuthorizedKeysFile {keys}/authorized_keys\n"
                      f"PidFile {keys}/sshd.pid\nUsePAM no\nStrictModes no\n")
    # a root sshd wants its privilege separation directory (made by Debian's unit)
    jid, _ = job("sshd", "echo user=$(id -un); "
                 "[ $(id -u) != 0 ] || mkdir -p -m 0755 /run/sshd; "
                 f"exec /usr/sbin/sshd -D -e -f {config}")
    log = c.wait_logs(jid, f"Server listening on 127.0.0.1 port {port}", stream="both")
    user = re.search(r"^user=(\S+)$", log, re.M).group(1)
    pid = wait_for(lambda: int((keys / "sshd.pid").read_text()), what="sshd's pid file")

    proxy = " ".join(shlex.quote(str(a)) for a in (
        c.bin("bramble"), "--credential", c.credential, "forward", jid, port, "--stdio"))
    try:
        r = subprocess.run(["ssh", "-F", "/dev/null", "-i", str(keys / "user"),
                            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                            "-o", f"ProxyCommand={proxy}", f"{user}@job{jid}",
                            "echo", "hello-over-ssh"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           env=c.env, cwd=c.root, timeout=2 * DEADLINE)
        assert not sanitizer_lines(r.stderr), r.stderr
        assert (r.returncode, r.stdout) == (0, "hello-over-ssh\n"), r.stderr
        assert "Accepted publickey for " + user in c.logs(jid, stream="both")
    finally:
        # sshd rewrites its environment (its process title), so the sweep for
        # the cluster's marker would miss it: it goes with its job, else here
        c.cli("cancel", jid, check=False)
        try:
            wait_for(lambda: not pid_alive(pid), what="sshd to go with its job")
        finally:
            if pid_alive(pid) and str(config) in open(f"/proc/{pid}/cmdline").read():
                os.kill(pid, signal.SIGKILL)


def test_port_where_nothing_listens(c, job, forward):
    port = free_port()
    # the server starts once the test says so (a file `go`)
    jid, d = job("late", "while [ ! -e go ]; do sleep 0.1; done; echo late > late.txt; " +
                 http_server(port))
    node = c.job(jid)["nodes"][0]
    why = f"nothing answers on port {port} of node {node} (Connection refused)"

    # --stdio: exits 1 with the reason, stdin at its end or still open
    rc, out, err = c.cli("forward", jid, port, "--stdio", input="", check=False,
                         timeout=DEADLINE)
    assert (rc, out) == (1, "") and why in err, (rc, out, err)
    held = forward(jid, port, "--stdio", stdin=subprocess.PIPE)
    assert held.wait_exit() == 1 and why in held.stderr(), held.stderr()
    held.p.stdin.close()

    # listening: the connection is closed, the forward carries on
    f = forward(jid, f"0:{port}")
    local = f.local_port(jid, port)
    with socket.create_connection(("127.0.0.1", local), timeout=DEADLINE) as s:
        try:
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
    wait_for(lambda: why in f.stderr(), what="the forward to say why")
    assert f.alive(), f.stderr()

    (d / "go").touch()
    got = wait_for(lambda: fetch(local, "/late.txt"), what="the late server through "
                   "the same forward")
    assert got == (200, b"late\n")
    assert f.alive(), f.stderr()


def test_a_server_on_the_ipv6_loopback_alone(c, job, forward):
    """A job's server that listens on ::1 alone (as one bound to `localhost` may be):
    the forward reaches it there, 127.0.0.1 having refused, and nowhere else."""
    port = free_port()
    jid, _ = job("v6", f"printf 'over ipv6\\n' > six.txt && {PYTHON} -u -m http.server "
                       f"{port} --bind ::1")
    c.wait_logs(jid, "Serving HTTP on")
    with pytest.raises(OSError):  # (nothing on 127.0.0.1)
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    rc, out, err = c.cli("forward", jid, port, "--stdio", input="GET /six.txt HTTP/1.0\r\n\r\n",
                         check=False, timeout=DEADLINE)
    assert rc == 0 and out.startswith("HTTP/1.0 200 ") and out.endswith("\nover ipv6\n"), \
        (rc, out, err)
    f = forward(jid, f"0:{port}")
    assert fetch(f.local_port(jid, port), "/six.txt") == (200, b"over ipv6\n")


def syn_sent_to(port, besides=()):
    """Whether a connect to 127.0.0.1:port other than from the local ports besides
    waits for its SYN's answer (SYN_SENT)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in list(f)[1:]]
    return any(r[3] == "02" and r[2].endswith(f":{port:04X}") and
               int(r[1].split(":")[1], 16) not in besides for r in rows)


def test_a_listener_slow_to_accept(c, job, forward):
    """A job's listener whose accept queue is full: the kernel drops new SYNs, and a
    connect is taken only at a retry (1, 3, 7 s on). A queue that stays full is
    refused after the agent's wait (10 s), saying so, and the node's agent, which
    waits on a thread of its own, goes on with its heartbeats and other jobs; a
    queue that empties in time carries the connection (a busy server's burst of
    connections, as a browser's)."""
    port = free_port()
    server = ("import os, socket, time\n"
              "s = socket.socket()\n"
              "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              f"s.bind(('127.0.0.1', {port}))\n"
              "s.listen(0)\n"
              "print('listening', flush=True)\n"
              "while not os.path.exists('go'):\n"
              "    time.sleep(0.05)\n"
              "while True:\n"
              "    c, _ = s.accept()\n"
              "    c.sendall(b'late\\n')\n"
              "    c.close()\n")
    jid, d = job("slow", f"{PYTHON} -c {shlex.quote(server)}")
    c.wait_logs(jid, "listening")
    # fill its accept queue (kept open): then a connect finds no room
    held = []
    for _ in range(8):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        held.append(s)
    other, _ = job("other", "while true; do date +%s > t; sleep 0.2; done")
    try:
        node = c.job(jid)["nodes"][0]
        rc, out, err = c.cli("forward", jid, port, "--stdio", input="", check=False,
                             timeout=DEADLINE)
        assert rc == 1 and (f"port {port} of node {node} takes no connection (its "
                            "listener did not accept within 10 s)") in err, (rc, out, err)
        # the node stayed well: its jobs run on, nothing was frozen or lost
        assert c.job(jid)["state"] == "running" and c.job(other)["state"] == "running"
        assert c.nodes()[node]["state"] == "ready", c.nodes()[node]

        # the queue empties while the agent's connect waits: it is carried
        f = forward(jid, port, "--stdio", stdin=subprocess.PIPE)
        mine = {s.getsockname()[1] for s in held}
        wait_for(lambda: syn_sent_to(port, mine), what="the agent's connect to wait")
        (d / "go").touch()
        f.p.stdin.close()
        assert f.wait_exit() == 0, f.stderr()
        assert f.stdout() == "late\n", (f.stdout(), f.stderr())
    finally:
        for s in held:
            s.close()


def test_refusals(c, job, forward, tmp_path):
    cred = tmp_path / "fwd-bob.credential"
    c.cli("user", "add", "fwd-bob", "--out", cred)

    # the owner may: a request over standard input and output; the node's side
    # closing ends the output and the command, stdin still open
    port = free_port()
    own, _ = job("bobs", "echo mine > mine.txt; " + http_server(port), credential=cred)
    c.wait_logs(own, "Serving HTTP on")
    f = forward(own, port, "--stdio", credential=cred, stdin=subprocess.PIPE)
    f.p.stdin.write(b"GET /mine.txt HTTP/1.0\r\n\r\n")
    f.p.stdin.flush()
    assert f.wait_exit() == 0, f.stderr()
    out = f.stdout()
    assert out.startswith("HTTP/1.0 200 ") and out.endswith("\r\n\r\nmine\n"), out
    f.p.stdin.close()
    # the request and then the end of input at once: the whole answer still comes
    for _ in range(4):
        rc, out, err = c.cli("forward", own, port, "--stdio", credential=cred,
                             input="GET /mine.txt HTTP/1.0\r\n\r\n", check=False,
                             timeout=DEADLINE)
        assert rc == 0 and out.startswith("HTTP/1.0 200 ") and out.endswith("\nmine\n"), \
            (rc, out, err)  # (read as text: its line ends are \n)

    # the admin may too
    f = forward(own, f"0:{port}")
    assert fetch(f.local_port(own, port), "/mine.txt") == (200, b"mine\n")

    # another user's job is not there for him
    theirs, _ = job("admins", "exec sleep 1000")
    rc, _, err = c.cli("forward", theirs, 22, "--stdio", credential=cred, input="",
                       check=False, timeout=DEADLINE)
    assert rc == 1 and f"no job {theirs}" in err, (rc, err)

    # a job that ended
    done = c.submit("name: done\ncommand: exit 0\nresources: {cpus: 0}\n")
    c.wait_job(done, "completed")
    why = f"job {done} is completed: a forward needs a running job"
    rc, _, err = c.cli("forward", done, 22, "--stdio", input="", check=False,
                       timeout=DEADLINE)
    assert rc == 1 and why in err, (rc, err)

    # listening: refused at once
    f = forward(done, "0:22")
    assert f.wait_exit() == 1, f.stderr()
    assert why in f.stderr() and "forwarding" not in f.stdout(), (f.stdout(), f.stderr())

    # and a forward whose job ends stops, saying so
    live, _ = job("ends", "exec sleep 1000")
    f = forward(live, "0:22")
    wait_for(lambda: f.line(), what="the forward to listen")
    c.cli("cancel", live, "--now")
    assert f.wait_exit() == 1, f.stderr()
    assert f"job {live} is cancelled: a forward needs a running job" in f.stderr(), f.stderr()


# ---------------------------------------------------------------------------
# an echo server in a job, for connections held open


# Greets each connection with "peer PORT" (the port it came from, which tells
# which process on this host made it), then echoes what it reads, each
# connection on a thread of its own; says "listening" once bound, and "closed PORT"
# when that connection's other end closed.
ECHO = r'''
import socketserver, sys
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        peer = self.request.getpeername()[1]
        self.request.sendall(b"peer %d\n" % peer)
        while True:
            data = self.request.recv(65536)
            if not data:
                print("closed %d" % peer, flush=True)
                return
            self.request.sendall(data)
class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 128
server = Server(("127.0.0.1", int(sys.argv[1])), Echo)
print("listening", flush=True)
server.serve_forever()
'''


def echo_server(tmp_path, port):
    """The command that runs ECHO on 127.0.0.1:port (as users write one: /bin/sh
    stays the server's parent)."""
    script = tmp_path / "echo_server.py"
    script.write_text(ECHO)
    return f"{PYTHON} -u {script} {port}"


def greeted(port, timeout=DEADLINE):
    """A connection to 127.0.0.1:port and the peer port its greeting names, once
    it came (the connection is carried end to end)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        line = s.makefile("rb").readline()
        m = re.fullmatch(rb"peer (\d+)\n", line)
        assert m, f"greeting {line!r}"
        return s, int(m.group(1))
    except BaseException:
        s.close()
        raise


def echoes(s, word):
    s.sendall(word + b"\n")
    got = b""
    while not got.endswith(b"\n"):
        b = s.recv(100)
        assert b, f"closed before echoing {word!r} (got {got!r})"
        got += b
    return got == word + b"\n"


def test_stream_bound_per_user(c, job, forward, tmp_path):
    """32 shells and forwarded connections per user at once: the 33rd, a shell or
    a forward's connection, is refused naming the bound while the 32 go on and
    other users are not held to it; once one closes, a new one is carried."""
    user = "fwd-many-" + os.urandom(3).hex()
    cred = tmp_path / f"{user}.credential"
    c.cli("user", "add", user, "--out", cred)
    port = free_port()
    jid, _ = job("many", echo_server(tmp_path, port), credential=cred)
    c.wait_logs(jid, "listening")
    f = forward(jid, f"0:{port}", credential=cred)
    local = f.local_port(jid, port)
    bound = ("32 shells and forwards are open for this user, the most one user may "
             "have at once; close one first")
    conns = []
    try:
        for _ in range(32):
            conns.append(greeted(local)[0])
        assert all(echoes(s, b"one-of-32") for s in conns)

        # the 33rd: a shell
        rc, out, err = c.cli("shell", jid, "--", "echo", "no", credential=cred, check=False)
        assert (rc, out) == (1, "") and bound in err, (rc, out, err)
        # ... and a connection through the forward, which closes it and goes on
        with socket.create_connection(("127.0.0.1", local), timeout=DEADLINE) as s:
            try:
                assert s.recv(100) == b""
            except ConnectionResetError:
                pass
        wait_for(lambda: bound in f.stderr(), what="the forward to say why")
        assert f.alive(), f.stderr()
        assert all(echoes(s, b"still") for s in conns)
        # the bound is the user's: the admin's shell in the same job is carried
        assert c.cli("shell", jid, "--", "echo", "admin") == (0, "admin\n", "")

        # one closed: a forward's new connection is carried again ...
        conns.pop().close()
        conns.append(wait_for(lambda: greeted(local)[0],
                              what="a new connection once one of the 32 closed"))
        assert echoes(conns[-1], b"new")
        # ... and, another closed, a shell
        conns.pop(0).close()
        wait_for(lambda: c.cli("shell", jid, "--", "echo", "again", credential=cred,
                               check=False) == (0, "again\n", ""),
                 what="a shell once one of the 32 closed")
        assert f.alive(), f.stderr()
    finally:
        for s in conns:
            s.close()


def socket_owner(local_port, remote_port, pids):
    """Which of pids holds the TCP socket 127.0.0.1:local_port -> :remote_port
    (from /proc/net/tcp and each process's fds), or None."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            w = line.split()
            if (w[1].split(":")[1] == f"{local_port:04X}" and
                    w[2].split(":")[1] == f"{remote_port:04X}"):
                inodes.add(f"socket:[{w[9]}]")
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
            except OSError:
                pass
    return None


def test_forward_to_another_rank(c, forward, tmp_path):
    """`forward --rank 1` carries its connections to a server that only rank 1 of
    a 2-node gang runs, connected by rank 1's node's agent; with rank 0 (the
    default) rank 0's node's agent makes the connection. (The agents share this
    host's loopback here, so which agent connected is what tells them apart.)"""
    port = free_port()
    jid = c.submit(json.dumps({
        "name": "fwd-gang", "resources": {"nodes": 2, "cpus": 0},
        "command": f'if [ "$RANK" = 1 ]; then {echo_server(tmp_path, port)}; '
                   'else exec sleep 600; fi'}))
    try:
        c.wait_job(jid, "running")
        c.wait_logs(jid, "listening")
        tags = wait_for(lambda: len({t.rsplit(".", 1)[1] for t in c.job_procs(jid).values()})
                        == 2 and c.job_procs(jid), what="both ranks' processes to run")
        node_of = {int(t.rsplit(".", 1)[1]): t.split("/", 1)[0] for t in tags.values()}
        assert node_of[0] != node_of[1], node_of
        agent_of = {r: c.agents[n].pid for r, n in node_of.items()}

        for rank, args in ((1, ["--rank", "1"]), (0, [])):
            f = forward(jid, f"0:{port}", *args)
            line = wait_for(f.line, what=f"the rank {rank} forward to listen")
            m = re.fullmatch(rf"forwarding 127\.0\.0\.1:(\d+) to port {port} of job {jid} "
                             rf"\(rank {rank}\); Ctrl-C stops", line)
            assert m, line
            s, peer = greeted(int(m.group(1)))
            with s:
                assert echoes(s, b"rank-%d" % rank)
                owner = socket_owner(peer, port, agent_of.values())
                assert owner == agent_of[rank], (rank, owner, agent_of)
            assert f.stop() is None

        # a rank the gang does not have
        rc, out, err = c.cli("forward", jid, port, "--rank", "2", "--stdio", input="",
                             check=False, timeout=DEADLINE)
        assert (rc, out) == (1, "") and \
            f"job {jid} has ranks 0 to 1; there is no rank 2" in err, (rc, out, err)
    finally:
        c.cli("cancel", jid, check=False)
        c.wait_job(jid)


def test_a_killed_forward_closes_its_connections_on_the_node(c, job, forward, tmp_path):
    """`bramble forward` killed (SIGKILL: it says nothing) while a connection is
    open: the node's side of that connection is closed (the job's server reads its
    end), and the job goes on."""
    port = free_port()
    jid, _ = job("closes", echo_server(tmp_path, port))
    c.wait_logs(jid, "listening")
    f = forward(jid, f"0:{port}")
    s, peer = greeted(f.local_port(jid, port))
    try:
        assert f"closed {peer}" not in c.logs(jid)
        f.p.kill()
        f.p.wait(DEADLINE)
        c.wait_logs(jid, f"closed {peer}", timeout=20)
    finally:
        s.close()
    assert c.job(jid)["state"] == "running"
