"""The web dashboard (docs/dashboard.md): `brambled --http` serves it, `bramble
dashboard` prints a one-time login link, and the page shows what that credential
may see, kept up to date by server-sent events.

A real coordinator and real agents (one with fake NVML GPUs, tests/fake_nvml) run
real jobs. The rules of the HTTP side are checked with plain HTTP: no cookie, a
forged or expired one, a used or expired link, a cross-site POST, paths outside the
assets and a 100 MB request all get a 4xx and never a crash (brambled runs under
ASan in the suite, and teardown fails on any sanitizer report). Then Debian's
headless Chromium, driven by python3-selenium, logs in with the link, sees the
nodes and jobs, and watches a job's page while the node under it is killed: the
node loss and the resumed attempt appear without a reload. Screenshots of each page
are saved under the test's directory (and printed) for a person to look at.
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import BIN, DEADLINE, REPO, free_port, wait_for

PYTHON = sys.executable
FAKE_NVML = BIN.parent / "tests" / "fake_nvml"
GIB = 1 << 30
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
NEEDS = ("(Debian's chromium, chromium-driver and python3-selenium; tests/run.sh "
         "installs them via deploy/install-deps.sh)")
SHOTS = Path(os.environ.get("BRAMBLE_DASH_SHOTS", "")) if os.environ.get(
    "BRAMBLE_DASH_SHOTS") else None


# ---------------------------------------------------------------------------
# helpers


def request(port, path, method="GET", cookie=None, headers=None, body=None, timeout=15):
    """(status, headers as a dict of lists, body text) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = dict(headers or {})
    if cookie:
        h["Cookie"] = f"bramble_session={cookie}"
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        hdrs = {}
        for k, v in r.getheaders():
            hdrs.setdefault(k.lower(), []).append(v)
        return r.status, hdrs, r.read().decode(errors="replace")
    finally:
        conn.close()


def login_url(c, credential=None):
    out = c.cli_json("dashboard", "--json", credential=credential)
    url = out["url"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/login\?t=[0-9a-f]{64}", url), out
    return url


def login(port, url):
    """The session cookie's value, from the link's 303 and its Set-Cookie."""
    path = urllib.parse.urlsplit(url)
    status, hdrs, body = request(port, path.path + "?" + path.query)
    assert status == 303, (status, body)
    assert hdrs["location"] == ["/"], hdrs
    (cookie,) = hdrs["set-cookie"]
    attrs = [a.strip() for a in cookie.split(";")]
    assert "HttpOnly" in attrs and "SameSite=Strict" in attrs and "Path=/" in attrs, cookie
    assert any(re.fullmatch(r"Max-Age=\d+", a) for a in attrs), cookie
    m = re.match(r"bramble_session=([0-9a-f]{64})$", attrs[0])
    assert m, cookie
    return m.group(1)


def csrf_of(port, cookie):
    status, _, body = request(port, "/", cookie=cookie)
    assert status == 200, (status, body)
    m = re.search(r'<meta name="csrf" content="([0-9a-f]{64})">', body)
    assert m, body[:500]
    return m.group(1)


def get_json(port, path, cookie):
    status, _, body = request(port, path, cookie=cookie)
    return status, json.loads(body)


def dash_cluster(make_cluster, agents=2, env=None, **kw):
    """A coordinator with --http on a free loopback port and `agents` agents."""
    c = make_cluster(start=False, **kw)
    if env:
        c.env = dict(c.env, **env)
    port = free_port()
    c.start_coordinator(extra=["--http", f"127.0.0.1:{port}"])
    if agents:
        c.add_agents(agents)
    return c, port


SLEEPER = "name: {name}\ncommand: sleep 300\nresources: {{cpus: 0}}\n"


# ---------------------------------------------------------------------------
# the rules, with plain HTTP


def test_login_cookie_csrf_and_bad_input(make_cluster):
    c, port = dash_cluster(make_cluster, agents=1,
                           env={"BRAMBLE_DASH_LOGIN_TTL": "3s",
                                "BRAMBLE_DASH_SESSION_TTL": "4s"})
    jid = c.submit(SLEEPER.format(name="dash-sleeper"))
    c.wait_job(jid, "running")

    # without a cookie: 401 for the page and the API, and no data in the answer
    for path in ("/", f"/job/{jid}", "/api/nodes", "/api/jobs", f"/api/jobs/{jid}",
                 "/api/events", "/api/event-list"):
        status, _, body = request(port, path)
        assert status == 401, (path, status, body)
        assert "node-1" not in body and "dash-sleeper" not in body, (path, body)
    # the assets are no secret; anything outside them is not found
    assert request(port, "/static/app.js")[0] == 200
    assert request(port, "/static/app.css")[0] == 200
    for path in ("/static/../../etc/passwd", "/static/%2e%2e/etc/passwd", "/etc/passwd",
                 "/static/", "/static/index.html", "/../metrics", "/job/x", "/job/1/../.."):
        status, _, body = request(port, path)
        assert status in (400, 404), (path, status, body)

    # a forged cookie, of the right form or not
    for forged in ("0" * 64, "a" * 64, "x", "' OR 1=1 --", "f" * 200):
        assert request(port, "/api/nodes", cookie=forged)[0] == 401, forged

    # the link works once (and a HEAD or POST does not use it up)
    url = login_url(c)
    q = urllib.parse.urlsplit(url)
    assert request(port, q.path + "?" + q.query, "HEAD")[0] == 405
    assert request(port, q.path + "?" + q.query, "POST")[0] == 405
    cookie = login(port, url)
    q = urllib.parse.urlsplit(url)
    status, _, body = request(port, q.path + "?" + q.query)
    assert status == 401 and "used already" in body, (status, body)
    assert request(port, "/login?t=" + "0" * 64)[0] == 401
    assert request(port, "/login?t=../../x")[0] == 401
    assert request(port, "/login")[0] == 401
    # ... and only when the user opens it, not from another site
    url2 = login_url(c)
    q2 = urllib.parse.urlsplit(url2)
    assert request(port, q2.path + "?" + q2.query,
                   headers={"Sec-Fetch-Site": "cross-site"})[0] == 403

    # with the cookie: the admin's view, as `bramble` shows it
    status, nodes = get_json(port, "/api/nodes", cookie)
    assert status == 200 and [n["name"] for n in nodes["nodes"]] == ["node-1"], nodes
    status, jobs = get_json(port, "/api/jobs", cookie)
    assert status == 200 and [j["id"] for j in jobs["jobs"]] == [jid], jobs
    status, job = get_json(port, f"/api/jobs/{jid}", cookie)
    assert status == 200 and job["job"]["name"] == "dash-sleeper", job
    assert get_json(port, "/api/jobs/999999", cookie)[0] == 404
    assert get_json(port, "/api/jobs?all=x", cookie)[0] == 400
    assert get_json(port, "/api/event-list?limit=0", cookie)[0] == 400
    assert get_json(port, "/api/event-list?limit=1001", cookie)[0] == 400
    status, one = get_json(port, "/api/event-list?limit=1", cookie)
    assert status == 200 and len(one["events"]) == 1 and one["next"] == one["events"][0]["id"]
    status, me = get_json(port, "/api/whoami", cookie)
    assert me == {"name": "admin", "admin": True}, me
    csrf = csrf_of(port, cookie)

    # a cross-site POST: no token, a wrong one, another origin or site
    host = f"127.0.0.1:{port}"
    good = {"X-CSRF-Token": csrf, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"}
    bad = [{}, {"X-CSRF-Token": "0" * 64}, {"X-CSRF-Token": csrf[:-1]},
           dict(good, Origin="http://evil.example"), dict(good, Origin="null"),
           dict(good, **{"Sec-Fetch-Site": "cross-site"})]
    for h in bad:
        status, _, body = request(port, "/api/nodes/node-1/drain", "POST", cookie, h)
        assert status == 403, (h, status, body)
    assert request(port, "/api/nodes/node-1/drain", "POST", None, good)[0] == 401
    assert c.nodes()["node-1"]["state"] == "ready"
    # a request of 100 MB is refused at once, its body never read
    status, _, _ = request(port, "/api/nodes/node-1/drain", "POST", cookie,
                           dict(good, **{"Content-Length": str(100 << 20)}), body=b"")
    assert status == 413
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /api/jobs/1/cancel HTTP/1.1\r\nHost: x\r\nContent-Length: "
                  + str(100 << 20).encode() + b"\r\n\r\n" + b"x" * 65536)
        head = s.recv(100)
        assert head.startswith(b"HTTP/1.1 413"), head
    # methods and unknown actions
    assert request(port, "/api/nodes", "DELETE", cookie, good)[0] == 405
    assert request(port, "/api/nodes/node-1/remove", "POST", cookie, good)[0] == 404
    assert request(port, "/api/nodes/..%2f/drain", "POST", cookie, good)[0] == 404

    # the admin's actions, with the token: drain, undrain, cancel
    status, _, body = request(port, "/api/nodes/node-1/drain", "POST", cookie, good)
    assert status == 200 and json.loads(body)["node"]["state"] == "draining", body
    assert c.nodes()["node-1"]["state"] == "draining"
    assert request(port, "/api/nodes/node-1/undrain", "POST", cookie, good)[0] == 200
    status, _, body = request(port, f"/api/jobs/{jid}/cancel", "POST", cookie, good)
    assert status == 200, body
    c.wait_job(jid)
    _, audit, _ = c.cli("audit", "--json")
    actions = [e["action"] for e in json.loads(audit)]
    assert actions[-3:] == ["node.drain", "node.undrain", "job.cancel"], actions

    # /metrics and its bearer token work as before
    _, tok, _ = c.cli("token", "create", "--metrics")
    status, _, page = request(port, "/metrics",
                              headers={"Authorization": f"Bearer {tok.strip()}"})
    assert status == 200 and "bramble_nodes" in page, page[:300]
    assert "\nbramble_dashboard_sessions 1\n" in page, page
    assert request(port, "/metrics", cookie=cookie)[0] == 401

    # logging out ends the session; an expired session and link are refused
    assert request(port, "/logout", "POST", cookie, good)[0] == 200
    assert request(port, "/api/nodes", cookie=cookie)[0] == 401
    cookie = login(port, login_url(c))
    assert request(port, "/api/nodes", cookie=cookie)[0] == 200
    stale = login_url(c)
    wait_for(lambda: request(port, "/api/nodes", cookie=cookie)[0] == 401, timeout=30,
             what="the 4 s session to expire")
    q = urllib.parse.urlsplit(stale)
    status, _, body = request(port, q.path + "?" + q.query)
    assert status == 401 and "expired" in body, (status, body)
    c.assert_alive()


def test_a_user_sees_only_their_own(make_cluster):
    c, port = dash_cluster(make_cluster, agents=1)
    theirs = c.submit(SLEEPER.format(name="admins-job"))
    cred = c.root / "alice.credential"
    c.cli("user", "add", "alice", "--out", str(cred))
    spec = c.write_spec(SLEEPER.format(name="alices-job"), name="alice.yaml")
    _, out, _ = c.cli("submit", str(spec), credential=cred)
    mine = int(out.strip())
    cookie = login(port, login_url(c, credential=cred))
    assert get_json(port, "/api/event-list?limit=0", cookie)[0] == 400
    assert get_json(port, "/api/event-list?limit=1001", cookie)[0] == 400
    status, one = get_json(port, "/api/event-list?limit=1", cookie)
    assert status == 200 and len(one["events"]) == 1 and one["next"] == one["events"][0]["id"]
    status, me = get_json(port, "/api/whoami", cookie)
    assert me == {"name": "alice", "admin": False}, me
    _, jobs = get_json(port, "/api/jobs", cookie)
    assert [j["id"] for j in jobs["jobs"]] == [mine], jobs
    assert get_json(port, f"/api/jobs/{theirs}", cookie)[0] == 404
    assert get_json(port, f"/api/jobs/{theirs}/logs", cookie)[0] == 404
    assert request(port, f"/api/events?job={theirs}&logs=1", cookie=cookie)[0] == 404
    _, events = get_json(port, "/api/event-list", cookie)
    assert all(e.get("job") in (None, mine) for e in events["events"]), events
    csrf = csrf_of(port, cookie)
    good = {"X-CSRF-Token": csrf, "Origin": f"http://127.0.0.1:{port}"}
    status, _, body = request(port, "/api/nodes/node-1/drain", "POST", cookie, good)
    assert status == 403 and "admin" in body, (status, body)
    assert request(port, f"/api/jobs/{theirs}/cancel", "POST", cookie, good)[0] == 404
    assert request(port, f"/api/jobs/{mine}/cancel", "POST", cookie, good)[0] == 200
    # a removed user's sessions stop at once: every request acts as their key
    c.cli("user", "remove", "alice")
    status, body = get_json(port, "/api/jobs", cookie)
    assert status == 403, (status, body)


def test_event_stream_pushes_news(make_cluster):
    """/api/events: server-sent events, news of a job as the coordinator stores
    its events; bounded in number."""
    c, port = dash_cluster(make_cluster, agents=1)
    cookie = login(port, login_url(c))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/api/events", headers={"Cookie": f"bramble_session={cookie}"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    assert r.readline() == b"retry: 2000\n"
    # once the stream is quiet (a tick: nothing happened for 5 s), a job's events
    # bring news at once: a watcher of every job hears {"job": 0}, then asks again
    while r.readline() != b"event: tick\n":
        pass
    c.submit(SLEEPER.format(name="streamed"))
    t0 = time.monotonic()
    lines = []
    while not lines or lines[-1] != b"event: news\n":
        lines.append(r.readline())
        assert time.monotonic() - t0 < DEADLINE, lines
    assert r.readline() == b'data: {"job":0}\n'
    print(f"news {time.monotonic() - t0:.3f}s after submit returned")
    # more streams than allowed: the extra ones are refused, the coordinator is fine
    # (the first stays open meanwhile: when its slot would be given back depends on
    # when the server next writes to it, and the count below must not)
    conns = [conn]
    try:
        statuses = []
        for _ in range(20):
            k = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            k.request("GET", "/api/events", headers={"Cookie": f"bramble_session={cookie}"})
            statuses.append(k.getresponse().status)
            conns.append(k)
        assert statuses.count(200) <= 16 and 503 in statuses, statuses
    finally:
        for k in conns:
            k.close()
    wait_for(lambda: request(port, "/api/nodes", cookie=cookie)[0] == 200,
             what="the API to answer once the streams are closed")
    c.assert_alive()

    # a stream that does not read is never waited for (its news is one flag): a
    # client that stops reading while jobs come and go does not slow the coordinator
    slow = socket.create_connection(("127.0.0.1", port), timeout=10)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.sendall(f"GET /api/events HTTP/1.1\r\nHost: x\r\n"
                 f"Cookie: bramble_session={cookie}\r\n\r\n".encode())
    t = time.monotonic()
    for i in range(5):
        c.submit(SLEEPER.format(name=f"flood-{i}"))
    assert time.monotonic() - t < DEADLINE / 2, "submits were slow with a stalled stream"

    # stopping with streams open: brambled ends them and exits at once, cleanly
    keep = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    keep.request("GET", "/api/events", headers={"Cookie": f"bramble_session={cookie}"})
    assert keep.getresponse().status == 200
    t = time.monotonic()
    assert c.coordinator.kill(signal.SIGTERM) == 0
    took = time.monotonic() - t
    assert took < 5, f"brambled took {took:.1f}s to stop with event streams open"
    keep.close()
    slow.close()


# ---------------------------------------------------------------------------
# a real browser


@pytest.fixture
def browser(tmp_path):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip(f"python3-selenium not found {NEEDS}")
    if not Path(CHROMEDRIVER).exists():
        pytest.skip(f"chromedriver not found {NEEDS}")
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,1000", f"--user-data-dir={tmp_path / 'chromium'}",
              "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    if Path("/usr/bin/chromium").exists():
        opts.binary_location = "/usr/bin/chromium"
    d = webdriver.Chrome(service=Service(CHROMEDRIVER,
                                         log_path=str(tmp_path / "chromedriver.log")),
                         options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


def shot(d, tmp_path, name):
    """Save a screenshot of the page (under the test's dir, and BRAMBLE_DASH_SHOTS)."""
    p = tmp_path / "screenshots" / f"{name}.png"
    p.parent.mkdir(exist_ok=True)
    height = d.execute_script("return document.documentElement.scrollHeight")
    width = d.execute_script("return window.outerWidth")
    d.set_window_size(width, max(600, min(height + 140, 4000)))
    d.save_screenshot(str(p))
    if SHOTS:
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, SHOTS / p.name)
    print(f"screenshot: {p}")
    return p


def text_of(d, css):
    """The text of the elements css selects; the page redraws as news comes, so an
    element found may be gone before it is read: look again (and at worst return
    "" for the caller's wait_for to ask again)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    for _ in range(20):
        try:
            return "\n".join(e.text for e in d.find_elements(By.CSS_SELECTOR, css))
        except StaleElementReferenceException:
            continue
    return ""


TRAIN = (f"{PYTHON} examples/train_checkpoint.py --steps 400 --every 5 --step-time 0.1")


def test_browser_nodes_jobs_and_a_node_lost(make_cluster, browser, tmp_path):
    if not (FAKE_NVML / "libnvidia-ml.so.1").exists():
        pytest.fail(f"{FAKE_NVML}/libnvidia-ml.so.1 missing: the build makes it")
    gpus = tmp_path / "gpus.txt"
    gpus.write_text("# name | total | used | util | power W | temp C\n"
                    "NVIDIA GeForce RTX 4090 | 24GiB | 6GiB | 37 | 180 | 55\n"
                    "NVIDIA GeForce RTX 4090 | 24GiB | 1GiB | 3 | 40 | 40\n")
    c, port = dash_cluster(make_cluster, agents=0, heartbeat="200ms", node_timeout="2s")
    c.env = dict(c.env, LD_LIBRARY_PATH=str(FAKE_NVML), FAKE_NVML_GPUS=str(gpus))
    c.add_agents(2, extra=["--gpus", "auto", "--cost-per-hour", "0.5",
                           "--power-price", "0.30"])
    d = browser
    from selenium.webdriver.common.by import By

    # without the cookie: the page says how to log in
    d.get(f"http://127.0.0.1:{port}/")
    assert "bramble dashboard" in d.page_source and "node-1" not in d.page_source
    shot(d, tmp_path, "logged-out")

    # the one-time link logs the browser in, and the page lists the cluster
    ckpt = tmp_path / "ckpt"
    out = c.cli_json("submit", REPO / "examples" / "train-checkpoint.yaml",
                     "--set", f"workdir={REPO}", "--set", f"checkpoint.dir={ckpt}",
                     "--set", "restart.max=3", "--set", f"command={TRAIN}",
                     "--set", "resources.gpus=1", "--set", "resources.vram=8GiB")
    jid = out["id"]
    j = c.wait_job(jid, "running")
    d.get(login_url(c))
    assert d.current_url == f"http://127.0.0.1:{port}/", d.current_url
    cookies = {k["name"]: k for k in d.get_cookies()}
    assert cookies["bramble_session"]["httpOnly"] and \
        cookies["bramble_session"]["sameSite"] == "Strict", cookies
    wait_for(lambda: "node-1" in text_of(d, "#nodes") and "node-2" in text_of(d, "#nodes"),
             what="the page to list both nodes")
    wait_for(lambda: str(jid) in text_of(d, "#jobs") and "running" in text_of(d, "#jobs"),
             what="the page to list the running job")
    wait_for(lambda: "GPU 1" in text_of(d, "#nodes") and
             "held by bramble 8.0 GiB" in text_of(d, f'.node[data-node="{j["nodes"][0]}"]'),
             what="the GPUs with their VRAM bars, 8 GiB of one held by the job")
    # what each node costs per hour now: 0.5 + 0.30 per kWh of 180 W + 40 W
    wait_for(lambda: "costs 0.566/h at 220 W" in text_of(d, '.node[data-node="node-1"]'),
             what="the node's cost per hour and power")
    wait_for(lambda: "step" in text_of(d, f'#jobs tr[data-job="{jid}"]'), timeout=60,
             what="the job's newest checkpoint step in the list")
    assert text_of(d, "#jobs thead").split() == ["ID", "Name", "State", "Owner", "Nodes",
                                                 "Attempt", "Checkpoint", "Cost"]
    assert "node-1" in text_of(d, "#events") or "running" in text_of(d, "#events")
    # the coordinator keeps each GPU's last hour for the sparklines (15 s slots)
    cookie = d.get_cookie("bramble_session")["value"]

    def history():
        _, nodes = get_json(port, "/api/nodes", cookie)
        hist = {(n["name"], g["index"]): g.get("history") for n in nodes["nodes"]
                for g in n["gpus"]}
        assert all(h and h["step"] == 15 and len(h["util"]) == len(h["power"]) == 240
                   for h in hist.values()), hist
        return all(h["util"][-1] in (37, 3) and h["power"][-1] in (180, 40)
                   for h in hist.values())

    wait_for(history, what="the GPUs' last hour on /api/nodes")
    wait_for(lambda: len(d.find_elements(By.CSS_SELECTOR, "#nodes polyline")) == 8,
             what="a utilisation and a power sparkline per GPU")
    shot(d, tmp_path, "overview")

    # the job's page, then the node under it is killed: no reload, the page follows
    d.get(f"http://127.0.0.1:{port}/job/{jid}")
    wait_for(lambda: "running" in text_of(d, "#timeline"), what="the timeline")
    wait_for(lambda: "step" in text_of(d, "#log") or "attempt 1" in text_of(d, "#log"),
             what="the log tail")
    wait_for(lambda: text_of(d, "#checkpoints table"), timeout=60, what="a checkpoint")
    d.execute_script("window.__same_page = 42")
    victim = j["nodes"][0]
    wait_for(lambda: time.monotonic() - c.coordinator_started > 4.5,
             what="the coordinator's start-up grace to pass")
    c.kill_node(victim)
    wait_for(lambda: "node lost" in text_of(d, "#timeline"), what="the node loss on the page")
    wait_for(lambda: "resumed from step" in text_of(d, "#timeline"),
             what="the resumed attempt on the page")
    wait_for(lambda: "attempt 2" in text_of(d, "#job-head"), what="attempt 2 in the header")
    wait_for(lambda: "attempt 2 on" in text_of(d, "#log"), what="attempt 2's output in the tail")
    assert d.execute_script("return window.__same_page") == 42, "the page was reloaded"
    shot(d, tmp_path, "job")

    # a phone's screen
    d.set_window_size(390, 844)
    d.get(f"http://127.0.0.1:{port}/")
    wait_for(lambda: "node-1" in text_of(d, "#nodes"), what="the page on a phone's screen")
    width = d.execute_script("return document.documentElement.scrollWidth")
    assert width <= 400, f"the page is {width}px wide on a 390px screen"
    d.set_window_size(390, 844)
    p = tmp_path / "screenshots" / "phone.png"
    d.save_screenshot(str(p))
    if SHOTS:
        shutil.copy(p, SHOTS / p.name)
    print(f"screenshot: {p}")
    c.assert_alive()


GPU_JOB = "name: {name}\ncommand: sleep 300\nresources: {{gpus: 1, cpus: 0{vram}}}\n"


def test_browser_gpu_holders_and_newest_jobs_first(make_cluster, browser, tmp_path):
    """Each GPU says which jobs hold it: a whole-GPU job (no VRAM need) the whole
    of it, a packed one its VRAM; the job list has the newest job at the top."""
    from selenium.webdriver.common.by import By
    c, port = dash_cluster(make_cluster, agents=0)
    c.start_agent("gpu", extra=["--gpus", "RTX 4090:24GiB,RTX 4090:24GiB"])
    c.wait_ready("gpu")
    first = c.submit(SLEEPER.format(name="cpu-only"))
    packed = c.submit(GPU_JOB.format(name="packed", vram=", vram: 8GiB"))
    whole = c.submit(GPU_JOB.format(name="whole-gpu", vram=""))
    for jid in (first, packed, whole):
        c.wait_job(jid, "running")

    # the data the page reads: each GPU's holders, and what they hold
    cookie = login(port, login_url(c))
    _, nodes = get_json(port, "/api/nodes", cookie)
    (gpus,) = [n["gpus"] for n in nodes["nodes"] if n["name"] == "gpu"]
    by_job = {h["job"]: (g["index"], h) for g in gpus for h in g["held_by"]}
    assert sorted(by_job) == [packed, whole], gpus
    w, held = by_job[whole]
    assert held == {"job": whole, "name": "whole-gpu", "whole": True, "vram": None}, held
    assert gpus[w]["vram_held"] == 24 * GIB and gpus[w]["held_by"] == [held], gpus
    p, held = by_job[packed]
    assert held == {"job": packed, "name": "packed", "whole": False, "vram": 8 * GIB}, held
    assert p != w and gpus[p]["vram_held"] == 8 * GIB, gpus

    # the page says so, and lists the newest job first
    d = browser
    d.get(login_url(c))
    card = '.node[data-node="gpu"]'
    wait_for(lambda: f"held by job {whole} (whole-gpu): whole GPU" in text_of(d, card) and
             f"held by job {packed} (packed): 8.0 GiB" in text_of(d, card),
             what="each GPU's holding job on the page")
    gpu_text = [text_of(d, f'{card} .gpu[data-gpu="{i}"]') for i in range(2)]
    assert "held by bramble: whole GPU" in gpu_text[w], gpu_text
    assert "held by bramble 8.0 GiB" in gpu_text[p], gpu_text
    assert "held by bramble 0 B" not in text_of(d, card), gpu_text
    link = d.find_element(By.CSS_SELECTOR, f'{card} .holder[data-job="{whole}"] a')
    assert link.get_attribute("href").endswith(f"/job/{whole}")

    def order():  # the ids of the list's rows, top down
        return [int(row.split()[0]) for row in text_of(d, "#jobs tbody tr").splitlines()]

    wait_for(lambda: order() == [whole, packed, first], what="the jobs, newest first")
    later = c.submit(SLEEPER.format(name="later"))
    wait_for(lambda: order() == [later, whole, packed, first],
             what="a new job at the top of the list")
    shot(d, tmp_path, "gpu-holders")
    c.assert_alive()


def test_dashboard_off_without_http(cluster):
    rc, out, err = cluster.cli("dashboard", check=False)
    assert rc == 1 and out == "", (rc, out, err)
    assert "bramble: dashboard: the dashboard is off: start brambled with --http" in err, err
    rc, _, err = cluster.cli("dashboard", "extra", check=False)
    assert rc == 2, err


def test_a_peer_posing_as_the_dashboard_gets_nothing_in(make_cluster):
    """A CLI peer may choose its ZeroMQ routing id, even one of the dashboard's form
    (a zero byte first): its messages are dropped unanswered, so it can neither
    answer a dashboard request in the coordinator's place nor be answered."""
    import zmq
    from conftest import header, read_yaml_flat
    c, port = dash_cluster(make_cluster, agents=0)
    mine = c.submit(SLEEPER.format(name="admins-own"))
    cred = c.root / "mallory.credential"
    c.cli("user", "add", "mallory", "--out", str(cred))
    keys = read_yaml_flat(cred)
    cookie = login(port, login_url(c))
    ctx = zmq.Context()
    socks = []
    try:
        for n in range(1, 40):  # the ids the dashboard is likely to use next
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.ROUTING_ID, b"\0dash:" + n.to_bytes(8, "big"))
            s.curve_serverkey = keys["server_public_key"].encode()
            s.curve_publickey = keys["public_key"].encode()
            s.curve_secretkey = keys["secret_key"].encode()
            s.connect(c.endpoint)
            socks.append(s)
        for s in socks:
            s.send_multipart([header("job.list", 7), b'{"all": true}'])
        wait_for(lambda: c.coordinator.output().count("poses as the dashboard's") >= 39,
                 what="the coordinator to drop the posing messages")
        for _ in range(5):  # meanwhile the admin's page still sees the admin's jobs
            status, jobs = get_json(port, "/api/jobs", cookie)
            assert status == 200 and [j["id"] for j in jobs["jobs"]] == [mine], jobs
        for s in socks:
            assert not s.poll(0), "a posing peer was answered"
    finally:
        for s in socks:
            s.close(0)
        ctx.term()
    c.assert_alive()
