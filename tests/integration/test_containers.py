"""`image:`: a job whose processes run in an OCI container through Debian's podman.

The image is made here without a registry: a root filesystem of busybox-static,
`podman import`ed. A job in it sees the image's files, not the host's, runs as
the job's uid with its working directory and variables, and its output is the
job's log; cancel and the time limit reach the container's processes as they
reach a bare job's, and so do a preemption's signal, hang detection and fencing
(the container frozen while the coordinator is silent, thawed once it is heard
again); nothing of the container is left, even when it is stopped as it starts.
A node whose agent runs no containers takes no such job, and says why; a name
that is not an image's is refused at submit."""
import json
import os
import shutil
import signal
import subprocess
import uuid

import pytest

from conftest import BIN, DEADLINE, proc_state, procs_env_values, procs_running, wait_for

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
        c = start_cluster(root, made, start=False)
        c.start_coordinator(extra=["--preempt-after", "1s", "--preempt-min-run", "0s"])
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


def pid_in(work):
    """The host pid the container's shell wrote to work/pid (--pid host: the same
    numbers inside and out), once it has."""
    return wait_for(lambda: (work / "pid").exists() and (work / "pid").read_text().strip()
                    and int((work / "pid").read_text()), what="the container's pid")


def test_preemption_signal_reaches_the_container(cluster, image, tmp_path):
    c = cluster
    cpus = c.nodes()["node-1"]["cpus"]
    work = tmp_path / "work"
    work.mkdir()
    low = submit(c, f"name: ct-low\nimage: {image}\nworkdir: {work}\npreemptible: true\n"
                    "preempt: {signal: USR1, grace: 20s}\n"
                    f"resources: {{cpus: {cpus}, nodelist: [node-1]}}\n"
                    "command: |\n"
                    "  trap 'echo got-usr1-inside; exit 0' USR1\n"
                    "  echo started; while true; do sleep 1; done\n")
    c.wait_job(low, "running")
    c.wait_logs(low, "started")
    high = submit(c, f"name: ct-high\npriority: 10\n"
                     "resources: {cpus: 1, nodelist: [node-1]}\ncommand: echo high ran\n")
    assert c.wait_job(high, "completed", timeout=60)["state"] == "completed"
    wait_for(lambda: "got-usr1-inside" in c.logs(low), what="the container's trap to run")
    j = c.job(low)
    assert any("preempted" in (e["reason"] or "") for e in j["events"]), j["events"]
    c.cli("cancel", low)
    c.wait_job(low)
    wait_for(lambda: not containers_of(f"node-1/{low}.") and not c.job_procs(low),
             what="the container and its processes to go")


def test_hang_detection_ends_a_quiet_container(cluster, image):
    c = cluster
    jid = submit(c, f"name: ct-hung\nimage: {image}\nprogress: {{timeout: 2s}}\n"
                    "restart: {on: [hung], max: 0}\n"
                    "resources: {cpus: 0, nodelist: [node-1]}\n"
                    "command: echo once; sleep 600\n")
    j = c.wait_job(jid, timeout=60)
    assert j["state"] == "failed" and "hung" in (j["reason"] or ""), j
    assert "once" in c.logs(jid)
    wait_for(lambda: not containers_of(f"node-1/{jid}.") and not c.job_procs(jid),
             what="the container and its processes to go")


PROGRESS_CLIENT = r"""
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
/* bramble progress STEP, as the job socket takes it (proto/jobsock.h), static so
   that it runs in any image: prints the agent's answer, exits 1 on an error */
int main(int argc, char **argv)
{
    const char *a = getenv("BRAMBLE_AGENT_SOCK");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (argc != 2 || !a || a[0] != '@' || strlen(a) > sizeof(sa.sun_path))
        return 2;
    memcpy(sa.sun_path + 1, a + 1, strlen(a) - 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (connect(fd, (struct sockaddr *)&sa, offsetof(struct sockaddr_un, sun_path) +
                strlen(a)) < 0) {
        perror("connect");
        return 1;
    }
    char req[64], buf[8192];
    int n = snprintf(req, sizeof(req), "{\"type\": \"progress\", \"step\": %s}", argv[1]);
    send(fd, req, (size_t)n, 0);
    ssize_t k = recv(fd, buf, sizeof(buf) - 1, 0);
    buf[k > 0 ? k : 0] = 0;
    printf("%s\n", buf);
    return k <= 0 || strstr(buf, "\"error\"") ? 1 : 0;
}
"""


@pytest.fixture(scope="module")
def progress_client(tmp_path_factory):
    """A static program that says `bramble progress N` to the job's agent."""
    d = tmp_path_factory.mktemp("client")
    (d / "client.c").write_text(PROGRESS_CLIENT)
    r = subprocess.run(["gcc", "-static", "-O1", "-o", str(d / "progress"),
                        str(d / "client.c")], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"cannot build a static program here: {r.stderr[-300:]}")
    return d / "progress"


def test_progress_from_inside_the_container_keeps_it_alive(cluster, image, progress_client,
                                                           tmp_path):
    """Only `bramble progress` (through the job socket, from the container's
    process, conmon's child) for several hang timeouts: never hung, and the agent
    answers it as the job's."""
    c = cluster
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(progress_client, work / "progress")
    jid = submit(c, f"name: ct-progress\nimage: {image}\nworkdir: {work}\n"
                    "progress: {timeout: 2s}\nrestart: {on: [hung], max: 0}\n"
                    "resources: {cpus: 0, nodelist: [node-1]}\n"
                    "command: |\n"
                    "  echo \"$BRAMBLE_AGENT_SOCK\" > sock; i=0\n"
                    "  while [ $i -lt 7 ]; do ./progress $i >> answers 2>&1; echo $? >> rcs\n"
                    "    i=$((i+1)); sleep 1; done\n")
    j = c.wait_job(jid, timeout=60)
    assert j["state"] == "completed", (j, (work / "answers").read_text())
    assert (work / "rcs").read_text().split() == ["0"] * 7, (work / "answers").read_text()
    assert "hung" not in json.dumps(j["events"])

    # from outside any job, the same request is refused
    r = subprocess.run([str(progress_client), "1"], capture_output=True, text=True,
                       env=dict(os.environ, BRAMBLE_AGENT_SOCK=answers_sock(work)))
    assert r.returncode == 1 and "not inside a running job" in r.stdout, r


def answers_sock(work):
    """The agent socket a job saw (its answers name none: read it from the job's
    environment as the container had it)."""
    return (work / "sock").read_text().strip()


def test_fencing_freezes_the_container_and_thaws_it(cluster, image, tmp_path):
    """The coordinator silent past the fence (3/5 of the node timeout): the agent
    freezes the attempt, the container's processes with it; heard again, it thaws
    them and the job goes on."""
    c = cluster
    work = tmp_path / "work"
    work.mkdir()
    jid = submit(c, f"name: ct-fence\nimage: {image}\nworkdir: {work}\n"
                    "resources: {cpus: 0, nodelist: [node-1]}\n"
                    "command: |\n"
                    "  echo $$ > pid; n=0\n"
                    "  while [ $n -lt 600 ]; do n=$((n+1)); echo tick $n > ticks; sleep 1; done\n")
    c.wait_job(jid, "running")
    pid = pid_in(work)
    assert proc_state(pid) in ("S", "R"), proc_state(pid)
    coord = c.coordinator.pid
    os.kill(coord, signal.SIGSTOP)
    try:
        wait_for(lambda: proc_state(pid) == "T", timeout=20,
                 what="the container's shell to be frozen")
        frozen = (work / "ticks").read_text()
    finally:
        os.kill(coord, signal.SIGCONT)
    wait_for(lambda: proc_state(pid) in ("S", "R") and (work / "ticks").read_text() != frozen,
             what="the container's shell to be thawed and go on")
    assert c.job(jid)["state"] == "running"
    c.cli("cancel", jid)
    c.wait_job(jid)


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


def test_setup_runs_in_the_image_once(cluster, image, tmp_path):
    """setup: with image: runs in a container of the image, before the job's own,
    building BRAMBLE_ENV_DIR (the node's cache, mounted); a second job with the
    same setup and image finds it built and runs no setup."""
    c = cluster
    work = tmp_path / "work"
    work.mkdir()
    (work / "marker").write_text("from-the-workdir\n")
    spec = (f"image: {image}\nworkdir: {work}\n"
            "resources: {cpus: 0, nodelist: [node-1]}\n"
            "setup: |\n"
            "  test -e /usr/bin/podman && echo setup-on-host || echo setup-in-image\n"
            "  cat marker > \"$BRAMBLE_ENV_DIR/tool\"\n"
            "  echo ran >> \"$BRAMBLE_ENV_DIR/runs\"\n"
            "command: |\n"
            "  test -e /usr/bin/podman && echo job-on-host || echo job-in-image\n"
            "  echo \"tool=$(cat \"$BRAMBLE_ENV_DIR/tool\") runs=$(cat \"$BRAMBLE_ENV_DIR/runs\""
            " | wc -l)\"\n")
    first = submit(c, f"name: ct-setup-1\n{spec}")
    j = c.wait_job(first)
    log = c.logs(first, stream="both")
    assert j["state"] == "completed", (j["reason"], log)
    assert "[setup] setup-in-image" in log and "setup-on-host" not in log, log
    assert "job-in-image" in log and "tool=from-the-workdir runs=1" in log, log
    second = submit(c, f"name: ct-setup-2\n{spec}")
    j = c.wait_job(second)
    log = c.logs(second, stream="both")
    assert j["state"] == "completed", (j["reason"], log)
    assert "[setup]" not in log and "tool=from-the-workdir runs=1" in log, log

    # a failed setup in the image ends the attempt with its last lines
    bad = submit(c, f"name: ct-setup-bad\nimage: {image}\n"
                    "resources: {cpus: 0, nodelist: [node-1]}\n"
                    "setup: echo cannot-build-this; exit 3\ncommand: echo never\n")
    j = c.wait_job(bad)
    assert j["state"] == "failed", j
    assert "setup failed: exit code 3" in j["reason"] and "cannot-build-this" in j["reason"], j
    assert "never" not in c.logs(bad)
    wait_for(lambda: not containers_of(f"node-1/{bad}."), what="its containers to go")


def test_bad_image_names_refused(cluster):
    c = cluster
    before = len(c.jobs())
    for text, why in [
        ("image: 'x; rm -rf /'\n", "image: 'x; rm -rf /' is not an image name"),
        ("image: --privileged\n", "image: '--privileged' is not an image name"),
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
        # an agent started again (an upgrade) adopts the job and still knows that
        # it runs in a container: a shell still goes into it
        assert c.agents["node-1"].kill(signal.SIGUSR2) == 0
        agent = c.start_agent("node-1", join=False)
        # (the node still counts as ready from before: wait for this agent's hello)
        wait_for(lambda: "connected to" in agent.output(), what="the new agent's hello")
        c.wait_ready("node-1")
        rc, out, err = c.cli("shell", jid, "--", "sh", "-c",
                             "test -e /usr/bin/podman && echo on-host || echo in-image",
                             check=False)
        assert (rc, out.split()) == (0, ["in-image"]), (rc, out, err)
        assert c.job(jid)["state"] == "running"
    finally:
        c.cli("cancel", jid, check=False)


def test_a_shell_in_a_container_is_hung_up_with_its_cli(cluster, image, tmp_path):
    """A shell into a container job whose CLI is killed is closed on the node, and
    what it runs in the container goes too (podman exec's process is not the
    client's child: SIGHUP to the client alone would leave it), with and without a
    terminal; a shell still open when the job is cancelled goes with the job."""
    c = cluster
    jid = submit(c, f"name: ct-hup\nimage: {image}\n"
                    "resources: {cpus: 0, nodelist: [node-1]}\n"
                    "command: echo started; sleep 600\n")
    clis = []
    try:
        c.wait_job(jid, "running")
        c.wait_logs(jid, "started")
        for n, tty in ((4241, False), (4242, True)):
            argv = [c.bin("bramble"), "--credential", str(c.credential), "shell", str(jid)]
            if tty:  # a terminal the test holds: script(1) gives the CLI one
                argv = ["script", "-qfec", " ".join(argv + ["--", "sleep", str(n)]),
                        "/dev/null"]
            else:
                argv += ["--", "sleep", str(n)]
            cli = c.spawn(f"bramble-ct-shell-{n}", argv)
            clis.append(cli)
            wait_for(lambda: procs_running(["sleep", str(n)]),
                     what=f"the shell's `sleep {n}` to run in the container")
            if tty:  # the CLI itself, under script (and its $SHELL -c), killed
                kids = procs_running(["bramble", "--credential", str(c.credential),
                                      "shell", str(jid), "--", "sleep", str(n)])
                assert len(kids) == 1, kids
                os.kill(kids[0], signal.SIGKILL)
                cli.wait_exit()
            else:
                cli.kill(signal.SIGKILL)
            wait_for(lambda: not procs_running(["sleep", str(n)]), 20,
                     f"the container's `sleep {n}` to go with its killed CLI")
        assert c.job(jid)["state"] == "running"
        # a terminal's TERM is the client's, in the container too
        shell = [c.bin("bramble"), "--credential", str(c.credential), "shell", str(jid)]
        r = subprocess.run(["script", "-qfec", " ".join(map(str, shell)) +
                            " -t -- sh -c 'echo term=$TERM'", "/dev/null"],
                           env=dict(c.env, TERM="vt220"), capture_output=True, text=True,
                           timeout=DEADLINE)
        assert "term=vt220" in r.stdout, (r.stdout, r.stderr)
        # left open, then the job cancelled: the shells' processes go with the job,
        # an interactive sh (which ignores SIGTERM) by its hang-up, not at the grace
        cli = c.spawn("bramble-ct-shell-open", shell + ["--", "sleep", "4243"])
        clis.append(cli)
        tty = c.spawn("bramble-ct-shell-tty",
                      ["script", "-qfec", " ".join(map(str, shell)), "/dev/null"],
                      env=dict(c.env, TERM="vt220"))
        clis.append(tty)

        def interactive():  # a shell's (BRAMBLE_SHELL) interactive /bin/sh, TERM its
            return procs_running(["sh"], procs_env_values("BRAMBLE_SHELL", "TERM=vt220"))

        wait_for(lambda: procs_running(["sleep", "4243"]) and interactive(),
                 what="the shell's `sleep 4243` and an interactive sh to run in the container")
        c.cli("cancel", jid)
        assert cli.wait_exit(DEADLINE) != 0, cli.output()
        tty.wait_exit(DEADLINE)
        j = c.wait_job(jid)
        assert j["state"] == "cancelled"
        assert "killed after its grace" not in (j["reason"] or ""), j["reason"]
        wait_for(lambda: not procs_running(["sleep", "4243"]) and not interactive(), 20,
                 "the open shells' processes to go with the cancelled job")
    finally:
        for cli in clis:
            if cli.alive():
                cli.kill()
        c.cli("cancel", jid, check=False)
