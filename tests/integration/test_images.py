"""Images without a registry: `bramble image load FILE NAME` keeps an archive as
`podman save` writes it in the coordinator's store, and a job whose image: names
it runs from it on any node, which fetches the archive (from the coordinator or a
node that has it) and loads it into its own podman.

Each node runs in a mount namespace of its own, where podman's storage is the
node's own and the submitting machine's files are out of sight, so an
image really travels: a node that has not loaded it has not got it. The image is
made here from busybox-static (`podman import`), saved as an archive and removed
from the host's podman. An image is matched to the node's architecture; an
archive that is not one, or is cut short, is refused and nothing is kept; an
image whose registry cannot be reached keeps its job waiting with podman's
answer as the reason."""
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid

import pytest

from conftest import wait_for
from treefiles import events

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for podman and mount namespaces"),
    pytest.mark.skipif(not shutil.which("podman") or not os.path.exists("/bin/busybox"),
                       reason="needs podman and busybox-static"),
]

NODES = ("node-1", "node-2")


STORAGE = "/var/lib/containers/storage"  # podman's as root, and its run state
RUNROOT = "/run/containers/storage"


def node_storage(root, name):
    """A podman storage of node name's own (its graph and run dirs), and the wrap
    that starts its agent with them in place of the host's and the laptop out of
    sight: (dir, wrap)."""
    d = root / "podman" / name
    (d / "graph").mkdir(parents=True)
    (d / "run").mkdir()
    return d, ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               f'mount -t tmpfs none "{root / "laptop"}" && '
               f'mount --bind "{d / "graph"}" {STORAGE} && '
               f'mount --bind "{d / "run"}" {RUNROOT} && exec "$@"', "sh"]


def podman(d, *args, check=True):
    """podman on node storage d (in a mount namespace where it is in place, as on
    the node: podman takes no long --runroot)."""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f'mount --bind "{d / "graph"}" {STORAGE} && '
                           f'mount --bind "{d / "run"}" {RUNROOT} && exec podman "$@"',
                           "sh", *args], capture_output=True, text=True, timeout=120,
                          check=check)


def has_image(d, image_id):
    """Whether node storage d holds the image (podman image exists: 0 yes, 1 no)."""
    rc = podman(d, "image", "exists", image_id, check=False).returncode
    assert rc in (0, 1), f"podman image exists answered {rc}"
    return rc == 0


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """A busybox image saved both ways, then removed from the host's podman:
    {"docker": path, "oci": path, "id": podman's ID}."""
    d = tmp_path_factory.mktemp("img")
    root = d / "rootfs"
    (root / "bin").mkdir(parents=True)
    shutil.copy("/bin/busybox", root / "bin" / "busybox")
    for cmd in ("sh", "echo", "cat", "id", "sleep", "uname"):
        os.symlink("busybox", root / "bin" / cmd)
    name = f"localhost/bramble-imgtest:{uuid.uuid4().hex[:8]}"
    tar = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True,
                         check=True)
    subprocess.run(["podman", "import", "-", name], input=tar.stdout, capture_output=True,
                   check=True, timeout=120)
    out = {}
    try:
        for fmt in ("docker", "oci"):
            out[fmt] = d / f"{fmt}.tar"
            subprocess.run(["podman", "save", "--format", f"{fmt}-archive", "-o",
                            str(out[fmt]), name], capture_output=True, check=True,
                           timeout=120)
        out["id"] = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}",
                                    name], capture_output=True, text=True, check=True,
                                   timeout=60).stdout.strip()
    finally:
        subprocess.run(["podman", "rmi", "-f", name], capture_output=True, timeout=120)
    return out


def arm64_archive(path):
    """A docker-archive of an arm64 image (never run here): its config says arm64."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        info = tarfile.TarInfo("hello.txt")
        data = b"arm64\n"
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    layer = layer.getvalue()
    lid = hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": "arm64", "variant": "v8", "os": "linux",
                         "config": {"Cmd": ["/bin/sh"]},
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{lid}"]}}).encode()
    cid = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{"Config": f"{cid}.json", "RepoTags": ["localhost/arm:1"],
                            "Layers": [f"{lid}/layer.tar"]}]).encode()
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for n, data in ((f"{lid}/layer.tar", layer), (f"{cid}.json", config),
                        ("manifest.json", manifest)):
            info = tarfile.TarInfo(n)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return cid


@pytest.fixture
def cluster(make_cluster, tmp_path, archives):
    """Two nodes, each with its own podman storage, that cannot see the laptop
    (where the archives are): (cluster, laptop, {node: its storage dir})."""
    if not os.path.isdir(STORAGE) or not os.path.isdir(RUNROOT):
        pytest.skip(f"podman's storage is not at {STORAGE} and {RUNROOT} here")
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    for fmt in ("docker", "oci"):
        shutil.copy(archives[fmt], laptop / f"{fmt}.tar")
    c = make_cluster()
    tok = c.token(uses=len(NODES))
    stores = {}
    for name in NODES:
        stores[name], wrap = node_storage(tmp_path, name)
        c.start_agent(name, token=tok, wrap=wrap,
                      extra=("--probe-port", "0", "--replica-port", "0"))
    c.wait_ready(*NODES)
    yield c, laptop, stores
    for d in stores.values():  # the containers' and images' files are root's
        podman(d, "rm", "-af", check=False)
        podman(d, "rmi", "-af", check=False)


def near(c, a, b):
    """Whether the network map has a round trip between nodes a and b under 2 ms
    (well inside the 5 ms within which a node counts as one site's)."""
    m = c.cli_json("probe")
    i, j = m["nodes"].index(a), m["nodes"].index(b)
    return m["rtt_ms"][i][j] is not None and 0 <= m["rtt_ms"][i][j] < 2


def run(c, name, image, node, command="echo uid=$(id -u); cat /etc/hostname >/dev/null; "
                                      "echo in-image; test -e /usr/bin/podman || echo own-root"):
    spec = c.write_spec(f"name: {name}\nimage: {image}\n"
                        f"resources: {{cpus: 0, nodelist: [{node}]}}\n"
                        f"command: '{command}'\n", name=f"{name}.yaml")
    _, out, _ = c.cli("submit", spec)
    return int(out)


def test_a_loaded_image_travels_to_each_node_once(cluster, archives):
    c, laptop, stores = cluster
    _, out, _ = c.cli("image", "load", laptop / "docker.tar", "bb:1")
    assert "loaded bb:1 (amd64" in out and "docker-archive" in out, out
    [img] = c.cli_json("image", "list")
    assert (img["name"], img["arch"], img["format"]) == ("bb:1", "amd64", "docker-archive")
    assert img["image_id"] == archives["id"], img  # podman's own ID for it
    for d in stores.values():  # no node has it yet
        assert not has_image(d, archives["id"])

    first = run(c, "img-first", "bb:1", "node-1")
    j = c.wait_job(first)
    log = c.logs(first, stream="both")
    assert j["state"] == "completed", (j["reason"], log)
    assert "[image] loading the image from the node's cache" in log, log
    assert "in-image" in log and "own-root" in log, log
    assert has_image(stores["node-1"], archives["id"])
    assert not has_image(stores["node-2"], archives["id"])

    again = run(c, "img-again", "bb:1", "node-1")
    j = c.wait_job(again)
    log = c.logs(again, stream="both")
    assert j["state"] == "completed", (j["reason"], log)
    assert "in-image" in log and "[image]" not in log, log  # loaded once per node

    fetched = [e for e in events(c, first) if "fetched to" in e]
    assert fetched and "its image fetched to node-1 in" in fetched[0], fetched
    assert " from " not in fetched[0], fetched  # from the coordinator's store

    # node-2 reads it from node-1, nearer than the coordinator. Probes on a loaded
    # machine can stretch a round trip for a moment: the map is read before each
    # try, and a try made while it said otherwise is made again
    tries = []
    for i in range(3):
        wait_for(lambda: near(c, "node-2", "node-1"), what="node-1 and node-2 to probe")
        other = run(c, f"img-other-{i}", "bb:1", "node-2")
        j = c.wait_job(other)
        log = c.logs(other, stream="both")
        assert j["state"] == "completed", (j["reason"], log)
        assert "[image] loading" in log and "in-image" in log, log
        assert has_image(stores["node-2"], archives["id"])
        tries.append([e for e in events(c, other) if "fetched to" in e])
        if tries[-1] and "fetched to node-2 from node-1" in tries[-1][0]:
            break
        # (node-2 holds it now: drop its copies for the next try)
        c.forget_cached("node-2")
        podman(stores["node-2"], "rmi", "-af")
    assert "fetched to node-2 from node-1" in tries[-1][0], tries

    # an oci-archive of the same image is the same image to podman
    _, out, _ = c.cli("image", "load", laptop / "oci.tar", "bb-oci")
    assert "loaded bb-oci:latest (amd64" in out and "oci-archive" in out, out
    imgs = {i["name"]: i for i in c.cli_json("image", "list")}
    assert imgs["bb-oci:latest"]["image_id"] == archives["id"], imgs

    # removed: the store forgets it; a job naming it now asks podman for a registry's
    _, out, _ = c.cli("image", "rm", "bb-oci")
    assert "removed bb-oci:latest: amd64" in out, out
    assert [i["name"] for i in c.cli_json("image", "list")] == ["bb:1"]


def test_bad_archives_and_names_are_refused_and_nothing_is_kept(cluster, tmp_path):
    c, laptop, _ = cluster
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"this is not a tar file at all\n" * 100)
    rc, _, err = c.cli("image", "load", junk, "junk:1", check=False)
    assert rc != 0 and "not an image archive" in err and "junk.tar" in err, err

    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as t:
        info = tarfile.TarInfo("README")
        info.size = 3
        t.addfile(info, io.BytesIO(b"hi\n"))
    rc, _, err = c.cli("image", "load", plain, "plain:1", check=False)
    assert rc != 0 and "not an image archive" in err, err

    whole = (laptop / "docker.tar").read_bytes()
    for cut in (len(whole) // 2, len(whole) - 1024):
        short = tmp_path / f"cut-{cut}.tar"
        short.write_bytes(whole[:cut])
        rc, _, err = c.cli("image", "load", short, "cut:1", check=False)
        assert rc != 0 and "cut short" in err, (cut, err)

    rc, _, err = c.cli("image", "load", laptop / "docker.tar", "bb;rm -rf /", check=False)
    assert rc != 0 and "not an image name" in err, err
    assert c.cli_json("image", "list") == []

    # the same name and architecture twice: the second is refused, the first kept
    c.cli("image", "load", laptop / "docker.tar", "twice:1")
    rc, _, err = c.cli("image", "load", laptop / "oci.tar", "twice:1", check=False)
    assert rc != 0 and "twice:1 has an image for amd64 already" in err, err
    [img] = c.cli_json("image", "list")
    assert img["format"] == "docker-archive"
    rc, _, err = c.cli("image", "rm", "nothing-here", check=False)
    assert rc != 0 and "no image nothing-here:latest" in err, err


def test_an_image_goes_only_to_nodes_of_its_architecture(cluster, tmp_path):
    c, laptop, _ = cluster
    arm = tmp_path / "arm.tar"
    cid = arm64_archive(arm)
    _, out, _ = c.cli("image", "load", arm, "multi:1")
    assert "(arm64/v8, docker-archive, id " + cid[:12] in out, out
    waiting = run(c, "img-arm", "multi:1", "node-1")

    def says_why():
        j = c.job(waiting)
        assert j["state"] == "pending", j
        return "image multi:1 was loaded for arm64/v8 only" in (j.get("reason") or "")
    wait_for(says_why, what="the arm64-only job to say why it waits")
    rc, _, err = c.cli("image", "rm", "multi:1", check=False)
    assert rc != 0 and f"used by job {waiting}" in err, err

    # an amd64 image under the same name: a job submitted now runs from it
    c.cli("image", "load", laptop / "docker.tar", "multi:1")
    archs = sorted(i["arch"] for i in c.cli_json("image", "list"))
    assert archs == ["amd64", "arm64"]
    now = run(c, "img-multi", "multi:1", "node-1")
    j = c.wait_job(now)
    assert j["state"] == "completed", (j["reason"], c.logs(now, stream="both"))
    assert "in-image" in c.logs(now)
    c.cli("cancel", waiting)
    c.wait_job(waiting)
    _, out, _ = c.cli("image", "rm", "multi:1", "--arch", "arm64")
    assert "removed multi:1: arm64" in out, out


def test_a_registry_that_cannot_be_reached_keeps_the_job_waiting(cluster):
    c, _, _ = cluster
    # nothing listens on port 9 here: podman's pull is refused at once
    jid = run(c, "img-unreachable", "127.0.0.1:9/bramble/nothing:1", "node-1")

    def waits_with_answer():
        j = c.job(jid)
        reason = j.get("reason") or ""
        return j["state"] == "pending" and "pulling 127.0.0.1:9/bramble/nothing:1" in reason
    wait_for(waits_with_answer, what="the job to wait, saying why")
    j = c.job(jid)
    assert "connection refused" in j["reason"].lower() or "127.0.0.1:9" in j["reason"], j
    assert "trying again in 30 s" in " ".join(events(c, jid)), events(c, jid)
    assert j.get("restarts", 0) == 0, j  # not the job's failure
    log = c.logs(jid, stream="both")
    assert "[image] pulling 127.0.0.1:9/bramble/nothing:1" in log, log
    c.cli("cancel", jid)
    assert c.wait_job(jid)["state"] == "cancelled"
