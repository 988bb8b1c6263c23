"""The Raspberry Pi builds (arm64 and armhf), checked here under qemu-user.

tests/cross-build.sh ARCH cross-builds bramble-agent, bramble and brambled for
aarch64-linux-gnu (arm64, 64-bit Raspberry Pi OS) or arm-linux-gnueabihf (armhf,
32-bit Raspberry Pi OS) into build-ARCH/ (installing the cross compiler, qemu-user
and the target's libraries first when they are missing: multiarch :ARCH -dev
packages, or else a sysroot downloaded for ARCH alone). This test runs it (it
only rebuilds what changed once everything is there, so the cross-built agent
always speaks the current protocol), then starts an x86-64 coordinator (the usual
BRAMBLE_BIN build, sanitizers or not) and one agent that is the ARCH binary run
by qemu-aarch64 / qemu-arm, and checks that the agent joins, reports its arch
("aarch64", "armv7l") and completes a job whose log reaches the coordinator.

The build dirs are REPO/build-arm64 and REPO/build-armhf, or build-ARCH under
$BRAMBLE_CROSS_DIR when that is set.

Skipped, with the script's "SKIP: ..." reason, only when the packages cannot be
had (no network, apt refuses, no root) and so nothing could be built.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, tail, wait_for

CROSS_SCRIPT = REPO / "tests" / "cross-build.sh"
CROSS_DIR = Path(os.environ.get("BRAMBLE_CROSS_DIR") or REPO)
# installing the packages the first time downloads ~100 MB and builds everything
CROSS_TIMEOUT = 1500
# qemu-user emulation makes the agent several times slower than native
SLOW = 120

# Debian arch -> (qemu-user binary, what `file` says, uname -m under that qemu)
ARCHES = {
    "arm64": ("qemu-aarch64", "ARM aarch64", "aarch64"),
    "armhf": ("qemu-arm", "ARM, EABI5", "armv7l"),
}


def cross_build(arch, build_dir):
    """Run tests/cross-build.sh ARCH BUILD_DIR; its output. Fails the test when the
    script fails (the packages are there but the build broke)."""
    try:
        r = subprocess.run(["bash", str(CROSS_SCRIPT), arch, str(build_dir)], cwd=REPO,
                           capture_output=True, text=True, timeout=CROSS_TIMEOUT,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        pytest.fail(f"tests/cross-build.sh {arch} did not finish within {CROSS_TIMEOUT}s:"
                    f"\n{out[-3000:]}")
    out = r.stdout + r.stderr
    if r.returncode != 0:
        pytest.fail(f"tests/cross-build.sh {arch} failed (exit {r.returncode}):\n"
                    f"{out[-5000:]}")
    return out


def skip_reason(out):
    for line in out.splitlines():
        if line.startswith("SKIP:"):
            return line[len("SKIP:"):].strip()
    return None


def qemu_ld_prefix(build_dir):
    """Where qemu finds the target's dynamic loader and libraries: what the script
    recorded (/ with multiarch, whose :ARCH libraries live in /lib and
    /usr/lib/<triplet>; the sysroot otherwise)."""
    recorded = build_dir / "qemu-ld-prefix"
    if recorded.exists():
        return recorded.read_text().strip()
    return "/"


@pytest.fixture(scope="module", params=sorted(ARCHES))
def arm_agent(request):
    """(arch, qemu, agent binary, QEMU_LD_PREFIX) for a freshly cross-built agent."""
    arch = request.param
    qemu_name, file_match, _ = ARCHES[arch]
    build_dir = CROSS_DIR / f"build-{arch}"
    agent = build_dir / "bin" / "bramble-agent"
    out = cross_build(arch, build_dir)
    if not agent.exists():
        pytest.skip(f"{arch} agent not built: {skip_reason(out) or out[-500:]}")
    reason = skip_reason(out)
    if reason:
        # packages gone since an earlier build: test the binary that is there
        print(f"cross-build.sh {arch}: SKIP {reason}; using the existing {agent}")
    qemu = shutil.which(qemu_name) or shutil.which(f"{qemu_name}-static")
    if not qemu:
        pytest.skip(f"{qemu_name} not found (Debian package qemu-user): cannot run the "
                    f"{arch} agent here")
    desc = subprocess.run(["file", "-b", str(agent)], capture_output=True,
                          text=True).stdout
    assert file_match in desc, f"{agent} is not an {arch} binary: {desc}"
    return arch, qemu, agent, qemu_ld_prefix(build_dir)


def node_arch(node):
    if "arch" in node:
        return node["arch"]
    for key in ("inventory", "hardware"):
        if isinstance(node.get(key), dict) and "arch" in node[key]:
            return node[key]["arch"]
    return None


def test_arm_agent_under_qemu_joins_and_runs_a_job(make_cluster, arm_agent):
    arch, qemu, arm_agent_bin, ld_prefix = arm_agent
    want_arch = ARCHES[arch][2]
    c = make_cluster()  # x86-64 brambled from BRAMBLE_BIN
    name = "pi-1"
    env = dict(c.env)
    env["QEMU_LD_PREFIX"] = ld_prefix
    # only the agent is emulated: what it execs (the job's /bin/sh) is an x86-64
    # binary that the kernel runs natively (no binfmt_misc needed or used)
    argv = [qemu, arm_agent_bin, "--data-dir", c.agent_dir(name), "--join", c.token(1),
            "--name", name, "--gpus", "none"]
    if os.geteuid() == 0:  # the tester's own job: a root agent runs it as root only so told
        argv.append("--allow-root-jobs")
    agent = c.spawn(f"agent-{name}", argv, env=env)
    c.agents[name] = agent

    def ready():
        if not agent.alive():
            raise AssertionError(f"{arch} agent exited ({agent.returncode()}):\n"
                                 f"{tail(agent.log)}")
        n = c.nodes().get(name)
        return n if n and n["state"] == "ready" else None

    node = wait_for(ready, SLOW, f"{arch} agent {name} (under qemu) to be ready")
    # uname(2) under qemu-aarch64 / qemu-arm: what a Pi running that OS reports
    assert node_arch(node) == want_arch, node

    # The job prints its node's name, not `uname -m`: the agent runs under qemu
    # but the job it starts is the host's x86-64 /bin/sh, run natively, so
    # `uname -m` in the job would say x86_64 here (on a real Pi it says what the
    # agent reports). The arch check is the agent's own report above.
    jid = c.submit(f"name: {arch}-hello\n"
                   "command: echo \"hello from $BRAMBLE_NODE_NAME\"\n")
    job = c.wait_job(jid, timeout=SLOW)
    assert job["state"] == "completed", job
    assert job["exit_code"] == 0, job
    assert job["nodes"] == [name], job
    out = c.wait_logs(jid, f"hello from {name}", timeout=SLOW)
    assert out.strip().splitlines() == [f"hello from {name}"], out
    c.assert_alive()
