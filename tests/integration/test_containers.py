"""`image:`: a job whose processes run in an OCI container through Debian's podman.

The image is made here without a registry: a root filesystem of busybox-static,
`podman import`ed. A job in it sees the image's files, not the host's, runs as
the job's uid with its working directory and variables, and its output is the
job's log; cancel and the time limit reach the container's processes as they
reach a bare job's, and nothing of the container is left. A node whose agent runs
no containers takes no such job, and says why; a name that is not an image's is
refused at submit."""
import json
import os
import shutil
import subprocess
import uuid

import pytest

from conftest import wait_for

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for podman's containers"),
    pytest.mark.skipif(not shutil.which("podman") or not os.path.exists("/bin/busybox"),
                       reason="needs podman and busybox-static"),
]


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """A busybox image made here: its name."""
    root = tmp_path_factory.mktemp("rootfs")
    (root / "bin").mkdir()
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    for cmd in ("sh", "echo", "cat", "ls", "sleep", "id", "env", "test", "touch", "pwd"):
        os.symlink("busybox", root / "bin" / cmd)
    name = f"localhost/bramble-test-bb:{uuid.uuid4().hex[:8]}"
    tar = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True, check=True)
    subprocess.run(["podman", "import", "-", name], input=tar.stdout, capture_output=True,
                   check=True, timeout=120)
    yield name
    subprocess.run(["podman", "rmi", "-f", name], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, image):
    """node-1 runs containers; node-2's agent runs with --container-runtime none."""
    from conftest import start_cluster, teardown_clusters
    made = []
    try:
        c = start_cluster(tmp_path_factory.mktemp("ct"), made)
        tok = c.token(uses=2)
        c.start_agent("node-1", token=tok)
        c.start_agent("node-2", token=tok, extra=("--container-runtime", "none"))
        c.wait_ready("node-1", "node-2")
        yield c
    finally:
        teardown_clusters(made)


def containers_of(task_prefix):
    out = subprocess.run(["podman", "ps", "-a", "--format", "{{.Labels}}"],
                         capture_output=True, text=True, timeout=60).stdout
    return [ln for ln in out.splitlines() if f"bramble.task:{task_prefix}" in ln]


def submit(c, text):
    _, out, _ = c.cli("submit", c.write_spec(text))
    return int(out)


def test_a_job_runs_in_its_image(cluster, image, tmp_path):
    c = cluster
    work = tmp_path / "work"
    work.mkdir()
    jid = submit(c, f"name: in-image\nimage: {image}\nworkdir: {work}\n"
                    "env: {GREETING: hello-from-env}\n"
                    "resources: {cpus: 0, nodelist: [node-1]}\n"
                    "command: |\n"
                    "  echo \"job=$BRAMBLE_JOB_ID rank=$RANK greeting=$GREETING\"\n"
                    "  echo \"uid=$(id -u) pwd=$(pwd)\"\n"
                    "  test -e /usr/bin/podman && echo sees-the-host || echo own-root\n"
                    "  echo written > made-inside.txt\n")
    j = c.wait_job(jid)
    log = c.logs(jid, stream="both")
    assert j["state"] == "completed", (j["reason"], log)
    assert f"job={jid} rank=0 greeting=hello-from-env" in log, log
    assert f"uid=0 pwd={work}" in log, log
    assert "own-root" in log and "sees-the-host" not in log, log
    assert (work / "made-inside.txt").read_text() == "written\n"
    assert c.nodes()["node-1"]["container_runtime"] == "podman"
    wait_for(lambda: not containers_of(f"node-1/{jid}."), what="its container to go")


def test_cancel_and_time_limit_reach_the_container(cluster, image):
    c = cluster
    jid = submit(c, f"name: ct-cancel\nimage: {image}\n"
                    "resources: {cpus: 0, nodelist: [node-1]}\n"
                    "command: echo started; sleep 600\n")
    c.wait_job(jid, "running")
    c.wait_logs(jid, "started")
    assert containers_of(f"node-1/{jid}.")
    c.cli("cancel", jid)
    j = c.wait_job(jid)
    # SIGTERM ended it: not the SIGKILL after the grace
    assert j["state"] == "cancelled" and "after its grace" not in j["reason"], j
    wait_for(lambda: not containers_of(f"node-1/{jid}.") and not c.job_procs(jid),
             what="the container and its processes to go")

    jid = submit(c, f"name: ct-limit\nimage: {image}\ntime_limit: 2s\n"
                    "resources: {cpus: 0, nodelist: [node-1]}\n"
                    "command: echo started; sleep 600\n")
    j = c.wait_job(jid)
    assert j["state"] == "failed" and "time limit 2s reached" in j["reason"], j
    assert "started" in c.logs(jid)
    wait_for(lambda: not containers_of(f"node-1/{jid}.") and not c.job_procs(jid),
             what="the container and its processes to go")


def test_a_node_without_containers_takes_none(cluster, image):
    c = cluster
    jid = submit(c, f"name: ct-none\nimage: {image}\n"
                    "resources: {cpus: 0, nodelist: [node-2]}\ncommand: echo no\n")
    try:
        j = wait_for(lambda: (lambda j: j if "runs no containers" in (j["reason"] or "")
                              else None)(c.job(jid)),
                     what="the job's reason to say node-2 runs no containers")
        assert j["state"] == "pending", j
        assert c.nodes()["node-2"]["container_runtime"] is None
    finally:
        c.cli("cancel", jid, check=False)


def test_bad_image_names_refused(cluster):
    c = cluster
    before = len(c.jobs())
    for text, why in [
        ("image: 'x; rm -rf /'\n", "image: 'x; rm -rf /' is not an image name"),
        ("image: --privileged\n", "image: '--privileged' is not an image name"),
        ("image: a\nsetup: make\n", "setup: not with image: yet"),
    ]:
        rc, _, err = c.cli("submit", c.write_spec(f"name: bad\ncommand: x\n{text}"),
                           check=False)
        assert rc != 0 and why in err, (text, err)
    assert len(c.jobs()) == before
