"""The examples that docs/teaching.md walks through run as the guide says:
examples/hello-ranks.yaml as a 4-node gang prints one hello from every rank, in the
job's own node order; examples/hello.yaml and examples/queue-demo.yaml complete.

The specs are submitted as they are in examples/ (read from the repository), with
only what a 2-core test machine needs overridden (queue-demo asks for a 4-core Pi),
and queue-demo's 20 s sleep shortened (its own command, with a shorter sleep):
the queueing shows just the same, in a fraction of the time.
Node names carry a random part, so that no other cluster on this host shares them.
"""

import json
import re
import uuid

from conftest import REPO

EXAMPLES = REPO / "examples"


def names(n):
    tag = uuid.uuid4().hex[:6]
    return [f"ex{tag}-{i}" for i in range(1, n + 1)]


def submit_example(c, name, *extra):
    _, out, _ = c.cli("submit", EXAMPLES / name, *extra, "--json")
    return json.loads(out)["id"]


def test_hello_ranks_says_hello_from_every_rank(cluster):
    nodes = cluster.add_agents(4, names=names(4))
    jid = submit_example(cluster, "hello-ranks.yaml")
    job = cluster.wait_job(jid, timeout=60)
    assert job["state"] == "completed", job
    assert sorted(job["nodes"]) == sorted(nodes), job
    assert len(job["nodes"]) == 4

    out = cluster.logs(jid)
    hello = re.compile(r"^(\d+): Hello from rank (\d+) of (\d+) on (\S+) \((\S+)\)$")
    found = [m.groups() for line in out.splitlines() if (m := hello.match(line))]
    assert sorted(int(label) for label, *_ in found) == [0, 1, 2, 3], out
    for label, rank, size, node, arch in found:
        assert label == rank, out                     # the label is the rank
        assert size == "4", out
        assert node == job["nodes"][int(rank)], (node, rank, job["nodes"])
        assert arch, out

    # every rank names the same rendezvous, rank 0's address and port
    meet = re.compile(r"^(\d+): rank (\d+): rendezvous at (\S+):(\d+) \(rank 0\), "
                      r"gang (\S+)$")
    rdv = [m.groups() for line in out.splitlines() if (m := meet.match(line))]
    assert sorted(int(r[0]) for r in rdv) == [0, 1, 2, 3], out
    assert len({(addr, port) for _, _, addr, port, _ in rdv}) == 1, out
    assert all(g == ",".join(job["nodes"]) for *_, g in rdv), out

    # --rank R: rank R's lines alone, unlabelled
    only = cluster.logs(jid, "--rank", 2)
    first = f"Hello from rank 2 of 4 on {job['nodes'][2]} ({found[0][4]})"
    assert only.splitlines()[0] == first, only
    assert len(only.splitlines()) == 2, only


def test_hello_completes(cluster):
    cluster.add_agents(1, names=names(1))
    jid = submit_example(cluster, "hello.yaml")
    job = cluster.wait_job(jid)
    assert job["state"] == "completed", job
    assert f"hello from {job['nodes'][0]} (job {jid} 'hello', attempt 1)" in cluster.logs(jid)


# queue-demo's sleep in the test: long enough that the first two copies are still
# running when the third has been submitted and the jobs listed (a few CLI calls)
QUEUE_DEMO_SLEEP = 5


def example_command(name):
    """The `command: |` block of an example spec, as the shell gets it."""
    lines = (EXAMPLES / name).read_text().splitlines()
    start = lines.index("command: |") + 1
    block = []
    for line in lines[start:]:
        if line and not line.startswith("  "):
            break
        block.append(line[2:])
    return "\n".join(block).rstrip("\n") + "\n"


def test_queue_demo_queues_and_completes(cluster):
    nodes = cluster.add_agents(2, names=names(2))
    cpus = min(n["cpus"] for n in cluster.nodes().values())
    # one copy fills a node, as a 4-core Pi with cpus: 4; a short sleep for the test
    command = example_command("queue-demo.yaml")
    assert command.count("sleep 20\n") == 1, command
    command = command.replace("sleep 20\n", f"sleep {QUEUE_DEMO_SLEEP}\n")
    sets = ["--set", f"resources.cpus={cpus}", "--set", f"command={json.dumps(command)}"]
    ids = [submit_example(cluster, "queue-demo.yaml", "--set", f"name=queue-{i}", *sets)
           for i in range(1, 4)]
    jobs = {j["id"]: j for j in cluster.jobs()}
    waiting = [jobs[i] for i in ids if jobs[i]["state"] == "pending"]
    assert waiting, f"3 node-sized jobs on 2 nodes: one must wait ({jobs})"
    assert all(j["reason"].startswith("waiting: no ready node fits") and
               "CPUs free" in j["reason"] for j in waiting), waiting
    for i in ids:
        job = cluster.wait_job(i, timeout=120)
        assert job["state"] == "completed", job
        assert job["nodes"][0] in nodes
        assert job["spec"]["command"] == command, job["spec"]
        out = cluster.logs(i)
        assert f"job {i} (queue-" in out and f"finished on {job['nodes'][0]}" in out, out
