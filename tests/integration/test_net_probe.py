"""bramble-net-probe (tools/net_probe.c, docs/probe-nccl.md): TCP throughput
between every ordered pair of a gang's nodes. The processes run by hand here, with
the environment bramble gives a gang (NODE_RANK, NNODES, MASTER_ADDR, MASTER_PORT,
BRAMBLE_NODELIST): two and three of them on 127.0.0.1, and (as root) across a veth
pair into a network namespace, where every rank has an address of its own. Also:
usage, the environment it needs, and failures that must name the peer."""

import json
import os
import subprocess

import pytest

import netlan
from conftest import BIN, CLI_TIMEOUT, free_port, sanitizer_lines, wait_for
from netlan import free_prefix

PROBE = BIN / "bramble-net-probe"

JOB_VARS = ("NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT", "BRAMBLE_NODE_NAME",
            "BRAMBLE_NODELIST", "RANK", "WORLD_SIZE")
NAMES = ["alpha", "bravo", "charlie"]
SMALL = 8 << 20  # bytes per transfer in these tests


@pytest.fixture(autouse=True)
def probe_built():
    if not PROBE.is_file():
        pytest.skip(f"{PROBE} not built")


def probe_env(**vars):
    """os.environ without any job variable, plus vars (None drops one)."""
    env = {k: v for k, v in os.environ.items() if k not in JOB_VARS}
    env.update({k: str(v) for k, v in vars.items() if v is not None})
    return env


def run_probe(*args, **vars):
    r = subprocess.run([str(PROBE), *[str(a) for a in args]], capture_output=True,
                       text=True, env=probe_env(**vars), timeout=CLI_TIMEOUT)
    assert not sanitizer_lines(r.stderr), r.stderr
    return r


def json_lines(out):
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


def start_rank(rank, world, port, *args, addr="127.0.0.1", names=NAMES, wrap=(),
               timeout=10):
    return subprocess.Popen(
        [*wrap, str(PROBE), "--timeout", str(timeout), *[str(a) for a in args]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=probe_env(NODE_RANK=rank, NNODES=world, MASTER_ADDR=addr, MASTER_PORT=port,
                      BRAMBLE_NODE_NAME=names[rank] if names else None,
                      BRAMBLE_NODELIST=",".join(names[:world]) if names else None))


def finish(p, timeout=CLI_TIMEOUT):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"rank did not finish in {timeout}s: {err}")
    assert not sanitizer_lines(err), err
    return p.returncode, out, err


def run_world(world, *args, port=None, wraps=None, addrs=None):
    """All ranks (the others first: they retry until rank 0 listens); rank 0's
    (rc, out, err) after checking that the others exited 0 and printed nothing."""
    port = port or free_port()
    wraps = wraps or [()] * world
    addrs = addrs or ["127.0.0.1"] * world
    procs = {r: start_rank(r, world, port, *args, addr=addrs[r], wrap=wraps[r])
             for r in range(world - 1, -1, -1)}
    results = {r: finish(p) for r, p in procs.items()}
    for r in range(1, world):
        rc, out, err = results[r]
        assert rc == 0 and out == "", (r, rc, out, err, results[0])
    return results[0]


def check_result(out, world, nbytes=SMALL):
    """Every ordered pair measured once, the pair lines and the matrix agreeing;
    the final line."""
    lines = json_lines(out)
    pairs, final = lines[:-1], lines[-1]
    names = NAMES[:world]
    assert final["result"] == "ok", final
    assert final["nodes"] == names and final["bytes"] == nbytes, final
    assert [(p["from"], p["to"]) for p in pairs] == \
        [(a, b) for a in names for b in names if a != b], pairs
    gbit, rtt = final["gbit_s"], final["rtt_ms"]
    assert len(gbit) == world and all(len(row) == world for row in gbit), gbit
    for i in range(world):
        assert gbit[i][i] is None and rtt[i][i] is None, final
    for p in pairs:
        i, j = names.index(p["from"]), names.index(p["to"])
        assert p["bytes"] == nbytes, p
        assert p["seconds"] > 0 and p["gbit_s"] > 0 and p["rtt_ms"] > 0, p
        assert p["gbit_s"] == pytest.approx(nbytes * 8 / p["seconds"] / 1e9,
                                            rel=5e-3, abs=2e-3), p
        assert gbit[i][j] == p["gbit_s"] and rtt[i][j] == p["rtt_ms"], (p, final)
    return pairs, final


# ---------------------------------------------------------------------------
# usage and environment


def test_help_exits_0():
    r = run_probe("--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: bramble-net-probe")
    for word in ("--bytes", "--pings", "--timeout", "--human", "NODE_RANK", "NNODES",
                 "MASTER_PORT", "BRAMBLE_NODELIST", "gbit_s", "rtt_ms"):
        assert word in r.stdout, word


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "--bogus"),
    (["--bytes", "12x"], "--bytes"),
    (["--bytes", "0"], "--bytes"),
    (["--pings", "-1"], "--pings"),
    (["--timeout", "0"], "--timeout"),
    (["extra"], "extra"),
])
def test_bad_usage_exits_2(args, message):
    r = run_probe(*args, NODE_RANK=0, NNODES=1)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert message in r.stderr and r.stderr.startswith("bramble-net-probe: "), r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("vars, message", [
    ({"NODE_RANK": 0}, "NNODES is not set"),
    ({"NNODES": 2}, "NODE_RANK is not set"),
    ({"NODE_RANK": 0, "NNODES": 2, "MASTER_PORT": 29500}, "MASTER_ADDR is not set"),
    ({"NODE_RANK": 1, "NNODES": 2, "MASTER_ADDR": "127.0.0.1"},
     "MASTER_PORT is not set"),
    ({"NODE_RANK": 2, "NNODES": 2}, "NODE_RANK='2'"),
    ({"NODE_RANK": 0, "NNODES": 2, "MASTER_ADDR": "h", "MASTER_PORT": 70000},
     "MASTER_PORT='70000'"),
    ({"NODE_RANK": 0, "NNODES": 2, "MASTER_ADDR": "h", "MASTER_PORT": 1,
      "BRAMBLE_NODELIST": "a,b,c"}, "BRAMBLE_NODELIST='a,b,c' is not NNODES=2"),
    ({"NODE_RANK": 0, "NNODES": 2, "MASTER_ADDR": "h", "MASTER_PORT": 1,
      "BRAMBLE_NODELIST": "a,"}, "BRAMBLE_NODELIST='a,'"),
])
def test_missing_or_bad_env_exits_2(vars, message):
    r = run_probe(**vars)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert message in r.stderr, r.stderr
    assert r.stdout == ""


def test_one_node_prints_an_empty_result():
    r = run_probe(NODE_RANK=0, NNODES=1, BRAMBLE_NODELIST="solo")
    assert r.returncode == 0, r.stderr
    assert json_lines(r.stdout) == [{"result": "ok", "nodes": ["solo"],
                                     "bytes": 64 << 20, "gbit_s": [[None]],
                                     "rtt_ms": [[None]]}]


# ---------------------------------------------------------------------------
# measuring on loopback


@pytest.mark.parametrize("world", [2, 3])
def test_every_ordered_pair_is_measured(world):
    rc, out, err = run_world(world, "--bytes", "8M")
    assert rc == 0, err
    check_result(out, world)


def test_human_table_and_no_pings():
    rc, out, err = run_world(2, "--bytes", "1M", "--pings", "0", "--human")
    assert rc == 0, err
    assert not json_lines(out), out
    assert "alpha            -> bravo" in out and "Gbit/s" in out, out
    assert "FROM \\ TO (Gbit/s)" in out and "rtt" not in out, out


def test_rank0_options_rule():
    """The others take the size from rank 0's orders, whatever their own flags."""
    port = free_port()
    other = start_rank(1, 2, port, "--bytes", "1G")
    rc, out, err = finish(start_rank(0, 2, port, "--bytes", "8M"))
    assert rc == 0, err
    assert finish(other)[0] == 0
    check_result(out, 2)


# ---------------------------------------------------------------------------
# failures name the peer


def test_unreachable_rank0_names_the_address():
    port = free_port()  # nobody listens there
    rc, out, err = finish(start_rank(1, 2, port, timeout=1))
    assert rc == 1, (rc, out, err)
    assert f"rank 1: cannot reach rank 0 at MASTER_ADDR=127.0.0.1 MASTER_PORT={port} " \
        "within 1 s" in err, err
    assert out == ""


def test_rank0_names_the_missing_rank_and_refuses_strangers():
    port = free_port()
    root = start_rank(0, 3, port, timeout=3)
    wrong = finish(start_rank(1, 2, port))  # retries until rank 0 listens
    assert wrong[0] == 1 and "joining rank 0 at 127.0.0.1" in wrong[2], wrong
    one = start_rank(1, 3, port)
    rc, out, err = finish(root)
    assert rc == 1, (rc, out, err)
    assert "refused rank 1 of 2 nodes: this job's NNODES is 3" in err, err
    assert "1 of 2 ranks connected within 3 s (first missing: rank 2 (charlie))" \
        in err, err
    assert out == ""
    rc1, out1, err1 = finish(one)
    assert rc1 == 1 and "joining rank 0 at 127.0.0.1" in err1, err1


@pytest.mark.parametrize("victim", [1, 0])
def test_a_peer_killed_mid_transfer_is_named(victim):
    """Transfers far too big to end in time; one rank is killed during the first
    (alpha -> bravo); the survivor ends at once, naming it."""
    port = free_port()
    procs = [start_rank(r, 2, port, "--bytes", "64G") for r in (1, 0)][::-1]

    def receiving():  # bravo (rank 1) has accepted the first transfer's connection
        assert procs[victim].poll() is None, finish(procs[victim])
        fds = [os.readlink(f"/proc/{procs[1].pid}/fd/{fd}")
               for fd in os.listdir(f"/proc/{procs[1].pid}/fd")]
        # its control connection to rank 0, its data listener, and the data
        return sum(fd.startswith("socket:") for fd in fds) >= 3

    wait_for(receiving, 30, "the first transfer to be under way")
    procs[victim].kill()
    procs[victim].communicate()
    # the survivor ends at once, well inside its 60 s --timeout (a hang runs into
    # finish's limit instead)
    rc, out, err = finish(procs[1 - victim], timeout=20)
    assert rc == 1, (rc, out, err)
    if victim == 1:
        assert "rank 1 (bravo)" in err, err
    else:
        assert "rank 0" in err and "127.0.0.1" in err, err
    assert not json_lines(out), out


# ---------------------------------------------------------------------------
# across real addresses: a network namespace behind a veth pair


@pytest.fixture
def veth_ns(request):
    """A namespace joined to the host by a veth pair: host 10.N.M.1/24, namespace
    10.N.M.2/24 (the recipe of test_probe.py's far_ns). Yields (ns, host_ip, ns_ip)."""
    net = free_prefix(150, 199)
    v = netlan.veth_ns(request, [f"{net}.1/24"], [f"{net}.2/24"], prefix="bnp",
                       what="the veth test")
    yield v.ns, f"{net}.1", f"{net}.2"


def test_across_a_veth_pair(veth_ns):
    """Ranks 0 and 2 on the host, rank 1 in the namespace, all given the host's
    veth address as MASTER_ADDR. The namespace reaches nothing on the host but that
    address, so the pairs work only if the table carries the addresses each rank
    was seen at (10.N.M.1 for ranks 0 and 2, 10.N.M.2 for rank 1)."""
    ns, host_ip, _ = veth_ns
    wrap = ("ip", "netns", "exec", ns)
    rc, out, err = run_world(3, "--bytes", "8M", wraps=[(), wrap, ()],
                             addrs=[host_ip] * 3)
    assert rc == 0, err
    check_result(out, 3)
