"""GPU sharing by declared VRAM: jobs that declare a VRAM need are packed onto
shared GPUs, best fit, never over-committing a GPU; jobs without one get whole
GPUs. The GPUs are declared (--gpus MODEL:VRAM), which take the same path as
NVML's."""

import collections

from conftest import wait_for

JOB = """
name: {name}
command: 'echo "on $BRAMBLE_NODE_NAME gpu $CUDA_VISIBLE_DEVICES"; sleep 300'
resources: {{gpus: 1, cpus: 0{vram}}}
"""


def submit(c, name, vram_gib=None):
    vram = f", vram: {vram_gib}GiB" if vram_gib else ""
    return c.submit(JOB.format(name=name, vram=vram))


def placed_on(c, jid):
    """(node, gpu index) from what the job printed."""
    text = c.wait_logs(jid, "on ")
    first = next(line for line in text.splitlines() if line.startswith("on "))
    _, node, _, gpu = first.split()
    return node, int(gpu)


def test_six_7gib_jobs_pack_onto_24_24_12_12(cluster):
    tok = cluster.token(uses=2)
    cluster.start_agent("big", token=tok, extra=["--gpus", "RTX 4090:24GiB,RTX 3090:24GiB"])
    cluster.start_agent("small", token=tok, extra=["--gpus", "RTX 3060:12GiB,RTX 3060:12GiB"])
    cluster.wait_ready("big", "small")
    sizes = {("big", 0): 24, ("big", 1): 24, ("small", 0): 12, ("small", 1): 12}
    ids = [submit(cluster, f"r{i}", 7) for i in range(6)]
    for jid in ids:
        cluster.wait_job(jid, "running")
    where = {jid: placed_on(cluster, jid) for jid in ids}
    load = collections.Counter(where.values())
    for gpu, n in load.items():
        assert n * 7 <= sizes[gpu], f"{gpu} over-committed: {load}"
    # best fit: the 12 GiB cards take one each, the 24 GiB cards the other four
    assert load[("small", 0)] == 1 and load[("small", 1)] == 1, load
    assert load[("big", 0)] + load[("big", 1)] == 4, load
    # CUDA_VISIBLE_DEVICES is exactly the assigned GPU: one index each
    for jid in ids:
        assert cluster.job(jid)["nodes"] == [where[jid][0]]

    # two more fit (a 24 GiB card has room for three), a ninth does not
    more = [submit(cluster, f"r{i}", 7) for i in (6, 7)]
    for jid in more:
        cluster.wait_job(jid, "running")
        where[jid] = placed_on(cluster, jid)
    load = collections.Counter(where.values())
    assert load == {("big", 0): 3, ("big", 1): 3, ("small", 0): 1, ("small", 1): 1}, load
    ninth = submit(cluster, "r8", 7)
    j = wait_for(lambda: (lambda x: x if "VRAM to spare" in (x.get("reason") or "") else None)(
        cluster.job(ninth)), what="the ninth to wait for VRAM")
    assert j["state"] == "pending", j
    assert "big has 0 GPUs with 7.0GiB VRAM to spare, the job needs 1" in j["reason"], j["reason"]
    # cancelling one frees its share for the waiting one
    cluster.cli("cancel", str(ids[0]))
    cluster.wait_job(ninth, "running")
    assert placed_on(cluster, ninth) == where[ids[0]]


def test_whole_gpu_jobs_and_sharing_keep_apart(cluster):
    tok = cluster.token(uses=1)
    cluster.start_agent("n", token=tok, extra=["--gpus", "A:24GiB,A:24GiB"])
    cluster.wait_ready("n")
    shared = submit(cluster, "shared", 7)
    cluster.wait_job(shared, "running")
    assert placed_on(cluster, shared) == ("n", 0)
    # a job without a VRAM need takes a GPU nobody holds, not the shared one
    whole = submit(cluster, "whole")
    cluster.wait_job(whole, "running")
    assert placed_on(cluster, whole) == ("n", 1)
    # more sharing goes next to the first, never onto the GPU held whole
    second = submit(cluster, "second", 7)
    cluster.wait_job(second, "running")
    assert placed_on(cluster, second) == ("n", 0)
    # and a second whole-GPU job has nowhere to go
    waiting = submit(cluster, "waiting")
    j = wait_for(lambda: (lambda x: x if x.get("reason") else None)(cluster.job(waiting)),
                 what="the whole-GPU job to wait")
    assert j["state"] == "pending" and "n has 0 GPUs free, the job needs 1" in j["reason"], j
    # a need larger than any GPU's room waits and says so
    big = submit(cluster, "big", 20)
    j = wait_for(lambda: (lambda x: x if x.get("reason") else None)(cluster.job(big)),
                 what="the 20 GiB job to wait")
    assert "has 0 GPUs with 20.0GiB VRAM to spare, the job needs 1" in j["reason"], j
    # the whole-GPU jobs leave: the freed GPU takes the 20 GiB job
    cluster.cli("cancel", str(waiting))
    cluster.cli("cancel", str(whole))
    cluster.wait_job(big, "running")
    assert placed_on(cluster, big) == ("n", 1)


def gpu_rows(c, node, credential=None):
    """{index: the row of `bramble node show` for that GPU}, and the header."""
    _, out, _ = c.cli("node", "show", node, credential=credential)
    lines = out.splitlines()
    start = lines.index("gpus:") + 1
    head, rows = lines[start], {}
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        rows[int(line.split()[0])] = line.rstrip()
    return head, rows


def holders(c, node, credential=None):
    """{index: held_by} of `bramble node show --json`, and {index: vram_held}."""
    n = c.cli_json("node", "show", node, credential=credential)
    return ({g["index"]: g["held_by"] for g in n["gpus"]},
            {g["index"]: g["vram_held"] for g in n["gpus"]})


def test_node_show_names_the_jobs_holding_each_gpu(cluster):
    gib = 1 << 30
    cluster.start_agent("n", extra=["--gpus", "A:24GiB,A:24GiB,A:24GiB"])
    cluster.wait_ready("n")
    shared = submit(cluster, "shared", 7)
    assert placed_on(cluster, shared) == ("n", 0)
    whole = submit(cluster, "whole")
    node, w = placed_on(cluster, whole)  # a GPU nobody holds: 1 or 2
    assert node == "n" and w in (1, 2)
    idle = 3 - w
    second = submit(cluster, "second", 7)
    assert placed_on(cluster, second) == ("n", 0)

    held, vram = holders(cluster, "n")
    assert held == {
        0: [{"job": shared, "name": "shared", "whole": False, "vram": 7 * gib},
            {"job": second, "name": "second", "whole": False, "vram": 7 * gib}],
        w: [{"job": whole, "name": "whole", "whole": True, "vram": None}],
        idle: []}, held
    assert vram == {0: 14 * gib, w: 24 * gib, idle: 0}, vram
    head, rows = gpu_rows(cluster, "n")
    assert head.split() == ["INDEX", "MODEL", "VRAM", "TOTAL", "VRAM", "FREE", "HELD", "BY"]
    assert rows[0].endswith(f"  job {shared} (shared): 7.0GiB, job {second} (second): 7.0GiB")
    assert rows[w].endswith(f"  job {whole} (whole): whole GPU"), rows
    assert rows[idle].endswith("  -"), rows
    # node.list's nodes carry the same
    assert cluster.nodes()["n"]["gpus"][w]["held_by"] == held[w]

    # a user sees who holds a GPU, but not the names of others' jobs
    cred = cluster.root / "alice.credential"
    cluster.cli("user", "add", "alice", "--out", str(cred))
    spec = cluster.write_spec(JOB.format(name="alices", vram=", vram: 2GiB"), name="a.yaml")
    _, out, _ = cluster.cli("submit", str(spec), credential=cred)
    alices = int(out.strip())
    assert placed_on(cluster, alices) == ("n", 0)
    held, _ = holders(cluster, "n", credential=cred)
    assert [(h["job"], h["name"]) for h in held[0]] == [
        (shared, None), (second, None), (alices, "alices")], held
    assert held[w] == [{"job": whole, "name": None, "whole": True, "vram": None}], held
    _, rows = gpu_rows(cluster, "n", credential=cred)
    assert rows[0].endswith(f"  job {shared}: 7.0GiB, job {second}: 7.0GiB, "
                            f"job {alices} (alices): 2.0GiB"), rows
    assert rows[w].endswith(f"  job {whole}: whole GPU"), rows

    # a job that ends lets go of its GPU at once
    cluster.cli("cancel", str(whole))
    cluster.wait_job(whole)
    held, vram = holders(cluster, "n")
    assert held[w] == [] and vram[w] == 0, (held, vram)
    assert gpu_rows(cluster, "n")[1][w].endswith("  -")
