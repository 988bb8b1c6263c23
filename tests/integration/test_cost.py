"""What a node costs per hour now (docs/cli.md, "nodes"; docs/metrics.md): its
agent's fixed --cost-per-hour, plus its electricity at --power-price per kWh, the
draw being its GPUs' (read through NVML, averaged over each heartbeat interval)
plus --idle-watts, the rest of the machine.

The GPUs are the fake NVML of test_gpu_live.py (tests/fake_nvml): two of them at
200 W and 100 W, then one of them at 400 W. The rate is read back where users see
it: `bramble nodes`, `bramble node show` (both forms) and /metrics.
"""

import errno
import signal
import subprocess

import pytest

from conftest import BIN, free_port, read_yaml_flat, wait_for
from test_gpu_live import FAKE_NVML, MODEL
from test_metrics import PROMTOOL, get, metrics_token, samples

FIXED, PRICE, IDLE = 0.5, 0.30, 50
AGENT_FLAGS = ["--cost-per-hour", str(FIXED), "--power-price", str(PRICE),
               "--idle-watts", str(IDLE)]


def write_gpus(path, *watts):
    """One fake GPU per figure of watts, drawing that much (atomically: the fake
    reads the file on every NVML call)."""
    tmp = path.with_suffix(".new")
    tmp.write_text("# name | total | used | util | power W | temp C\n" +
                   "".join(f"{MODEL} | 24GiB | 0 | 50 | {w} | 40\n" for w in watts))
    tmp.replace(path)


def rate(watts):
    return FIXED + PRICE * watts / 1000


def near(a, b):
    return isinstance(a, (int, float)) and abs(a - b) < 1e-9


def wait_cost(c, name, cost, watts):
    """The node as `bramble nodes --json` shows it once it reports cost and watts."""
    def check():
        n = c.nodes()[name]
        ok = near(n.get("cost_per_hour"), cost) and near(n.get("power_watts"), watts)
        return n if ok else None
    return wait_for(check, what=f"{name} to cost {cost}/h drawing {watts} W")


def test_cost_follows_the_power_drawn(make_cluster, tmp_path):
    if not (FAKE_NVML / "libnvidia-ml.so.1").exists():
        pytest.fail(f"{FAKE_NVML}/libnvidia-ml.so.1 missing: the build makes it with the "
                    "unit tests (BRAMBLE_TESTS=ON)")
    gpus = tmp_path / "gpus.txt"
    write_gpus(gpus, 200, 100)
    c = make_cluster(start=False)
    port = free_port()
    c.start_coordinator(extra=["--http", f"127.0.0.1:{port}"])
    env = c.env
    c.env = dict(env, LD_LIBRARY_PATH=str(FAKE_NVML), FAKE_NVML_GPUS=str(gpus))
    c.start_agent("gpu", extra=AGENT_FLAGS)
    c.env = env
    c.start_agent("cpu", extra=AGENT_FLAGS + ["--gpus", "none"])
    c.wait_ready("gpu", "cpu")

    # 0.5 + 0.30 * (200 + 100 + 50) / 1000 = 0.605; without GPUs, idle alone
    wait_cost(c, "gpu", rate(350), 350)
    assert near(rate(350), 0.605)
    wait_cost(c, "cpu", rate(IDLE), IDLE)
    shown = c.cli_json("node", "show", "gpu")
    assert abs(shown["cost_per_hour"] - 0.605) < 0.01 and "power_watts" in shown, shown
    _, out, _ = c.cli("node", "show", "gpu")
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    assert abs(float(fields["cost per hour"]) - 0.605) < 0.01, out
    assert fields["power"].strip().endswith(" W"), out
    _, out, _ = c.cli("nodes")
    head, *rows = out.splitlines()
    col = head.index("COST/H")  # the columns line up (GPUS holds spaces)
    costs = {r.split()[0]: float(r[col:].split()[0]) for r in rows}
    assert abs(costs["gpu"] - 0.605) < 0.01 and abs(costs["cpu"] - 0.515) < 0.01, out

    # /metrics: a gauge each, and a page promtool takes
    token = metrics_token(c)

    def page_says(cost, watts):
        status, _, body = get(port, token=token)
        assert status == 200, (status, body)
        s = samples(body)
        ok = (near(s.get('bramble_node_cost_per_hour{node="gpu"}'), cost) and
              near(s.get('bramble_node_power_watts{node="gpu"}'), watts) and
              near(s.get('bramble_node_cost_per_hour{node="cpu"}'), rate(IDLE)))
        return body if ok else None

    page = wait_for(lambda: page_says(rate(350), 350), what="/metrics to show the cost")
    assert "# TYPE bramble_node_cost_per_hour gauge" in page, page
    assert "# TYPE bramble_node_power_watts gauge" in page, page
    if PROMTOOL:
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=page, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, f"promtool check metrics:\n{r.stdout}{r.stderr}"

    # GPU 0 works harder: 400 + 100 + 50 W, and the rate follows
    write_gpus(gpus, 400, 100)
    wait_cost(c, "gpu", rate(550), 550)
    wait_for(lambda: page_says(rate(550), 550), what="/metrics to follow the power")

    # a restart with --data-dir alone keeps the price and the idle draw
    c.agents["gpu"].kill(signal.SIGTERM)
    c.env = dict(env, LD_LIBRARY_PATH=str(FAKE_NVML), FAKE_NVML_GPUS=str(gpus))
    c.start_agent("gpu", join=False)
    c.env = env
    write_gpus(gpus, 100, 100)
    wait_cost(c, "gpu", rate(250), 250)
    saved = read_yaml_flat(c.agent_dir("gpu") / "agent.yaml")
    assert float(saved["power_price"]) == PRICE and float(saved["idle_watts"]) == IDLE, saved


def test_bad_heartbeat_figures_are_refused_by_name(make_cluster):
    """A heartbeat whose cost_per_hour or power_watts is not a number of 0 or more
    is refused with EPROTO naming the field, and the node keeps its rate."""
    c = make_cluster()
    c.add_agents(1, extra=AGENT_FLAGS + ["--gpus", "none"], names=["node-1"])
    wait_cost(c, "node-1", rate(IDLE), IDLE)
    y = read_yaml_flat(c.agent_dir("node-1") / "credential")
    raw = c.raw_client(y["public_key"], y["secret_key"])
    try:
        for field, value in (("cost_per_hour", -1), ("cost_per_hour", "cheap"),
                             ("power_watts", -0.5), ("power_watts", None)):
            _, r, _ = raw.request("node.heartbeat", {"tasks": [], field: value})
            assert r.get("errnum") == errno.EPROTO and field in r.get("error", ""), (field, r)
    finally:
        raw.close()
    n = c.nodes()["node-1"]
    assert near(n["cost_per_hour"], rate(IDLE)) and near(n["power_watts"], IDLE), n
    c.assert_alive()


@pytest.mark.parametrize("flag, value", [("--power-price", "-1"), ("--idle-watts", "abc"),
                                         ("--power-price", "nan"), ("--idle-watts", "")])
def test_bad_flags_are_refused_by_name(tmp_path, flag, value):
    r = subprocess.run([str(BIN / "bramble-agent"), "--data-dir", str(tmp_path / "a"),
                        flag, value], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0, r
    assert f"{flag} '{value}': expected a number, 0 or more" in r.stderr, r.stderr
    assert not (tmp_path / "a").exists()
