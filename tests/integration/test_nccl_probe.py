"""bramble-nccl-probe (tools/nccl_probe.c, docs/probe-nccl.md): usage, the
environment it needs, a clean failure without a GPU, and the TCP bootstrap that
hands rank 0's NCCL id to the other ranks (its hidden --bootstrap-only mode
exchanges a random id without touching CUDA, so it runs anywhere). With a GPU
visible, a one-process world is measured for real.

The binary is built only where CMake found the CUDA toolkit and NCCL; without it
every test here is skipped."""

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, CLI_TIMEOUT, free_port, sanitizer_lines

PROBE = BIN / "bramble-nccl-probe"

# the variables a gang job with tasks_per_node: gpus gets (docs: ARCHITECTURE)
JOB_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT", "NNODES", "NODE_RANK", "BRAMBLE_NODE_NAME",
            "CUDA_VISIBLE_DEVICES")


@pytest.fixture(autouse=True)
def probe_built():
    if not PROBE.is_file():
        pytest.skip(f"{PROBE} not built: CMake builds it only where it finds the CUDA "
                    "toolkit and NCCL (see the configure output)")


def probe_env(**vars):
    """os.environ without any job variable, plus vars (None drops one)."""
    env = {k: v for k, v in os.environ.items() if k not in JOB_VARS}
    env.update({k: str(v) for k, v in vars.items() if v is not None})
    return env


def run_probe(*args, timeout=CLI_TIMEOUT, **vars):
    r = subprocess.run([str(PROBE), *[str(a) for a in args]], capture_output=True,
                       text=True, env=probe_env(**vars), timeout=timeout)
    assert not sanitizer_lines(r.stderr), r.stderr
    return r


def json_lines(out):
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


def gpu_visible():
    """Whether this machine shows an NVIDIA GPU at all (driver device node)."""
    return Path("/dev/nvidiactl").exists() and shutil.which("nvidia-smi") is not None \
        and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


# ---------------------------------------------------------------------------
# usage and environment


def test_help_exits_0():
    r = run_probe("--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: bramble-nccl-probe")
    for word in ("--max-bytes", "--min-bytes", "--iters", "--warmup", "--human",
                 "busbw", "RANK", "MASTER_PORT"):
        assert word in r.stdout, word
    assert "--bootstrap-only" not in r.stdout  # hidden: for tests


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "--bogus"),
    (["--iters", "0"], "--iters"),
    (["--max-bytes", "12x"], "--max-bytes"),
    (["--min-bytes", "3"], "multiples of 4"),
    (["--min-bytes", "1M", "--max-bytes", "1K"], "larger than --max-bytes"),
    (["extra"], "extra"),
])
def test_bad_usage_exits_2(args, message):
    r = run_probe(*args, RANK=0, WORLD_SIZE=1)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert message in r.stderr and r.stderr.startswith("bramble-nccl-probe: "), r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("vars, missing", [
    ({"WORLD_SIZE": 2}, "RANK"),
    ({"RANK": 0}, "WORLD_SIZE"),
    ({"RANK": 0, "WORLD_SIZE": 2, "MASTER_PORT": 29500}, "MASTER_ADDR"),
    ({"RANK": 1, "WORLD_SIZE": 2, "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT"),
])
def test_missing_env_exits_2_naming_the_variable(vars, missing):
    r = run_probe(**vars)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"{missing} is not set" in r.stderr, r.stderr


@pytest.mark.parametrize("vars, message", [
    ({"RANK": 2, "WORLD_SIZE": 2}, "RANK='2'"),
    ({"RANK": 0, "WORLD_SIZE": "two"}, "WORLD_SIZE='two'"),
    ({"RANK": 1, "WORLD_SIZE": 2, "MASTER_ADDR": "h", "MASTER_PORT": 70000},
     "MASTER_PORT='70000'"),
])
def test_bad_env_exits_2(vars, message):
    r = run_probe(**vars)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert message in r.stderr, r.stderr


# ---------------------------------------------------------------------------
# the GPU: none here (clean failure), or a one-process world measured for real


def test_empty_cuda_visible_devices_means_no_device():
    """bramble sets CUDA_VISIBLE_DEVICES to "" for a job without GPUs: no device
    on any machine, GPU box or not."""
    r = run_probe(RANK=0, WORLD_SIZE=1, CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "bramble-nccl-probe: no CUDA device visible (CUDA_VISIBLE_DEVICES=)" \
        in r.stderr, r.stderr
    assert r.stdout == ""


def test_without_gpu_exits_2_or_with_gpu_measures_one_rank():
    if not gpu_visible():
        r = run_probe(RANK=0, WORLD_SIZE=1, CUDA_VISIBLE_DEVICES="0")
        assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
        assert "bramble-nccl-probe: no CUDA device visible (CUDA_VISIBLE_DEVICES=0)" \
            in r.stderr, r.stderr
        return
    # ASan's shadow gap is where the CUDA driver maps memory (sanitizer builds)
    asan = os.environ.get("ASAN_OPTIONS", "")
    r = run_probe("--max-bytes", "1M", "--iters", "3", "--warmup", "1", timeout=300,
                  RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, NNODES=1,
                  NODE_RANK=0, MASTER_ADDR="127.0.0.1", MASTER_PORT=free_port(),
                  BRAMBLE_NODE_NAME="test", CUDA_VISIBLE_DEVICES="0",
                  ASAN_OPTIONS=f"{asan}:protect_shadow_gap=0".lstrip(":"))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    lines = json_lines(r.stdout)
    sizes = [ln["bytes"] for ln in lines[:-1]]
    assert sizes == [8 << i for i in range(len(sizes))] and sizes[-1] == 1 << 20, sizes
    for ln in lines[:-1]:
        assert ln["time_us"] > 0 and ln["algbw_gbs"] >= 0, ln
        assert ln["busbw_gbs"] == 0, ln  # 2(n-1)/n is 0 for one rank
    final = lines[-1]
    assert final["result"] == "ok", final
    assert (final["ranks"], final["nodes"]) == (1, 1), final
    assert final["at_bytes"] in sizes
    assert final["nccl_version"].count(".") == 2, final


# ---------------------------------------------------------------------------
# the bootstrap alone (no CUDA): rank 0 serves the id on MASTER_PORT


def start_rank(rank, world, port, *args, addr="127.0.0.1", timeout=30):
    return subprocess.Popen(
        [str(PROBE), "--bootstrap-only", "--timeout", str(timeout), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=probe_env(RANK=rank, WORLD_SIZE=world, MASTER_ADDR=addr, MASTER_PORT=port,
                      LOCAL_RANK=rank, NNODES=1))


def finish(p, timeout=CLI_TIMEOUT):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"rank did not finish in {timeout}s: {err}")
    assert not sanitizer_lines(err), err
    return p.returncode, out, err


@pytest.mark.parametrize("world", [2, 3])
def test_bootstrap_hands_every_rank_the_same_id(world):
    port = free_port()
    # the others first: they must retry until rank 0 listens
    procs = [start_rank(r, world, port) for r in range(world - 1, 0, -1)]
    procs.append(start_rank(0, world, port))
    hashes = {}
    for p in procs:
        rc, out, err = finish(p)
        assert rc == 0, err
        [line] = json_lines(out)
        hashes[line["rank"]] = line["id_hash"]
    assert sorted(hashes) == list(range(world)), hashes
    assert len(set(hashes.values())) == 1, hashes
    assert len(hashes[0]) == 16


def test_bootstrap_ids_differ_between_runs():
    seen = set()
    for _ in range(2):
        port = free_port()
        procs = [start_rank(1, 2, port), start_rank(0, 2, port)]
        for p in procs:
            rc, out, err = finish(p)
            assert rc == 0, err
            seen.add(json_lines(out)[0]["id_hash"])
    assert len(seen) == 2, seen


def test_bootstrap_one_rank_needs_no_master():
    r = run_probe("--bootstrap-only", RANK=0, WORLD_SIZE=1)
    assert r.returncode == 0, r.stderr
    assert json_lines(r.stdout)[0]["rank"] == 0


def test_bootstrap_unreachable_rank0_names_the_address():
    port = free_port()  # nobody listens there
    rc, out, err = finish(start_rank(1, 2, port, timeout=1))
    assert rc == 1, (rc, out, err)
    assert f"cannot reach rank 0 at MASTER_ADDR=127.0.0.1 MASTER_PORT={port} within 1 s" \
        in err, err
    assert out == ""


def test_bootstrap_refuses_a_wrong_world_size_and_a_duplicate_rank():
    port = free_port()
    root = start_rank(0, 3, port, timeout=4)
    wrong = finish(start_rank(1, 2, port))  # retries until rank 0 listens
    assert wrong[0] == 1 and "fetching the NCCL id from 127.0.0.1" in wrong[2], wrong
    first = finish(start_rank(1, 3, port))
    assert first[0] == 0, first
    dup = finish(start_rank(1, 3, port))
    assert dup[0] == 1, dup
    rc, out, err = finish(root)
    assert rc == 1, (rc, out, err)
    assert "refused rank 1 of world size 2: this job's WORLD_SIZE is 3" in err, err
    assert "refused a second rank 1" in err, err
    assert "1 of 2 ranks fetched the NCCL id within 4 s (first missing: rank 2)" in err, err
    assert out == ""


def test_bootstrap_rank0_cannot_listen_on_a_busy_port():
    if socket.has_ipv6:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", 0))
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("0.0.0.0", 0))
    with s:
        s.listen()
        port = s.getsockname()[1]
        rc, out, err = finish(start_rank(0, 2, port, timeout=2))
    assert rc == 1, (rc, out, err)
    assert f"cannot listen on MASTER_PORT={port}" in err, err
