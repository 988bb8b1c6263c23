"""Live GPU figures (docs/metrics.md, docs/planning.md): an agent reads its GPUs
through NVML on every heartbeat (at most once a second), and the coordinator packs
by the VRAM that is free now and shows the figures on /metrics.

The GPUs are honest test hardware: tests/fake_nvml builds a libnvidia-ml.so.1 that
the agent finds by its soname, as it finds the real one, through LD_LIBRARY_PATH;
it reports the GPUs listed in the file FAKE_NVML_GPUS names, read again on every
call. The test changes that file while the agent runs: a process outside bramble
takes 22 GiB of both 24 GiB GPUs, and lets go of it again.
"""

import http.client
import os

import pytest

from conftest import BIN, free_port, wait_for

GIB = 1 << 30
FAKE_NVML = BIN.parent / "tests" / "fake_nvml"
MODEL = "NVIDIA GeForce RTX 4090"

JOB = """
name: {name}
command: 'echo "gpu $CUDA_VISIBLE_DEVICES"; sleep 300'
resources: {{gpus: 1, vram: 20GiB, cpus: 0}}
"""


def set_gpus(path, used_gib, util, power, temp):
    """Both fake GPUs with used_gib GiB in use (atomically: the fake reads the file
    on every NVML call)."""
    line = f"{MODEL} | 24GiB | {used_gib}GiB | {util} | {power} | {temp}\n"
    tmp = path.with_suffix(".new")
    tmp.write_text("# name | total | used | util | power W | temp C\n" + line * 2)
    os.replace(tmp, path)


def metrics(port, token):
    """{'name{labels}': value} of /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
        r = conn.getresponse()
        body = r.read().decode()
    finally:
        conn.close()
    assert r.status == 200, (r.status, body)
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def gpu_sample(name, gpu):
    return f'{name}{{node="gpu",gpu="{gpu}",model="{MODEL}"}}'


def free_vram(c):
    return [g.get("vram_free") for g in c.nodes()["gpu"]["gpus"]]


def test_vram_free_follows_nvml(make_cluster, tmp_path):
    if not (FAKE_NVML / "libnvidia-ml.so.1").exists():
        pytest.fail(f"{FAKE_NVML}/libnvidia-ml.so.1 missing: the build makes it with the "
                    "unit tests (BRAMBLE_TESTS=ON)")
    gpus = tmp_path / "gpus.txt"
    set_gpus(gpus, 0, 3, 30, 35)
    c = make_cluster(start=False)
    port = free_port()
    c.start_coordinator(extra=["--http", f"127.0.0.1:{port}"])
    c.env = dict(c.env, LD_LIBRARY_PATH=str(FAKE_NVML), FAKE_NVML_GPUS=str(gpus))
    c.start_agent("gpu")
    c.wait_ready("gpu")
    node = c.nodes()["gpu"]
    assert [(g["model"], g["vram_total"]) for g in node["gpus"]] == [(MODEL, 24 * GIB)] * 2

    first = c.submit(JOB.format(name="first"))
    c.wait_job(first, "running")
    assert "gpu 0" in c.wait_logs(first, "gpu ")

    # something outside bramble takes 22 GiB of each GPU: the first job's 20 GiB
    # reservation stays whole on GPU 0, GPU 1 has 2 GiB to spare
    set_gpus(gpus, 22, 97, 350.5, 80)
    wait_for(lambda: free_vram(c) == [22 * GIB, 2 * GIB],
             what="vram_free to follow NVML (GPU 0: 2 GiB free + 20 GiB reserved)")
    second = c.submit(JOB.format(name="second"))
    j = wait_for(lambda: (lambda x: x if "VRAM to spare" in (x.get("reason") or "") else None)(
        c.job(second)), what="the second job to wait for VRAM")
    assert j["state"] == "pending", j
    assert "gpu has 0 GPUs with 20.0GiB VRAM to spare, the job needs 1" in j["reason"], j

    _, out, _ = c.cli("token", "create", "--metrics")
    token = out.strip()
    want = {gpu_sample("bramble_gpu_memory_used_bytes", 0): 22 * GIB,
            gpu_sample("bramble_gpu_memory_used_bytes", 1): 22 * GIB,
            gpu_sample("bramble_gpu_memory_total_bytes", 1): 24 * GIB,
            gpu_sample("bramble_gpu_utilization_ratio", 0): 0.97,
            gpu_sample("bramble_gpu_power_watts", 1): 350.5,
            gpu_sample("bramble_gpu_temperature_celsius", 0): 80}
    page = wait_for(lambda: (lambda s: s if all(s.get(k) == v for k, v in want.items())
                             else None)(metrics(port, token)),
                    what="/metrics to show the GPUs' figures")
    assert page[gpu_sample("bramble_gpu_memory_used_bytes", 0)] == 22 * GIB

    # the outside process lets go: the second job starts on GPU 1
    set_gpus(gpus, 0, 0, 30, 40)
    c.wait_job(second, "running")
    assert "gpu 1" in c.wait_logs(second, "gpu ")
    assert c.job(first)["state"] == "running"


def write_gpus(path, xids="", ecc=0):
    """One fake GPU that has had xids ("79", "48,79") and ecc uncorrected ECC
    errors (atomically)."""
    tmp = path.with_suffix(".new")
    tmp.write_text("# name | total | used | util | power W | temp C | xids | ecc\n"
                   f"{MODEL} | 24GiB | 0 | 0 | 30 | 35 | {xids} | {ecc}\n")
    os.replace(tmp, path)


def test_gpu_fault_makes_its_node_unhealthy_and_moves_its_gang(make_cluster, tmp_path):
    """An XID on one GPU: its node becomes unhealthy (an event says which GPU and
    XID, /metrics counts it), the gang with a rank there restarts on healthy nodes,
    no new job goes there, and `bramble node undrain` clears it."""
    if not (FAKE_NVML / "libnvidia-ml.so.1").exists():
        pytest.fail(f"{FAKE_NVML}/libnvidia-ml.so.1 missing")
    c = make_cluster(start=False, heartbeat="200ms")
    port = free_port()
    c.start_coordinator(extra=["--http", f"127.0.0.1:{port}"])
    base = dict(c.env)
    files = {}
    for name in ("g1", "g2", "g3"):  # each node its own GPU
        files[name] = tmp_path / f"{name}.txt"
        write_gpus(files[name])
        c.env = dict(base, LD_LIBRARY_PATH=str(FAKE_NVML), FAKE_NVML_GPUS=str(files[name]))
        c.start_agent(name)
    c.env = base
    c.wait_ready("g1", "g2", "g3")
    gang = c.submit("name: gang\ncommand: sleep 300\n"
                    "resources: {nodes: 2, gpus: 1, cpus: 0}\n"
                    "restart: {on: [node_lost], max: 3}\n")
    nodes = c.wait_job(gang, "running")["nodes"]
    bad = nodes[0]
    write_gpus(files[bad], xids="79")
    wait_for(lambda: c.nodes()[bad]["state"] == "unhealthy", what=f"{bad} to be unhealthy")
    _, out, _ = c.cli("events")
    assert f"GPU 0: XID 79 (1 since its agent started); no new jobs until an admin clears " \
           f"it (bramble node undrain {bad})" in out, out
    j = wait_for(lambda: (lambda x: x if x["state"] == "running" and x["attempt"] == 2
                          else None)(c.job(gang)),
                 what="the gang to run again as attempt 2")
    assert bad not in j["nodes"] and len(j["nodes"]) == 2, j
    assert any(f"node {bad} unhealthy (GPU 0: XID 79" in e["reason"] for e in j["events"]), j

    _, out, _ = c.cli("token", "create", "--metrics")
    token = out.strip()
    page = wait_for(lambda: (lambda s: s if s.get('bramble_nodes{state="unhealthy"}') == 1
                             else None)(metrics(port, token)),
                    what="/metrics to count the unhealthy node")
    assert page[f'bramble_gpu_xid_errors{{node="{bad}",gpu="0",model="{MODEL}"}}'] == 1

    # no new job goes there, until it is cleared
    there = c.submit(f"name: there\ncommand: 'true'\nresources: {{cpus: 0, nodelist: [{bad}]}}\n")
    j = wait_for(lambda: (lambda x: x if "unhealthy" in (x.get("reason") or "") else None)(
        c.job(there)), what="the job to wait, naming the unhealthy node")
    assert j["state"] == "pending" and f"{bad} is unhealthy" in j["reason"], j
    c.cli("node", "undrain", bad)
    assert c.nodes()[bad]["state"] == "ready"
    assert c.wait_job(there)["state"] == "completed"
    # cleared: the same XID seen again is not a new fault; a new one is
    c.assert_alive()
    write_gpus(files[bad], xids="79,48")
    wait_for(lambda: c.nodes()[bad]["state"] == "unhealthy",
             what=f"{bad} unhealthy again after a new XID")
