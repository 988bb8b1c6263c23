"""Services that scale with the gateway's load (service.autoscale): from zero and
back with the first request answered, not refused; more replicas under load; a
replica that goes drains first, its requests in flight finished, none cut. The
replicas are real HTTP servers speaking the OpenAI API (fake_openai.py) started as
bramble services; the cold-start clients are curl and the official `openai`
package for Node."""

import json
import signal
import subprocess
import threading
import time

import pytest

from conftest import wait_for
from test_dashboard import browser, dash_cluster, get_json, login, login_url, shot, text_of  # noqa: F401
from test_gateway import FAKE, PYTHON, Gateway, metric, openai_node  # noqa: F401

SPEC = """
name: {name}
kind: service
command: {python} {fake} --model {model} --control {control} {extra}
resources: {{cpus: 0}}
service:
  port: auto
  health: {{http: /health, interval: 1s, grace: 30s}}
  model: {model}
  public: true
  autoscale: {autoscale}
"""


def autoscaled(c, tmp_path, autoscale, name="llm", model="llama-8b", extra=""):
    control = tmp_path / f"control-{name}"
    control.mkdir(exist_ok=True)
    jid = c.submit(SPEC.format(name=name, python=PYTHON, fake=FAKE, model=model,
                               control=control, extra=extra, autoscale=autoscale))
    return jid, control


def live(c, jid):
    """The service's replicas that are not over: {replica number: its row}."""
    return {r["replica"]: r for r in c.job(jid)["replicas"]
            if r["state"] in ("pending", "starting", "running")}


def reasons(c, jid):
    return [ev["reason"] or "" for ev in c.job(jid)["events"]]


def curl_chat(port, model, text, timeout=120):
    """One chat through curl, as a user would type it: (status, body)."""
    r = subprocess.run(
        ["curl", "-sS", "--max-time", str(timeout), "-w", "\n%{http_code}",
         "-H", "Content-Type: application/json", "-d",
         json.dumps({"model": model, "messages": [{"role": "user", "content": text}]}),
         f"http://127.0.0.1:{port}/v1/chat/completions"],
        capture_output=True, text=True, timeout=timeout + 10)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body


def test_scale_to_zero_and_back_answers_the_first_request(cluster2, tmp_path, openai_node):
    c = cluster2
    # each replica takes 1.5 s to load its model, as a small real one would
    jid, _ = autoscaled(c, tmp_path, "{min: 0, max: 2, target_inflight: 4, up_after: 1s,"
                        " down_after: 2s, cold_start_timeout: 2m}",
                        extra="--start-delay-ms 1500")
    gw = Gateway(c)
    assert live(c, jid) == {}
    # at zero, the model is listed and a request waits for a replica to start
    wait_for(lambda: gw.models() == ["llama-8b"], 30, "the gateway to list the model")
    t0 = time.monotonic()
    code, body = curl_chat(gw.port, "llama-8b", "first one")
    took = time.monotonic() - t0
    assert code == 200, body
    assert json.loads(body)["choices"][0]["message"]["content"].endswith("first one")
    print(f"cold start: the first answer {took:.2f}s after the request "
          f"(the replica loads in 1.5s)")
    assert any("scaled from 0 to 1 replica: autoscale: 1 request waits" in r
               for r in reasons(c, jid)), reasons(c, jid)
    # no load for down_after: back to zero, the service still behind the gateway
    wait_for(lambda: live(c, jid) == {}, 60, "the service to scale back to 0")
    assert any("scaled from 1 to 0 replicas: autoscale: at most 0 requests" in r
               for r in reasons(c, jid)), reasons(c, jid)
    assert gw.models() == ["llama-8b"]
    # and from zero again, for a client nobody here wrote (retries off: a 503
    # would show)
    out = openai_node(gw.port, "--model", "llama-8b", "--text", "second one",
                      "--max-retries", "0")
    assert out["ok"] and out["content"].endswith("second one"), out
    assert sum("scaled from 0 to 1 replica" in r for r in reasons(c, jid)) == 2


def test_scales_up_under_load_and_drains_a_replica_before_stopping_it(cluster2, tmp_path):
    c = cluster2
    jid, control = autoscaled(c, tmp_path, "{min: 1, max: 2, target_inflight: 1,"
                              " up_after: 1s, down_after: 2s}")
    gw = Gateway(c)
    wait_for(lambda: gw.chat("llama-8b")[0] == 200, 60, "replica 0 to answer")
    results = {}

    def chat(key, text):
        results[key] = gw.chat("llama-8b", text, timeout=120)

    # two requests held by replica 0: the load asks for 2 replicas
    (control / "hang-0").touch()
    held = [threading.Thread(target=chat, args=(f"r{i}", f"held {i}")) for i in range(2)]
    for t in held:
        t.start()
    wait_for(lambda: 1 in live(c, jid) and live(c, jid)[1]["health"] == "healthy", 60,
             "replica 1 to be added and healthy")
    assert any("scaled from 1 to 2 replicas: autoscale: at least 2 requests in flight" in r
               for r in reasons(c, jid)), reasons(c, jid)
    # the gateway hears of replica 1: a request to it hangs there, the one with
    # the fewest in flight
    (control / "hang-1").touch()

    def routed_to_1():
        t = threading.Thread(target=chat, args=("r2", "on replica one"))
        t.start()
        return t

    wait_for(lambda: metric(gw, "bramble_gateway_replicas", service="llm", state="up") == 2,
             30, "the gateway to route to replica 1")
    last = routed_to_1()
    # r2 is held at replica 1 before r0 and r1 may end (else a tie could send it to
    # replica 0)
    wait_for(lambda: metric(gw, "bramble_gateway_inflight", service="llm",
                            model="llama-8b") == 3, 30, "r2 held at replica 1")
    (control / "hang-0").unlink()
    for t in held:
        t.join(60)
    assert all(results[f"r{i}"][0] == 200 for i in range(2)), results
    # only r2 is left, on replica 1: the load asks for 1; after down_after,
    # replica 1 drains: no new requests go to it, and it still runs
    wait_for(lambda: any("replica 1 draining" in r for r in reasons(c, live(c, jid)[1]["id"])),
             60, "replica 1 to drain")
    rep1 = live(c, jid)[1]
    assert rep1["draining"] and rep1["state"] == "running", rep1
    for i in range(4):
        st, h, body = gw.chat("llama-8b", f"after {i}")
        assert st == 200 and h["X-Bramble-Replica"] == "llm/0", (st, h, body)
    # the request it holds keeps it running: a window of two load reports (the
    # gateway sends one a second; no counter of them is shown, so a fixed window of
    # 2.5 s is what can be watched)
    seen = time.monotonic()
    wait_for(lambda: time.monotonic() - seen > 2.5, 10, "a window of two load reports")
    assert live(c, jid)[1]["state"] == "running", live(c, jid)
    assert last.is_alive(), results.get("r2")
    # its request ends whole; then it stops
    (control / "hang-1").unlink()
    last.join(60)
    st, h, body = results["r2"]
    assert st == 200 and h["X-Bramble-Replica"] == "llm/1", (st, h)
    assert body["choices"][0]["message"]["content"].endswith("on replica one"), body
    wait_for(lambda: 1 not in live(c, jid), 30, "replica 1 to stop once drained")
    assert any("replica 1 stops: drained: no gateway holds a request on it" in r
               for r in reasons(c, rep1["id"])), reasons(c, rep1["id"])
    assert c.job(rep1["id"])["state"] == "cancelled"


def test_two_gateways_at_once(cluster2, tmp_path):
    """Two gateways serve the same cluster: both route the model, the coordinator
    sums what both report (the service's autoscale counts 2 gateways), and when
    one stops the other serves on and the count drops to 1."""
    c = cluster2
    jid, _ = autoscaled(c, tmp_path, "{min: 1, max: 2, target_inflight: 50}")
    a, b = Gateway(c, "gw-a"), Gateway(c, "gw-b")
    for gw in (a, b):
        wait_for(lambda: gw.chat("llama-8b")[0] == 200, 60, "the replica to answer")
    assert sorted(g["name"] for g in c.cli_json("gateway", "list")) == ["gw-a", "gw-b"]
    wait_for(lambda: c.job(jid)["autoscale"]["gateways"] == 2, 30,
             "the coordinator to hear both gateways' load")
    a.proc.kill(signal.SIGTERM)
    assert b.chat("llama-8b")[0] == 200
    wait_for(lambda: c.job(jid)["autoscale"]["gateways"] == 1, 60,
             "the stopped gateway's load to be let go")
    assert b.chat("llama-8b")[0] == 200


def test_the_dashboard_shows_each_model_its_replicas_load_rate_and_latency(
        make_cluster, browser, tmp_path):
    c, port = dash_cluster(make_cluster, agents=1)
    jid, _ = autoscaled(c, tmp_path, "{min: 1, max: 2, target_inflight: 50}")
    gw = Gateway(c)
    wait_for(lambda: gw.chat("llama-8b")[0] == 200, 60, "the replica to answer")
    stop = threading.Event()

    failed = []

    def steady():  # a request every 50 ms while the page is looked at
        while not stop.is_set():
            try:
                st = gw.chat("llama-8b", "steady")[0]
            except OSError as e:
                st = repr(e)
            if st != 200:
                failed.append(st)
            stop.wait(0.05)

    t = threading.Thread(target=steady)
    t.start()
    try:
        # what the page reads: the gateway's figures for the service
        cookie = login(port, login_url(c))

        def figures():
            (s,) = [s for s in get_json(port, "/api/services", cookie)[1]["services"]
                    if s["id"] == jid]
            return s if s["load"]["rate"] > 1 and s["load"]["gateways"] == 1 else None

        def steady_figures():
            if failed:
                pytest.fail(f"steady requests failed: {failed}")
            return figures()

        s = wait_for(steady_figures, 30, "the gateway's rate of the service")
        assert s["model"] == "llama-8b" and s["replicas_wanted"] == 1, s
        assert s["autoscale"]["min"] == 1 and s["autoscale"]["max"] == 2, s
        assert 0 < s["load"]["latency_ms"] < 5000 and s["load"]["errors"] == 0, s
        # and the page shows it, one row per model
        d = browser
        d.get(login_url(c))

        def row():
            text = text_of(d, f'#models tr[data-service="{jid}"]')
            return text if "1 of 1 (1..2)" in text else None

        text = wait_for(row, 30, "the model's row on the dashboard")
        cells = text.split()
        assert cells[0] == "llama-8b" and cells[1] == "llm", cells
        rate, latency = float(cells[-3]), float(cells[-2])
        assert rate > 1 and 0 < latency < 5000, cells
        shot(d, tmp_path, "models")
    finally:
        stop.set()
        t.join(30)
