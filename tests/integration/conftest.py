"""Integration test harness for bramble: real brambled / bramble-agent / bramble
processes on free loopback ports, in a per-test temporary directory.

Everything here runs under /usr/bin/python3 (3.11) with the standard library and
pyzmq only. Binaries come from $BRAMBLE_BIN (default: <repo>/build-test/bin).

Rules the helpers follow, so the suite holds on a loaded 2-core machine with
sanitizer builds:
  * never sleep-and-assert: every wait is `wait_for(predicate, timeout, what)`,
    polling every ~75 ms against a generous deadline;
  * every daemon has its own log file (stdout+stderr) under the test's tmp dir;
    on failure their tails are attached to the report;
  * teardown stops every process (SIGTERM, then SIGKILL), fails the test if a
    daemon died unexpectedly or if any log holds an AddressSanitizer,
    UndefinedBehaviorSanitizer or LeakSanitizer report, and kills whatever job
    processes the agents left behind (found by a marker in their environment);
  * a cluster is the test's own, but for tests that leave each other alone,
    which may share one per module (shared_cluster2, or start_cluster in a
    module-scoped fixture): each of them is still failed by the sanitizer
    reports and daemon deaths found while it ran (Cluster.running_problems).
"""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import zmq

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("BRAMBLE_BIN") or REPO / "build-test" / "bin").resolve()

# Deadlines: generous on purpose (2 cores, ASan/UBSan builds, other load).
DEADLINE = float(os.environ.get("BRAMBLE_TEST_DEADLINE", "30"))
POLL = 0.075
CLI_TIMEOUT = 60  # seconds a single CLI invocation may take before we call it hung
STOP_GRACE = 15  # seconds a daemon gets to exit after SIGTERM

SANITIZER_PATTERNS = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer")

os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
os.environ.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")

# The wire protocol (proto/PROTOCOL.md section 2), for the raw clients.
MAGIC = b"BR"
VERSION = 1
KIND_REQUEST, KIND_RESPONSE, KIND_EVENT = 1, 2, 3
FLAG_DATA = 1


# ---------------------------------------------------------------------------
# small helpers


class WaitTimeout(AssertionError):
    pass


class Fatal(Exception):
    """Raised inside a wait_for predicate to stop waiting at once (a daemon died,
    a sanitizer report): wait_for retries on AssertionError and friends only."""


def wait_for(predicate, timeout=DEADLINE, what="condition", interval=POLL):
    """Poll predicate() until it returns a truthy value (returned) or the deadline
    passes (AssertionError naming `what` and the last value / exception)."""
    deadline = time.monotonic() + timeout
    last, last_exc = None, None
    while True:
        try:
            last = predicate()
            last_exc = None
            if last:
                return last
        except (AssertionError, ValueError, KeyError, IndexError, TypeError,
                json.JSONDecodeError, OSError) as e:
            last_exc = e
        if time.monotonic() >= deadline:
            detail = f"last exception: {last_exc!r}" if last_exc else f"last value: {last!r}"
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what} ({detail})")
        time.sleep(interval)


def free_port():
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_yaml_flat(path):
    """The top-level `key: value` pairs of a flat YAML file such as a credential
    (values plain, 'single' or "double" quoted)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):\s*(.*?)\s*$", line)
        if not m:
            continue
        key, val = m.group(1), m.group(2)
        if len(val) >= 2 and val[0] == val[-1] == "'":
            val = val[1:-1].replace("''", "'")
        elif len(val) >= 2 and val[0] == val[-1] == '"':
            val = json.loads(val)
        out[key] = val
    return out


def write_credential(path, endpoint, server_public_key, name, public_key, secret_key):
    """A credential file in the documented format (YAML, Z85 keys, mode 0600)."""

    def q(s):
        return "'" + s.replace("'", "''") + "'"

    text = (f"endpoint: {q(endpoint)}\nserver_public_key: {q(server_public_key)}\n"
            f"name: {q(name)}\npublic_key: {q(public_key)}\nsecret_key: {q(secret_key)}\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return Path(path)


def tail(path, lines=40):
    try:
        data = Path(path).read_text(errors="replace").splitlines()
    except OSError as e:
        return f"<cannot read {path}: {e}>"
    return "\n".join(data[-lines:])


def sanitizer_lines(text):
    return [ln for ln in text.splitlines() if any(p in ln for p in SANITIZER_PATTERNS)]


def log_sanitizer_problem(path):
    """A problem string when the log at path holds a sanitizer report, else None."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return None
    found = sanitizer_lines(text)
    if not found:
        return None
    return (f"sanitizer report in {path}:\n" + "\n".join(found[:10]) +
            f"\n--- log tail ---\n{tail(path, 60)}")


def pid_alive(pid):
    """Whether pid is a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return False
    # state is the field after the ")" that closes the command name
    state = st[st.rfind(")") + 2:st.rfind(")") + 3]
    return state not in ("Z", "X", "")


def _environs(*entries):
    """(pid, environment entries) of live processes whose environment holds every
    one of entries (exact KEY=VALUE strings)."""
    want = [e.encode() for e in entries]
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if all(w in env for w in want) and pid_alive(int(d)):
            yield int(d), env


def procs_with_env(*entries):
    """Pids of processes whose environment holds every one of entries
    (exact KEY=VALUE strings)."""
    return [pid for pid, _ in _environs(*entries)]


def procs_running(argv, pids=None):
    """Of pids (every process when None), those whose command line is argv (its
    first word compared by its base name)."""
    want = [a.encode() for a in argv]
    if pids is None:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")[:-1]
        except OSError:
            continue
        if words and os.path.basename(words[0]) == want[0] and words[1:] == want[1:]:
            found.append(pid)
    return found


def proc_state(pid):
    """The state letter of pid from /proc/PID/stat ('R', 'S', 'T', ...), or None
    when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return None
    return st[st.rfind(")") + 2:st.rfind(")") + 3] or None


def procs_env_values(name, *entries):
    """{pid: value} of live processes whose environment has variable `name`
    and every one of entries (exact KEY=VALUE strings)."""
    key = name.encode() + b"="
    found = {}
    for pid, env in _environs(*entries):
        value = next((e[len(key):] for e in env if e.startswith(key)), None)
        if value is not None:
            found[pid] = value.decode(errors="replace")
    return found


# ---------------------------------------------------------------------------
# processes


class Proc:
    """A daemon we started: Popen handle plus its log file."""

    def __init__(self, name, argv, log, env, cwd):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log = Path(log)
        self.expected_exit = False
        with open(self.log, "ab") as lf:
            lf.write(f"### {' '.join(self.argv)}\n".encode())
            lf.flush()
            self.popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=lf,
                                          stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                          start_new_session=True)

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def returncode(self):
        return self.popen.poll()

    def send_signal(self, sig):
        if self.alive():
            self.popen.send_signal(sig)

    def kill(self, sig=signal.SIGKILL, timeout=DEADLINE):
        """Send sig (SIGKILL by default) and wait for the process to go."""
        self.expected_exit = True
        self.send_signal(sig)
        wait_for(lambda: not self.alive(), timeout, f"{self.name} to exit after {sig!r}")
        return self.popen.returncode

    def wait_exit(self, timeout=DEADLINE):
        """Wait (with deadline) for the process to exit on its own; its exit status."""
        self.expected_exit = True
        wait_for(lambda: not self.alive(), timeout, f"{self.name} to exit")
        return self.popen.returncode

    def output(self):
        return self.log.read_text(errors="replace")

    def stop(self):
        """SIGTERM, then SIGKILL after STOP_GRACE. Returns a problem string or None."""
        return self.stop_wait(self.stop_begin())

    def stop_begin(self):
        """stop(), first half: SIGTERM, if alive. When it was sent, or None."""
        if not self.alive():
            return None
        self.popen.send_signal(signal.SIGTERM)
        return time.monotonic()

    def stop_wait(self, sent):
        """stop(), second half: wait until STOP_GRACE after `sent` (stop_begin's; None:
        nothing to wait for), then SIGKILL. A problem string or None."""
        if sent is None:
            return None
        try:
            self.popen.wait(max(0.0, sent + STOP_GRACE - time.monotonic()))
            return None
        except subprocess.TimeoutExpired:
            stacks = self.stacks()
            self.popen.kill()
            self.popen.wait(10)
            return (f"{self.name} (pid {self.pid}) did not exit within {STOP_GRACE}s of "
                    f"SIGTERM{stacks}")

    def stacks(self):
        """Every thread's stack of the live process, as gdb prints them, to say where a
        process that will not stop is stuck; '' when gdb is not installed or fails."""
        if not shutil.which("gdb"):
            return ""
        try:
            r = subprocess.run(["gdb", "-batch", "-nx", "-p", str(self.pid),
                                "-ex", "thread apply all bt"],
                               capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        keep = [ln for ln in r.stdout.splitlines() if ln.startswith(("Thread ", "#"))]
        return "; where its threads were:\n" + "\n".join(keep) if keep else ""


class Tmux:
    """A tmux server of a test module's own (tmux -L NAME): tmux(*args) runs a
    tmux command on it (failing the test unless check=False), pane() reads a
    session's screen, kill() ends the server and its sessions."""

    def __init__(self, prefix):
        self.socket = f"{prefix}-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args, check=True):
        r = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                           text=True, timeout=30)
        if check:
            assert r.returncode == 0, f"tmux {' '.join(args)} failed: {r.stderr}"
        return r

    def pane(self, session, join=False):
        """The screen of session; join: wrapped lines joined."""
        return self("capture-pane", "-p", *(["-J"] if join else []), "-t", session).stdout

    def kill(self):
        self("kill-server", check=False)

    def wait_pane(self, session, pred, what, join=False):
        """pred's first true value on session's screen, within DEADLINE; the
        screen is shown when it never comes."""
        seen = {}

        def check():
            seen["text"] = t = self.pane(session, join)
            return pred(t)

        try:
            return wait_for(check, DEADLINE, what)
        except AssertionError as e:
            raise AssertionError(f"{e}\npane:\n{seen.get('text')}") from None


class CliError(AssertionError):
    pass


class Cluster:
    """A coordinator (and agents) running for real in tmp dir `root`.

    c = Cluster(tmp_path); c.init(); c.start_coordinator(); c.add_agents(2)
    """

    def __init__(self, root, heartbeat="250ms", node_timeout="10s", host="127.0.0.1"):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.logs_dir = self.root / "logs"
        self.logs_dir.mkdir(exist_ok=True)
        self.data = self.root / "coordinator"
        self.port = None
        self.endpoint = None
        self.host = host  # the address brambled listens on (init --listen)
        self.coordinator_started = None  # time.monotonic() of the latest start
        self.heartbeat = heartbeat
        self.node_timeout = node_timeout
        self.procs = []  # every Proc ever started, in order
        self.coordinator = None
        self.agents = {}  # name -> Proc (latest)
        self.extra_logs = []  # log files written by processes we did not start
        self.problems = []  # found during the test: sanitizer output of CLI runs
        self.reported = set()  # what running_problems() reported already
        self.marker = "bramble-it-" + uuid.uuid4().hex[:12]
        self.env = dict(os.environ)
        self.env["BRAMBLE_TEST_CLUSTER"] = self.marker
        for k in ("BRAMBLE_CREDENTIAL",):
            self.env.pop(k, None)
        self.seq = 0

    # ---- binaries

    @staticmethod
    def bin(name):
        p = BIN / name
        if not p.exists():
            pytest.fail(f"{p} does not exist (set BRAMBLE_BIN to the build's bin/ dir)")
        return str(p)

    @property
    def credential(self):
        return self.data / "admin.credential"

    def log_path(self, name):
        n = 1
        p = self.logs_dir / f"{name}.log"
        while p.exists():
            n += 1
            p = self.logs_dir / f"{name}.{n}.log"
        return p

    def spawn(self, name, argv, env=None):
        proc = Proc(name, argv, self.log_path(name), env or self.env, self.root)
        self.procs.append(proc)
        return proc

    # ---- coordinator

    def init(self, port=None):
        self.port = port or free_port()
        self.endpoint = f"tcp://{self.host}:{self.port}"
        log = self.log_path("brambled-init")
        with open(log, "wb") as lf:
            r = subprocess.run([self.bin("brambled"), "init", "--data-dir", str(self.data),
                                "--listen", self.endpoint], stdout=lf,
                               stderr=subprocess.STDOUT, env=self.env, cwd=self.root,
                               timeout=CLI_TIMEOUT)
        self.extra_logs.append(log)
        assert r.returncode == 0, f"brambled init failed ({r.returncode}):\n{tail(log)}"
        assert self.credential.exists(), "brambled init wrote no admin.credential"
        return self

    def start_coordinator(self, extra=(), wait=True, wrap=()):
        """Start brambled (with extra flags); wrap: argv to run it under, which must
        exec it (`ip netns exec NS`)."""
        argv = list(wrap) + [self.bin("brambled"), "--data-dir", self.data]
        if self.heartbeat:
            argv += ["--heartbeat-interval", self.heartbeat]
        if self.node_timeout:
            argv += ["--node-timeout", self.node_timeout]
        argv += list(extra)
        self.coordinator_started = time.monotonic()
        self.coordinator = self.spawn("brambled", argv)
        if wait:
            self.wait_coordinator()
        return self.coordinator

    def wait_coordinator(self):
        def up():
            if not self.coordinator.alive():
                raise Fatal(f"brambled exited ({self.coordinator.returncode()}):\n"
                            f"{tail(self.coordinator.log)}")
            rc, _, _ = self.cli("nodes", "--json", check=False, timeout_flag="2s")
            return rc == 0

        wait_for(up, what="brambled to answer `bramble nodes`")

    # ---- CLI

    def cli(self, *args, check=True, credential=None, input=None, env=None,
            timeout_flag=None, timeout=CLI_TIMEOUT):
        """Run `bramble --credential CRED args...`: (rc, stdout, stderr)."""
        cred = self.credential if credential is None else credential
        argv = [self.bin("bramble")]
        if cred:
            argv += ["--credential", str(cred)]
        if timeout_flag:
            argv += ["--timeout", timeout_flag]
        argv += [str(a) for a in args]
        try:
            r = subprocess.run(argv, input=input, capture_output=True, text=True,
                               env=env or self.env, cwd=self.root, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise CliError(f"`{' '.join(argv)}` hung for more than {timeout}s "
                           f"(stderr so far: {e.stderr!r})") from None
        san = sanitizer_lines(r.stderr)
        if san:
            self.problems.append(f"sanitizer report from `{' '.join(argv)}`:\n{r.stderr}")
            raise Fatal(f"sanitizer report from `{' '.join(argv)}`:\n{r.stderr}")
        if check and r.returncode != 0:
            raise CliError(f"`{' '.join(argv)}` exited {r.returncode}\n"
                           f"stdout: {r.stdout}\nstderr: {r.stderr}")
        return r.returncode, r.stdout, r.stderr

    def cli_json(self, *args, **kw):
        _, out, _ = self.cli(*args, "--json", **kw)
        return json.loads(out)

    def token(self, uses=1, ttl="10m"):
        _, out, _ = self.cli("token", "create", "--uses", uses, "--ttl", ttl)
        tok = out.strip()
        assert tok and "\n" not in tok, f"token create printed {out!r}"
        return tok

    def nodes(self):
        return {n["name"]: n for n in self.cli_json("nodes")}

    def jobs(self, all=True):
        return self.cli_json("jobs", *(["--all"] if all else []))

    def job(self, job_id):
        return self.cli_json("job", "show", job_id)

    # ---- agents

    def agent_dir(self, name):
        return self.root / "agents" / name

    def forget_cached(self, name):
        """Node name's cache emptied by hand, as on a node that never held what it
        had: its trees, and the files they were made of (by hash, and their seals),
        where a pull would find them again. Waits for its agent to tell the
        coordinator (a heartbeat says its trees anew once the cache's trees changed)."""
        cache = self.agent_dir(name) / "cache"
        for sub in ("trees", ".by-hash", ".by-hash-seals"):
            if (cache / sub).exists():
                shutil.rmtree(cache / sub)
                (cache / sub).mkdir(mode=0o700)
        wait_for(lambda: not self.cli_json("node", "show", name).get("trees"),
                 what=f"{name} to say its cache holds no tree")

    def start_agent(self, name, token=None, extra=(), join=True, wrap=(), root_jobs=True):
        """Start bramble-agent for node `name`: the first time with --join TOKEN
        --name NAME (a fresh one-use token unless given), later starts (join=False)
        with --data-dir only. wrap: argv to run it under (it must exec the agent,
        as `ip netns exec NS` does). root_jobs=False: a root agent is left without
        --allow-root-jobs, as an admin who forgot it would start one."""
        argv = list(wrap) + [self.bin("bramble-agent"), "--data-dir", self.agent_dir(name)]
        if join:
            argv += ["--join", token or self.token(1), "--name", name]
            if not wrap:  # agents sharing the host's ports: each probes on its own,
                # and serves checkpoints on its own
                argv += ["--probe-port", "0", "--replica-port", "0"]
        argv += list(extra)
        if "--overlay" not in {str(x) for x in extra}:
            # agents sharing a network namespace would share its one WireGuard
            # interface: the overlay is for the tests that put each in its own
            argv += ["--overlay", "off"]
        if root_jobs and os.geteuid() == 0 and not {
                "--job-user", "--job-uids", "--allow-root-jobs"} & {str(x) for x in extra}:
            # a root agent runs jobs as root only when told so by name; the tests'
            # jobs are the tester's own
            argv.append("--allow-root-jobs")
        proc = self.spawn(f"agent-{name}", argv)
        self.agents[name] = proc
        return proc

    def add_agents(self, n, extra=(), names=None):
        names = names or [f"node-{i}" for i in range(1, n + 1)]
        tok = self.token(uses=len(names))
        for name in names:
            self.start_agent(name, token=tok, extra=extra)
        self.wait_ready(*names)
        return names

    def wait_ready(self, *names, state="ready"):
        def ready():
            for name in names:
                p = self.agents.get(name)
                if p is not None and not p.expected_exit and not p.alive():
                    raise Fatal(f"agent {name} exited ({p.returncode()}):\n{tail(p.log)}")
            nodes = self.nodes()
            return all(n in nodes and nodes[n]["state"] == state for n in names)

        wait_for(ready, what=f"nodes {', '.join(names)} to be {state}")

    # ---- jobs

    def write_spec(self, text, name="job.yaml"):
        p = self.root / "specs" / name
        p.parent.mkdir(exist_ok=True)
        if p.exists():
            p = p.with_name(f"{p.stem}-{secrets.token_hex(3)}{p.suffix}")
        p.write_text(text)
        return p

    def submit(self, text, *extra):
        spec = self.write_spec(text)
        out = self.cli_json("submit", spec, *extra)
        assert isinstance(out.get("id"), int), f"submit --json printed {out!r}"
        return out["id"]

    def wait_job(self, job_id, states=("completed", "failed", "cancelled"),
                 timeout=DEADLINE):
        """Wait until job_id is in one of states; the job object."""
        if isinstance(states, str):
            states = (states,)
        seen = {}

        def check():
            self.fatal_if_dead()
            seen["job"] = j = self.job(job_id)
            return j if j["state"] in states else None

        try:
            return wait_for(check, timeout, f"job {job_id} to be {'/'.join(states)}")
        except AssertionError as e:
            j = seen.get("job")
            if j:
                j = {k: v for k, v in j.items() if k not in ("spec",)}
            raise AssertionError(f"{e}\nlast seen: {json.dumps(j, indent=1)}") from None

    def logs(self, job_id, *extra, stream="stdout"):
        """`bramble logs ID`: the job's stdout (stream="stdout"), its stderr
        ("stderr"; the CLI writes the job's stderr to its own stderr) or both."""
        _, out, err = self.cli("logs", job_id, *extra)
        return {"stdout": out, "stderr": err, "both": out + err}[stream]

    def wait_logs(self, job_id, needle, timeout=DEADLINE, stream="stdout"):
        def check():
            self.fatal_if_dead()
            out = self.logs(job_id, stream=stream)
            return out if needle in out else None

        return wait_for(check, timeout, f"`bramble logs {job_id}` to show {needle!r} on {stream}")

    # ---- job processes and node loss

    def task_procs(self, tag_prefix=""):
        """{pid: BRAMBLE_TASK tag} of this cluster's live job processes whose tag
        (`<node>/<job>.<attempt>.<rank>`) starts with tag_prefix."""
        return {pid: tag for pid, tag in
                procs_env_values("BRAMBLE_TASK", f"BRAMBLE_TEST_CLUSTER={self.marker}").items()
                if tag.startswith(tag_prefix)}

    def job_procs(self, job_id):
        """{pid: BRAMBLE_TASK tag} of every live process of job_id (any node, any
        attempt)."""
        return {pid: tag for pid, tag in self.task_procs().items()
                if tag.split("/", 1)[-1].split(".")[0] == str(job_id)}

    def kill_node(self, name, timeout=DEADLINE):
        """Kill node `name` as a machine dying would: its agent and every process of
        its jobs (BRAMBLE_TASK=<name>/...) are stopped at once, then SIGKILLed.
        Returns the wall-clock time (time.time()) just before the first signal."""
        agent = self.agents[name]
        agent.expected_exit = True
        t = time.time()
        pids = set(self.task_procs(f"{name}/"))
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in [agent.pid] + sorted(pids):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass

        def gone():
            left = self.task_procs(f"{name}/")
            for pid in left:  # forked in between
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            return not left and not agent.alive()

        wait_for(gone, timeout, f"node {name}'s agent and job processes to be gone")
        return t

    # ---- raw clients

    def admin_keys(self):
        cred = read_yaml_flat(self.credential)
        return cred["public_key"], cred["secret_key"], cred["server_public_key"]

    def raw_client(self, public=None, secret=None):
        pub, sec, server = self.admin_keys()
        return RawClient(self.endpoint, server, public or pub, secret or sec)

    # ---- checks

    def fatal_if_dead(self):
        """Stop a wait at once when brambled died (and was not meant to)."""
        p = self.coordinator
        if p is not None and not p.expected_exit and not p.alive():
            raise Fatal(f"brambled died (status {p.returncode()}):\n{tail(p.log)}")

    def assert_alive(self):
        """brambled and every agent not meant to exit are still running."""
        for p in self.procs:
            if not p.expected_exit:
                assert p.alive(), f"{p.name} died (status {p.returncode()}):\n{tail(p.log)}"

    def log_files(self):
        return [p.log for p in self.procs] + list(self.extra_logs)

    def log_tails(self, lines=40):
        out = []
        for f in self.log_files():
            out.append(f"----- {f} (last {lines} lines) -----\n{tail(f, lines)}")
        return "\n".join(out)

    def running_problems(self):
        """Problems found so far, each only once, while the cluster runs on (for a
        cluster that several tests share): sanitizer reports of CLI runs, daemons
        that exited unexpectedly, sanitizer reports in the logs. teardown() reports
        the others."""
        reported = self.reported
        problems = []
        for i, msg in enumerate(self.problems):
            if ("cli", i) not in reported:
                reported.add(("cli", i))
                problems.append(msg)
        for p in self.procs:
            if not p.expected_exit and not p.alive() and ("exit", p.pid) not in reported:
                reported.add(("exit", p.pid))
                problems.append(f"{p.name} (pid {p.pid}) exited unexpectedly with status "
                                f"{p.returncode()}")
        for f in self.log_files():
            msg = None if ("log", str(f)) in reported else log_sanitizer_problem(f)
            if msg:
                reported.add(("log", str(f)))
                problems.append(msg)
        return problems

    def teardown(self):
        """Stop everything; a list of problems (empty when clean), but for those
        running_problems() reported already."""
        reported = self.reported
        problems = [msg for i, msg in enumerate(self.problems) if ("cli", i) not in reported]
        for p in self.procs:
            if not p.expected_exit and not p.alive() and ("exit", p.pid) not in reported:
                problems.append(f"{p.name} (pid {p.pid}) exited unexpectedly with status "
                                f"{p.returncode()}")
        # agents first (they may want to tell the coordinator), coordinator last;
        # the agents all at once, as the machines of a cluster shutting down
        for group in ([p for p in self.procs if p.name != "brambled"],
                      [p for p in self.procs if p.name == "brambled"]):
            for p, sent in [(p, p.stop_begin()) for p in group]:
                msg = p.stop_wait(sent)
                if msg:
                    problems.append(msg)
        # job processes left behind by agents (inherit the marker from the agent)
        left = procs_with_env(f"BRAMBLE_TEST_CLUSTER={self.marker}")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for f in self.log_files():
            msg = None if ("log", str(f)) in reported else log_sanitizer_problem(f)
            if msg:
                problems.append(msg)
        return problems


# ---------------------------------------------------------------------------
# raw CURVE client speaking (or deliberately mis-speaking) the wire protocol


def header(type_, seq, kind=KIND_REQUEST, flags=0, magic=MAGIC, version=VERSION):
    t = type_.encode() if isinstance(type_, str) else type_
    return magic + bytes([version, kind]) + struct.pack(">I", seq) + bytes([flags, len(t)]) + t


class RawClient:
    """A DEALER with CURVE, as the CLI has, for sending hand-made frames (none when
    server_key is None: the relay's socket, whose ends seal their own frames)."""

    def __init__(self, endpoint, server_key, public=None, secret=None, reconnect=True):
        self.endpoint = endpoint
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if server_key is not None:
            self.sock.curve_serverkey = server_key.encode()
            self.sock.curve_publickey = public.encode()
            self.sock.curve_secretkey = secret.encode()
        self.monitor = None
        if not reconnect:  # a connection the peer drops stays dropped, and is seen so
            self.sock.setsockopt(zmq.RECONNECT_IVL, -1)
            self.monitor = self.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.sock.connect(endpoint)
        self.seq = 1000

    def send(self, frames, flags=0):
        self.sock.send_multipart(frames, flags)

    def recv(self, timeout=DEADLINE):
        if self.sock.poll(int(timeout * 1000), zmq.POLLIN):
            return self.sock.recv_multipart()
        return None

    def request(self, type_, body=None, timeout=DEADLINE, data=None):
        """Send one well-formed request; (header dict, body dict, data) of its
        response (other messages in between are skipped)."""
        self.seq += 1
        seq = self.seq
        frames = [header(type_, seq, flags=FLAG_DATA if data is not None else 0),
                  json.dumps(body if body is not None else {}).encode()]
        if data is not None:
            frames.append(data)
        self.send(frames)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"no response to {type_} (seq {seq}) within {timeout}s")
            msg = self.recv(left)
            if msg is None:
                continue
            h = parse_header(msg[0])
            if h and h["kind"] == KIND_RESPONSE and h["seq"] == seq:
                return h, json.loads(msg[1]), (msg[2] if len(msg) > 2 else None)

    def disconnected(self):
        """Whether the peer dropped the connection (reconnect=False only)."""
        return bool(self.monitor.poll(0, zmq.POLLIN))

    def close(self):
        if self.monitor is not None:
            self.sock.disable_monitor()
            self.monitor.close(0)
        self.sock.close(0)
        self.ctx.term()


def parse_header(frame):
    if len(frame) < 10 or frame[:2] != MAGIC:
        return None
    n = frame[9]
    return {"version": frame[2], "kind": frame[3], "seq": struct.unpack(">I", frame[4:8])[0],
            "flags": frame[8], "type": frame[10:10 + n].decode(errors="replace")}


# ---------------------------------------------------------------------------
# fixtures and reporting


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    clusters = getattr(item, "_bramble_clusters", [])
    if rep.failed and clusters:
        for c in clusters:
            rep.sections.append((f"bramble logs ({c.root})", c.log_tails()))


def start_cluster(parent, made, start=True, **kw):
    """A Cluster in parent/c<N>, initialised and, unless start=False, with its
    coordinator answering (kw: Cluster's). Every Cluster made, one per try, is
    appended to made, for the caller to tear down."""
    for attempt in range(3):
        c = Cluster(Path(parent) / f"c{len(made)}", **kw)
        made.append(c)
        c.init()
        if not start:
            return c
        try:
            c.start_coordinator()
            return c
        except Fatal as e:
            # the free port was taken by someone else in between: another port
            if "in use" not in str(e) or attempt == 2:
                raise
            c.coordinator.expected_exit = True
    raise AssertionError("unreachable")


@pytest.fixture
def make_cluster(tmp_path, request):
    """Factory: make_cluster(heartbeat=..., node_timeout=..., start=True) -> Cluster
    (initialised and, unless start=False, with its coordinator answering)."""
    made = []
    request.node._bramble_clusters = made

    def make(start=True, **kw):
        return start_cluster(tmp_path, made, start, **kw)

    yield make
    teardown_clusters(made)


def teardown_clusters(made):
    """Tear down every Cluster in made; fail (the test, or the last one of a
    module-scoped fixture) with the problems found."""
    problems = []
    for c in made:
        problems += c.teardown()
    if problems:
        # (the logs' tails are attached to the report by pytest_runtest_makereport)
        pytest.fail("teardown found problems:\n" + "\n\n".join(problems), pytrace=False)


def shared_cluster_test(c, request):
    """Generator for a function-scoped fixture around cluster c, which several tests
    share: yields c to the test (whose report then carries c's logs), and fails it
    with the problems found while it ran (running_problems) afterwards."""
    request.node._bramble_clusters = [c]
    yield c
    problems = c.running_problems()
    if problems:
        pytest.fail("problems found:\n" + "\n\n".join(problems), pytrace=False)


@pytest.fixture
def cluster(make_cluster):
    """An initialised coordinator, running, no agents yet."""
    return make_cluster()


@pytest.fixture
def cluster2(make_cluster):
    """A coordinator with two ready agents, node-1 and node-2."""
    c = make_cluster()
    c.add_agents(2)
    return c


@pytest.fixture(scope="module")
def module_cluster2(tmp_path_factory):
    made = []
    try:
        c = start_cluster(tmp_path_factory.mktemp("shared"), made)
        c.add_agents(2)
        yield c
    finally:
        teardown_clusters(made)


@pytest.fixture
def shared_cluster2(module_cluster2, request):
    """cluster2, but one for all the tests of a module that use this fixture: for
    tests that leave each other alone (job names of their own, nodes left ready).
    After each test, sanitizer reports and daemons that died fail it."""
    yield from shared_cluster_test(module_cluster2, request)
