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

from conftest import BIN, wait_for

FAKE_NVML = BIN.parent / "tests" / "fake_nvml"

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
    """node-1 runs containers; node-2's agent runs with --container-runtime none;
    gpu-1 runs containers and has two GPUs (the fake NVML: their UUIDs end in 0
    and 1)."""
    from conftest import start_cluster, teardown_clusters
    made = []
    try:
        root = tmp_path_factory.mktemp("ct")
        c = start_cluster(root, made)
        tok = c.token(uses=3)
        c.start_agent("node-1", token=tok)
        c.start_agent("node-2", token=tok, extra=("--container-runtime", "none"))
        gpus = root / "gpus.txt"
        gpus.write_text("NVIDIA H100 | 80GiB | 0 | 0 | 70 | 35\n" * 2)
        base = c.env
        c.env = dict(base, LD_LIBRARY_PATH=str(FAKE_NVML), FAKE_NVML_GPUS=str(gpus))
        c.start_agent("gpu-1", token=tok)
        c.env = base
        c.wait_ready("node-1", "node-2", "gpu-1")
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
    _, out, err = c.cli("submit", c.write_spec(
        f"name: ct-none\nimage: {image}\nresources: {{cpus: 0, nodelist: [node-2]}}\n"
        "command: echo no\n"))
    jid = int(out)
    assert "warning: no current node could ever run job" in err and \
        "node-2 runs no containers" in err, err
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


FAKE_UUID = "GPU-fa4e0000-0000-0000-0000-00000000000{}"


def cdi_specs_of_nvidia():
    found = []
    for d in ("/etc/cdi", "/var/run/cdi"):
        if os.path.isdir(d):
            found += [os.path.join(d, n) for n in os.listdir(d)
                      if "nvidia.com/gpu" in open(os.path.join(d, n), errors="replace").read()]
    return found


def test_a_container_gets_exactly_its_gpus_through_cdi(cluster, image):
    """Without a CDI spec, a container job with a GPU says how to make one; with one
    (here a spec whose devices only set a variable naming their UUID, as
    nvidia-ctk's would mount that GPU's device nodes), the container is given the
    job's GPU by UUID, numbered 0 inside."""
    c = cluster
    if cdi_specs_of_nvidia():
        pytest.skip(f"this machine has NVIDIA CDI specs ({cdi_specs_of_nvidia()}): the "
                    "test writes its own")
    spec = (f"name: NAME\nimage: {image}\nresources: {{gpus: 1, cpus: 0, "
            "nodelist: [gpu-1]}\n"
            "command: echo \"inside=$CUDA_VISIBLE_DEVICES gpu=$FAKE_GPU\"\n")
    jid = submit(c, spec.replace("NAME", "cdi-none"))
    j = c.wait_job(jid)
    assert j["state"] == "failed", j
    assert "has no CDI spec for its GPUs (nvidia-ctk cdi generate" in \
        c.logs(jid, stream="stderr"), c.logs(jid, stream="both")

    os.makedirs("/var/run/cdi", exist_ok=True)
    path = f"/var/run/cdi/bramble-test-{uuid.uuid4().hex[:8]}.yaml"
    devices = "".join(f"- name: \"{FAKE_UUID.format(i)}\"\n  containerEdits:\n"
                      f"    env: [\"FAKE_GPU={FAKE_UUID.format(i)}\"]\n" for i in (0, 1))
    with open(path, "w") as f:
        f.write(f"cdiVersion: \"0.5.0\"\nkind: \"nvidia.com/gpu\"\ndevices:\n{devices}")
    try:
        # a job holding one GPU first, so that the one tested gets the other (which
        # may be GPU 1: then it is 0 inside)
        hold = submit(c, "name: cdi-hold\nresources: {gpus: 1, cpus: 0, "
                         "nodelist: [gpu-1]}\ncommand: sleep 600\n")
        c.wait_job(hold, "running")
        gpus = c.cli_json("node", "show", "gpu-1")["gpus"]
        taken = [g["index"] for g in gpus if any(h["job"] == hold for h in g["held_by"])]
        assert len(taken) == 1, gpus
        jid = submit(c, spec.replace("NAME", "cdi-one"))
        j = c.wait_job(jid)
        log = c.logs(jid, stream="both")
        assert j["state"] == "completed", (j["reason"], log)
        assert f"inside=0 gpu={FAKE_UUID.format(1 - taken[0])}" in log, (log, taken)
        c.cli("cancel", hold)
    finally:
        os.unlink(path)


def test_shell_goes_into_the_container(cluster, image, tmp_path):
    """bramble shell into a container job runs in its container (podman exec): the
    image's files, the job's working directory, its exit status handed back."""
    c = cluster
    work = tmp_path / "w"
    work.mkdir()
    jid = submit(c, f"name: ct-shell\nimage: {image}\nworkdir: {work}\n"
                    "resources: {cpus: 0, nodelist: [node-1]}\n"
                    "command: echo started; sleep 600\n")
    try:
        c.wait_job(jid, "running")
        c.wait_logs(jid, "started")
        rc, out, err = c.cli("shell", jid, "--", "sh", "-c",
                             "test -e /usr/bin/podman && echo on-host || echo in-image; "
                             "pwd; exit 3", check=False)
        assert rc == 3, (rc, out, err)
        assert out.split() == ["in-image", str(work)], (out, err)
    finally:
        c.cli("cancel", jid, check=False)
