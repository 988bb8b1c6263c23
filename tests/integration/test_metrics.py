"""The coordinator's HTTP side: GET /metrics with a metrics token (docs/metrics.md).

A real brambled with --http and two real agents runs a job; the admin makes a
metrics token with `bramble token create --metrics`. The page is read with and
without the token, checked by Debian's `promtool check metrics`, and scraped by
Debian's real `prometheus`, whose own query API must then give back what the
cluster is: two ready nodes and one completed job. Bad flags, a taken port and
hostile clients (idle connections, huge headers, a 100 MB body) get clear
answers and never stall the coordinator. Its heartbeat counters show every
heartbeat handled and, with a long node timeout, only some answered.
"""

import http.client
import json
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse

import pytest

from conftest import DEADLINE, REPO, Cluster, free_port, tail, wait_for

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
NEEDS = ("(Debian's `prometheus` package; tests/run.sh installs it via "
         "deploy/install-deps.sh)")


def get(port, path="/metrics", token=None, method="GET", headers=None, body=None,
        timeout=10):
    """(status, headers, body text) of one request to 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode(errors="replace")
    finally:
        conn.close()


def samples(text):
    """{'name{labels}': value} of a page in Prometheus's text format."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def http_cluster(make_cluster, agents=0, port=None, **kw):
    """A coordinator with --http on a (free) loopback port, and agents; the port."""
    c = make_cluster(start=False, **kw)
    port = port or free_port()
    c.start_coordinator(extra=["--http", f"127.0.0.1:{port}"])
    if agents:
        c.add_agents(agents)
    return c, port


def metrics_token(cluster):
    _, out, err = cluster.cli("token", "create", "--metrics")
    tok = out.strip()
    assert tok.startswith("brm1.") and "\n" not in tok, (out, err)
    return tok


def wait_page(port, token, want, what):
    """The page once every 'name{labels}': value of want is on it."""
    def check():
        status, _, body = get(port, token=token)
        assert status == 200, (status, body)
        s = samples(body)
        return body if all(s.get(k) == v for k, v in want.items()) else None

    return wait_for(check, what=what)


@pytest.fixture
def prometheus(tmp_path):
    """Start Debian's prometheus scraping 127.0.0.1:port every second with the
    bearer token in a file; yields start(port) -> (its HTTP port, the token file).
    Until the file is written it sends nothing (it cannot read the token), so it can
    start first: it takes ~5 s to pass a new target to its scraper."""
    if not PROMETHEUS:
        pytest.skip(f"prometheus not found {NEEDS}")
    procs = []

    def start(target_port):
        d = tmp_path / "prometheus"
        d.mkdir()
        (d / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: bramble\n"
            "    authorization: {type: Bearer, credentials_file: "
            f"{d / 'token'}}}\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n")
        port = free_port()
        while port == target_port:  # the coordinator has not bound it yet
            port = free_port()
        log = open(d / "prometheus.log", "wb")
        p = subprocess.Popen([PROMETHEUS, f"--config.file={d / 'prometheus.yml'}",
                              f"--storage.tsdb.path={d / 'data'}",
                              f"--web.listen-address=127.0.0.1:{port}"],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        procs.append((p, d / "prometheus.log", log))

        def ready():
            if p.poll() is not None:
                raise AssertionError(f"prometheus exited ({p.returncode}):\n"
                                     f"{tail(d / 'prometheus.log')}")
            return get(port, "/-/ready", timeout=2)[0] == 200

        wait_for(ready, what="prometheus to be ready")
        return port, d / "token"

    yield start
    for p, _, log in procs:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
        log.close()


def prom_query(port, query):
    """The instant vector of query, through Prometheus's own HTTP API."""
    status, _, body = get(port, "/api/v1/query?" + urllib.parse.urlencode({"query": query}),
                          timeout=5)
    assert status == 200, (status, body)
    data = json.loads(body)
    assert data["status"] == "success", data
    return data["data"]["result"]


def test_metrics_token_promtool_and_prometheus(make_cluster, prometheus):
    port = free_port()
    prom, token_file = prometheus(port)
    c, port = http_cluster(make_cluster, agents=2, port=port, heartbeat="200ms",
                           node_timeout="2s")
    jid = c.submit("name: metrics-job\ncommand: echo hello\n")
    assert c.wait_job(jid)["state"] == "completed"

    # without a token, with another kind of header, with a wrong one: 401 in words
    status, headers, body = get(port)
    assert status == 401 and "no bearer token" in body, (status, body)
    assert headers.get("WWW-Authenticate", "").startswith("Bearer"), headers
    assert get(port, headers={"Authorization": "Basic YWRtaW46YWRtaW4="})[0] == 401
    status, _, body = get(port, token="brm1." + "0" * 48)
    assert status == 401 and "not known to this coordinator" in body, body
    status, _, body = get(port, token=c.token())  # a join token is not a metrics token
    assert status == 401 and "not a metrics token" in body, body

    token = metrics_token(c)
    toks = {t["id"]: t for t in c.cli_json("token", "list")}
    mine = [t for t in toks.values() if t["kind"] == "metrics"]
    assert len(mine) == 1 and mine[0]["expires"] is None, toks

    # other paths and methods ("/" is the dashboard's: a metrics token is no
    # session, docs/dashboard.md)
    assert get(port, "/", token=token)[0] == 401
    assert get(port, "/x", token=token)[0] == 404
    assert get(port, "/metrics/../x", token=token)[0] == 404
    status, headers, _ = get(port, token=token, method="POST", body=b"x" * 1000)
    assert status == 405 and headers.get("Allow") == "GET, HEAD", headers

    page = wait_page(port, token, {
        'bramble_nodes{state="ready"}': 2,
        'bramble_jobs{state="completed"}': 1,
        'bramble_user_jobs{user="admin",state="completed"}': 1,
        'bramble_job_queue_wait_seconds_count': 1,
        'bramble_http_unauthorized_total{reason="no_token"}': 1,
        'bramble_http_unauthorized_total{reason="unknown_token"}': 2,
        'bramble_http_unauthorized_total{reason="not_bearer"}': 1,
    }, "the page to count the cluster and the refused requests")

    def heartbeat_measured():
        # a round trip is reported with the heartbeat after an answered one: on a
        # fast machine the page above can come before the first such report
        _, _, body = get(port, token=token)
        return body if samples(body).get("bramble_heartbeat_rtt_seconds_count", 0) > 0 \
            else None

    page = wait_for(heartbeat_measured, what="a heartbeat round trip on the page")
    s = samples(page)
    assert s["bramble_heartbeat_rtt_seconds_count"] > 0, page
    assert s["bramble_heartbeat_handling_seconds_count"] > 0, page
    assert s["bramble_store_size_bytes"] > 4096, page
    assert s['bramble_requests_refused_total{reason="not_allowed"}'] == 0, page
    assert s['bramble_log_dropped_bytes_total{by="coordinator"}'] == 0, page
    for name in ("bramble_sends_dropped_total", "bramble_handshakes_refused_total"):
        assert name in s, f"{name} missing:\n{page}"
    assert "# TYPE bramble_job_recovery_seconds histogram" in page, page
    status, headers, _ = get(port, token=token)
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers

    if PROMTOOL:
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=page, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, f"promtool check metrics:\n{r.stdout}{r.stderr}"

    # a refused request is counted by its reason
    before = s['bramble_requests_refused_total{reason="not_found"}']
    rc, _, err = c.cli("node", "show", "no-such-node", check=False)
    assert rc == 1, err
    wait_page(port, token, {'bramble_requests_refused_total{reason="not_found"}': before + 1},
              "the refused request to be counted")

    # a real Prometheus scrapes it with the token, and its query API says what it saw
    token_file.write_text(token)

    def scraped(query, value):
        def check():
            r = prom_query(prom, query)
            return len(r) == 1 and float(r[0]["value"][1]) == value

        wait_for(check, what=f"prometheus to have {query} = {value}")

    scraped('bramble_nodes{state="ready"}', 2)
    scraped('bramble_jobs{state="completed"}', 1)
    # what the admin's job held, in the ledger (usage.h): one CPU while it ran
    assert re.search(r'^bramble_user_cpu_seconds_total\{user="admin"\} [0-9.e+-]+$', page,
                     re.M), page
    assert re.search(r"^bramble_checkpoints_total 0$", page, re.M), page
    scraped('up{job="bramble"}', 1)

    # the docs name every metric on the page, and every query of the Grafana
    # dashboard is PromQL that this Prometheus takes, about metrics on the page
    families = re.findall(r"^# TYPE (\S+) ", page, re.M)
    doc = (REPO / "docs" / "metrics.md").read_text()
    assert [f for f in families if f"`{f}`" not in doc] == [], "undocumented metrics"
    board = json.loads((REPO / "docs" / "grafana" / "bramble.json").read_text())
    for panel in board["panels"]:
        for t in panel["targets"]:
            expr = t["expr"].replace("$__rate_interval", "1m")
            prom_query(prom, expr)
            for name in re.findall(r"\bbramble_[a-z_]+", expr):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert base in families, f"{panel['title']}: {name} is not on the page"

    # a node is lost: its job runs again on the other node, and the time it took is
    # measured from the moment the loss was declared
    jid = c.submit("name: metrics-long\ncommand: sleep 600\n"
                   "restart:\n  max: 2\n  on: [node_lost]\n")
    victim = c.wait_job(jid, "running")["nodes"][0]
    c.kill_node(victim)
    wait_for(lambda: (lambda j: j["state"] == "running" and j["attempt"] == 2)(c.job(jid)),
             what="the job to run again after its node was lost")
    page = wait_page(port, token, {'bramble_job_recovery_seconds_count': 1,
                                   'bramble_nodes{state="lost"}': 1,
                                   'bramble_nodes{state="ready"}': 1,
                                   'bramble_jobs{state="running"}': 1},
                     "the page to count the recovery")
    s = samples(page)
    assert 0 < s["bramble_job_recovery_seconds_sum"] < DEADLINE, page
    assert s["bramble_job_queue_wait_seconds_count"] == 2, page  # not counted again
    c.cli("cancel", jid)

    # a revoked token is refused from then on
    c.cli("token", "revoke", mine[0]["id"])
    status, _, body = get(port, token=token)
    assert status == 401 and "revoked" in body, (status, body)
    if not PROMTOOL:
        pytest.skip(f"promtool not found {NEEDS}: the page's format went unchecked")


def test_heartbeats_all_handled_some_answered(make_cluster):
    """A node timeout of 50 heartbeat intervals: the coordinator handles every
    heartbeat but answers about one in nine (PROTOCOL.md, node.heartbeat: at least
    every third of the fence time). An answered heartbeat's round trip comes back
    in the next one, so bramble_heartbeat_rtt_seconds counts the answers."""
    c, port = http_cluster(make_cluster, agents=1, heartbeat="200ms", node_timeout="10s")
    token = metrics_token(c)

    def counts():
        status, _, body = get(port, token=token)
        assert status == 200, (status, body)
        s = samples(body)
        return (s.get("bramble_heartbeat_handling_seconds_count", 0),
                s.get("bramble_heartbeat_rtt_seconds_count", 0))

    def first_answer():
        handled, answered = counts()
        return (handled, answered) if answered > 0 else None

    handled0, answered0 = wait_for(first_answer, what="a first answered heartbeat")

    def since():
        handled, answered = counts()
        return (handled - handled0, answered - answered0) if handled - handled0 >= 45 else None

    handled, answered = got = wait_for(since, timeout=60, what="45 more heartbeats handled")
    # 45 heartbeats of 200 ms span 9 s: an answer at least every 2 s (a third of
    # the 6 s fence time), about one in nine; never most of them
    assert 2 <= answered <= handled / 3, got


def test_http_flags_and_config(make_cluster):
    c = make_cluster(start=False)
    bad = [("foo", "'foo' is not a port"), ("70000", "not a port (1..65535)"),
           ("::1:80", "brackets"), ("host.example:80", "not an IP address"), ("", "empty")]
    for value, words in bad:
        r = subprocess.run([Cluster.bin("brambled"), "--data-dir", c.data, "--http", value],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and words in r.stderr and "--http" in r.stderr, \
            (value, r.returncode, r.stderr)
        assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr

    # the data dir's http: key, as `brambled init --http` records it
    port = free_port()
    yaml = c.data / "coordinator.yaml"
    yaml.write_text(yaml.read_text() + f"http: '127.0.0.1:{port}'\n")
    c.start_coordinator()
    assert f"HTTP on 127.0.0.1:{port}" in c.coordinator.output()
    assert get(port)[0] == 401

    # a second coordinator cannot take the port: it says why and exits 1
    other = make_cluster(start=False)
    r = subprocess.run([Cluster.bin("brambled"), "--data-dir", other.data, "--http", str(port)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "Address already in use" in r.stderr \
        and f"127.0.0.1:{port}" in r.stderr, r.stderr

    # --http off wins over the data dir: nothing listens
    c.coordinator.stop()
    c.coordinator.expected_exit = True
    c.start_coordinator(extra=["--http", "off"])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()

    # a metrics token made while there is no HTTP side works, with a note that says so
    _, out, err = c.cli("token", "create", "--metrics", "--ttl", "1h")
    assert out.startswith("brm1.") and "serves no HTTP" in err, (out, err)
    rc, _, err = c.cli("token", "create", "--metrics", "--uses", "2", check=False)
    assert rc == 2 and "--uses is for join tokens" in err, err


def test_hostile_clients_never_stall_the_coordinator(make_cluster):
    c, port = http_cluster(make_cluster)
    token = metrics_token(c)
    assert get(port, token=token)[0] == 200

    # more idle, half-sent requests than the connection limit
    idle = []
    for _ in range(48):  # http.c's CONN_MAX is 40
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            idle.append(s)
        except OSError:
            break
    t = time.monotonic()
    c.cli("nodes", "--json")
    c.cli("token", "list")
    assert time.monotonic() - t < DEADLINE / 3, "the coordinator was slow with idle HTTP clients"
    for s in idle:
        s.close()
    wait_for(lambda: get(port, token=token, timeout=3)[0] == 200,
             what="/metrics to answer again once the idle clients are gone")

    # headers past the limit: 431 (or the connection closed), never a crash
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n")
        head = s.recv(100)
        assert head == b"" or head.startswith(b"HTTP/1.1 431"), head
    except ConnectionResetError:
        pass
    finally:
        s.close()

    # a 100 MB body is answered at once and never read
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    head = b""
    try:
        s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\n\r\n")
        s.setblocking(False)
        deadline = time.monotonic() + DEADLINE
        while not head and time.monotonic() < deadline:
            try:
                head = s.recv(100)
            except BlockingIOError:
                try:
                    s.send(b"x" * 65536)
                except BlockingIOError:
                    time.sleep(0.01)
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    assert head.startswith(b"HTTP/1.1 4"), head

    assert get(port, token=token)[0] == 200
    c.assert_alive()
