"""`setup:`: a command run before the job's command on each node, its result (the
directory BRAMBLE_ENV_DIR, for example a virtual environment) kept in the node's
cache and shared by later jobs with the same setup and setup_files.

The agents run in mount namespaces where the submitting "laptop" is out of sight:
the code (a requirements.txt and a wheel made here; no package index is reachable)
travels with the job, and each node builds its own environment. Debian's Python
makes a venv with --system-site-packages and pip installs the local wheel: once
for two jobs on one node, again on another node, again when requirements.txt
changes. Jobs that need one setup at once wait for one run; a failed setup ends
the attempt with its last lines as the reason and leaves nothing behind; a setup
that never ends is ended by the job's time limit, its output kept."""
import base64
import hashlib
import io
import os
import zipfile

import pytest

from conftest import wait_for
from treefiles import laptop_cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for mount namespaces")

PYTHON = "/usr/bin/python3"


def make_wheel(path, name="brhello", version="1.0"):
    """A pure-Python wheel of one module whose greet() names it."""
    files = {
        f"{name}/__init__.py": f"def greet():\n    return 'hello from {name} {version}'\n",
        f"{name}-{version}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{name}-{version}.dist-info/WHEEL":
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for p, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{p},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join(record) + "\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
    path.write_bytes(buf.getvalue())


MAIN = """\
import os, sys
import brhello, zmq
env = os.environ["BRAMBLE_ENV_DIR"]
print(brhello.greet())
print("prefix-is-env", sys.prefix == env)
print("system-zmq", zmq.__file__.startswith("/usr/lib/python3"))
print("runs", open(os.path.join(env, "runs")).read().count("x"))
print("env", env)
"""

SETUP = f"""\
{PYTHON} -m venv --system-site-packages "$BRAMBLE_ENV_DIR"
"$BRAMBLE_ENV_DIR/bin/pip" install --no-index --no-cache-dir --find-links wheels \\
    -r requirements.txt
echo x >> "$BRAMBLE_ENV_DIR/runs"
"""


def venv_spec(laptop, name, node):
    spec = laptop / f"{name}.yaml"
    body = "\n".join("  " + line for line in SETUP.splitlines())
    spec.write_text(f"name: {name}\ncode: proj\nsetup: |\n{body}\n"
                    f"setup_files: [requirements.txt]\n"
                    f"command: '\"$BRAMBLE_ENV_DIR/bin/python\" main.py'\n"
                    f"resources: {{cpus: 0, nodelist: [{node}]}}\n")
    return spec


def run(c, spec, *extra):
    _, out, _ = c.cli("submit", spec, *extra)
    jid = int(out.strip())
    j = c.wait_job(jid, timeout=180)
    assert j["state"] == "completed", (j["reason"], c.logs(jid, stream="both"))
    return jid, c.logs(jid, stream="both")


def value(log, key):
    return [ln.split(" ", 1)[1] for ln in log.splitlines() if ln.startswith(key + " ")][-1]


def env_dirs(c, node):
    """The environments node keeps for uid 0: directory names."""
    d = c.agent_dir(node) / "cache" / "envs" / "0"
    return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.exists() else []


def test_venv_built_once_per_node_and_again_when_requirements_change(make_cluster, tmp_path):
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path)
    proj = laptop / "proj"
    (proj / "wheels").mkdir(parents=True)
    make_wheel(proj / "wheels" / "brhello-1.0-py3-none-any.whl")
    (proj / "requirements.txt").write_text("brhello\n")
    (proj / "main.py").write_text(MAIN)

    a, log_a = run(c, venv_spec(laptop, "venv-a", "node-1"))
    assert "[setup] running the setup" in log_a, log_a
    assert "hello from brhello 1.0" in log_a
    assert value(log_a, "prefix-is-env") == "True"
    assert value(log_a, "system-zmq") == "True"  # Debian's packages seen through the venv
    assert value(log_a, "runs") == "1"

    # a second job on the same node: the environment is there, nothing runs
    b, log_b = run(c, venv_spec(laptop, "venv-b", "node-1"))
    assert "[setup]" not in log_b, log_b
    assert value(log_b, "env") == value(log_a, "env")
    assert value(log_b, "runs") == "1"

    # another node builds its own
    _, log_c = run(c, venv_spec(laptop, "venv-c", "node-2"))
    assert "[setup] running the setup" in log_c, log_c
    assert value(log_c, "runs") == "1"
    assert env_dirs(c, "node-2") == [os.path.basename(value(log_c, "env"))]

    # requirements.txt changed: a new environment, built anew
    make_wheel(proj / "wheels" / "brhello-2.0-py3-none-any.whl", version="2.0")
    (proj / "requirements.txt").write_text("brhello==2.0\n")
    _, log_d = run(c, venv_spec(laptop, "venv-d", "node-1"))
    assert "[setup] running the setup" in log_d, log_d
    assert "hello from brhello 2.0" in log_d
    assert value(log_d, "env") != value(log_a, "env")
    assert len(env_dirs(c, "node-1")) == 2


def test_one_setup_at_once_for_jobs_that_share_it(make_cluster, tmp_path):
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1)
    gate = tmp_path / "gate"  # (seen by the agents: not the laptop)
    spec = laptop / "shared.yaml"
    spec.write_text(
        "name: shared\n"
        f"setup: while [ ! -e {gate} ]; do sleep 0.1; done; echo x >> \"$BRAMBLE_ENV_DIR/runs\"\n"
        "command: echo runs=$(grep -c x \"$BRAMBLE_ENV_DIR/runs\")\n"
        "resources: {cpus: 0}\n")
    ids = [int(c.cli("submit", spec, "--set", f"name=shared-{i}")[1]) for i in (1, 2)]
    for jid in ids:
        c.wait_job(jid, "running")
    wait_for(lambda: any("[setup] running the setup" in c.logs(j) for j in ids),
             what="one job to run the setup")
    wait_for(lambda: any("another job is running this setup on this node: waiting for it"
                         in c.logs(j) for j in ids),
             what="the other job to wait for it")
    gate.write_text("go")
    for jid in ids:
        j = c.wait_job(jid)
        assert j["state"] == "completed", (j["reason"], c.logs(jid, stream="both"))
        assert "runs=1\n" in c.logs(jid), c.logs(jid, stream="both")


def test_failed_and_endless_setups(make_cluster, tmp_path):
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1)
    bad = laptop / "bad.yaml"
    bad.write_text("name: bad-setup\n"
                   "setup: |\n  echo made > \"$BRAMBLE_ENV_DIR/half\"\n"
                   "  echo 'ERROR: No matching distribution found for torch' >&2\n  exit 3\n"
                   "command: echo never\nresources: {cpus: 0}\n")
    _, out, _ = c.cli("submit", bad)
    jid = int(out)
    j = c.wait_job(jid)
    assert j["state"] == "failed", j
    assert j["reason"].startswith("setup failed: exit code 3 after "), j["reason"]
    assert j["reason"].endswith("ERROR: No matching distribution found for torch"), j["reason"]
    assert "never" not in c.logs(jid)
    assert "[setup] ERROR: No matching distribution found for torch" in \
        c.logs(jid, stream="stderr")
    assert env_dirs(c, "node-1") == []  # nothing of the failed run is kept
    left = os.listdir(c.agent_dir("node-1") / "cache" / "envs" / "0")
    assert not [n for n in left if n.startswith(".failed-")], left

    endless = laptop / "endless.yaml"
    endless.write_text("name: endless-setup\ntime_limit: 3s\n"
                       "setup: echo started; exec sleep 600\n"
                       "command: echo never\nresources: {cpus: 0}\n")
    _, out, _ = c.cli("submit", endless)
    jid = int(out)
    j = c.wait_job(jid)
    assert j["state"] == "failed" and "time limit 3s reached" in j["reason"], j
    assert "[setup] started" in c.logs(jid)
    wait_for(lambda: env_dirs(c, "node-1") == [], what="the stopped setup's directory to go")


def test_setup_files_refused(make_cluster, tmp_path):
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1)
    (laptop / "proj").mkdir()
    (laptop / "proj" / "main.py").write_text("print(1)\n")
    (laptop / "proj" / "sub").mkdir()
    with open(laptop / "proj" / "big.bin", "wb") as f:
        f.truncate((16 << 20) + 1)  # (sparse)
    before = len(c.jobs())
    for files, why in [
        ("[big.bin]", "setup_files[0]: big.bin is 16777217 bytes, more than 16777216"),
        ("[requirements.txt]", "setup_files[0]: requirements.txt is not a file of the code sent"),
        ("[sub]", "setup_files[0]: sub is not a file of the code sent"),
        ("[../etc/passwd]", "setup_files[0]: expected a path inside the code dir"),
    ]:
        spec = laptop / "s.yaml"
        spec.write_text(f"name: s\ncode: proj\nsetup: make\nsetup_files: {files}\n"
                        "command: x\n")
        rc, _, err = c.cli("submit", spec, check=False)
        assert rc != 0 and why in err, (files, err)
    assert len(c.jobs()) == before


def envs_shown(c, node):
    return c.cli_json("node", "show", node).get("envs", [])


def test_node_lists_removes_and_trims_environments(make_cluster, tmp_path):
    """node show lists what the setups built (key, uid, size); node env rm removes one
    (the next job with that setup runs it again); past --cache-quota the
    environment used longest ago leaves the cache."""
    c, laptop, _ = laptop_cluster(make_cluster, tmp_path, n=1,
                                  extra=("--cache-quota", "3MiB"))

    def spec(name, mib, tag):
        p = laptop / f"{name}.yaml"
        p.write_text(f"name: {name}\n"
                     f"setup: head -c {mib}M /dev/zero > \"$BRAMBLE_ENV_DIR/{tag}\"\n"
                     "command: ls \"$BRAMBLE_ENV_DIR\"\nresources: {cpus: 0}\n")
        return p

    run(c, spec("env-one", 1, "a"))
    shown = wait_for(lambda: envs_shown(c, "node-1") or None, what="node show to list it")
    assert len(shown) == 1 and shown[0]["uid"] == 0, shown
    assert 1 << 20 <= shown[0]["bytes"] < 2 << 20, shown
    key1 = shown[0]["key"]
    assert env_dirs(c, "node-1") == [key1]
    text = c.cli("node", "show", "node-1")[1]
    assert "environments:" in text and key1 in text, text

    # removed on request: gone from the node, and built again by the next job
    c.cli("node", "env", "rm", "node-1", key1)
    wait_for(lambda: env_dirs(c, "node-1") == [], what="the environment to be removed")
    wait_for(lambda: envs_shown(c, "node-1") == [], what="node show to list it no more")
    _, log = run(c, spec("env-one-again", 1, "a"))
    assert "[setup] running the setup" in log, log
    rc, _, err = c.cli("node", "env", "rm", "node-1", "0" * 32, check=False)
    assert rc != 0 and f"node node-1 keeps no environment '{'0' * 32}'" in err, err

    # the quota: 1 MiB + 2 MiB fit in 3 MiB; one more MiB does not, and the one used
    # longest ago (env-one's) leaves
    run(c, spec("env-two", 2, "b"))
    wait_for(lambda: len(env_dirs(c, "node-1")) == 2, what="two environments kept")
    run(c, spec("env-three", 1, "c"))
    wait_for(lambda: key1 not in env_dirs(c, "node-1") and len(env_dirs(c, "node-1")) == 2,
             what="the environment used longest ago to leave the cache")
    said = (c.logs_dir / "agent-node-1.log").read_text(errors="replace")
    assert f"environment {key1} (uid 0, " in said and "to make room" in said, said[-2000:]
