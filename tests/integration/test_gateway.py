"""bramble-gateway: one OpenAI-compatible endpoint in front of every service with a
service.model. Replicas are real HTTP servers that speak the OpenAI API
(fake_openai.py), started as bramble services; clients are curl-like urllib calls
made here, and the official `openai` package for Node where it is installed."""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import wait_for

PYTHON = "/usr/bin/python3"
FAKE = Path(__file__).resolve().parent / "fake_openai.py"

SPEC = """
name: {name}
kind: service
command: {python} {fake} --model {model} --control {control} {extra}
resources: {{cpus: 0}}
service:
  replicas: {replicas}
  port: auto
  health: {{http: /health, interval: 1s, grace: 30s}}
  model: {model}
{more}"""


def service(c, tmp_path, name="llm", model="llama-8b", replicas=2, extra="", more=""):
    control = tmp_path / f"control-{name}"
    control.mkdir(exist_ok=True)
    jid = c.submit(SPEC.format(name=name, python=PYTHON, fake=FAKE, model=model,
                               control=control, replicas=replicas, extra=extra,
                               more=more))
    return jid, control


class Gateway:
    """A bramble-gateway process with its own credential."""

    def __init__(self, c, name="gw", extra=(), env=None):
        self.c = c
        cred = c.root / f"{name}.gateway"
        c.cli("gateway", "add", name, "--out", cred)
        self.proc = c.spawn("bramble-gateway",
                            [c.bin("bramble-gateway"), "--credential", str(cred),
                             "--listen", "127.0.0.1:0", *extra],
                            env={**c.env, **env} if env else None)
        line = wait_for(lambda: re.search(r"serving on https?://127\.0\.0\.1:(\d+)",
                                          self.proc.output()),
                        what="bramble-gateway to print its address")
        self.port = int(line.group(1))

    def request(self, method, path, body=None, headers=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        out = r.read()
        conn.close()
        return r.status, dict(r.getheaders()), out

    def raw(self, data, timeout=10):
        """Send data as it is; what comes back until the gateway closes (or a pause)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(data)
            out = b""
            try:
                while True:
                    b = s.recv(65536)
                    if not b:
                        break
                    out += b
                    if b"\r\n\r\n" in out and len(out) > 100:
                        s.settimeout(0.5)
            except socket.timeout:
                pass
            return out

    def chat(self, model, text="hello", timeout=30, **kw):
        st, h, out = self.request("POST", "/v1/chat/completions",
                                  {"model": model,
                                   "messages": [{"role": "user", "content": text}], **kw},
                                  timeout=timeout)
        return st, h, json.loads(out) if out else None

    def models(self):
        st, _, out = self.request("GET", "/v1/models")
        assert st == 200, out
        return sorted(m["id"] for m in json.loads(out)["data"])


def wait_routed(gw, model, n, timeout=60):
    """Wait until n different replicas answered chats for model."""
    seen = set()

    def more():
        st, h, body = gw.chat(model)
        if st == 200:
            seen.add(h.get("X-Bramble-Replica"))
        return len(seen) >= n

    wait_for(more, timeout, f"{n} replicas of {model} to answer through the gateway")
    return seen


def test_routes_by_model_balances_and_says_what_is_wrong(cluster2, tmp_path):
    c = cluster2
    service(c, tmp_path, more="  aliases: [llama]\n  adapters: [sql-lora]\n  public: true\n",
            extra="--adapters sql-lora")
    # a web proxy in the gateway's environment (one that answers nothing) is not
    # used to reach the replicas
    gw = Gateway(c, env={"http_proxy": "http://127.0.0.1:9", "HTTP_PROXY":
                         "http://127.0.0.1:9", "all_proxy": "http://127.0.0.1:9"})
    seen = wait_routed(gw, "llama-8b", 2)
    assert seen == {"llm/0", "llm/1"}
    assert gw.models() == ["llama", "llama-8b", "sql-lora"]
    # an alias reaches the same replicas under the model's own name; an adapter
    # goes through unchanged
    st, _, body = gw.chat("llama", "hi there")
    assert st == 200 and body["choices"][0]["message"]["content"].endswith(
        "model llama-8b: hi there"), body
    st, _, body = gw.chat("sql-lora", "select")
    assert st == 200 and "model sql-lora: select" in body["choices"][0]["message"]["content"]
    assert body["usage"]["completion_tokens"] > 0
    # a stream passes through as server-sent events, ended by [DONE]
    st, h, out = gw.request("POST", "/v1/chat/completions",
                            {"model": "llama-8b", "stream": True,
                             "messages": [{"role": "user", "content": "one two three"}]})
    assert st == 200 and h["Content-Type"].startswith("text/event-stream"), (st, h)
    events = [l[6:] for l in out.decode().split("\n") if l.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "")
                   for e in events[:-1] if json.loads(e)["choices"])
    assert text.endswith("one two three"), text
    # what is wrong, said in the OpenAI error shape
    st, _, body = gw.chat("no-such-model")
    assert st == 404 and "GET /v1/models" in body["error"]["message"], body
    st, _, out = gw.request("POST", "/v1/chat/completions", b"{not json")
    assert st == 400 and "not a JSON object" in json.loads(out)["error"]["message"]
    st, _, out = gw.request("POST", "/v1/chat/completions", {"messages": []})
    assert st == 400 and "no model" in json.loads(out)["error"]["message"]
    # a body over the limit is refused before it is read
    head = gw.raw(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % (33 << 20))
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    assert b"larger than 33554432 bytes" in head
    assert gw.proc.alive()


def test_a_replica_the_gateway_cannot_use_is_checked_and_restarted(cluster2, tmp_path):
    """Health checked once a minute, a replica that stops answering would be found
    only after three minutes; the gateway's word has its agent check it at once."""
    c = cluster2
    control = tmp_path / "control-llm"
    control.mkdir()
    sid = c.submit(SPEC.replace("interval: 1s", "interval: 60s").format(
        name="llm", python=PYTHON, fake=FAKE, model="llama-8b", control=control,
        replicas=2, extra="", more="  public: true\n"))
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 2)
    rid = next(r["id"] for r in c.job(sid)["replicas"] if r["replica"] == 0)
    (control / "sick-0").touch()
    # every request is answered, by replica 1, while replica 0 is taken out ...
    for _ in range(4):
        st, h, body = gw.chat("llama-8b")
        assert st == 200 and h["X-Bramble-Replica"] == "llm/1", (st, h, body)

    def reasons():
        return "\n".join(e["reason"] or "" for e in c.job(rid)["events"])

    # ... and the coordinator, told, has its agent check it now: it fails its
    # checks, is stopped and starts again, long before a minute's check would come
    wait_for(lambda: "gateway gw could not use it (it answered 503)" in reasons(), 30,
             "the coordinator to hear of the replica the gateway took out")
    wait_for(lambda: "health check failed 3 times in a row" in reasons(), 30,
             f"replica 0 found unhealthy by its agent's checks:\n{reasons()}")
    (control / "sick-0").unlink()
    wait_for(lambda: c.job(rid)["attempt"] >= 2, 60, "replica 0 to start again")
    assert wait_routed(gw, "llama-8b", 2) == {"llm/0", "llm/1"}


def replica_pids(control):
    """{replica number: pid} of the fake servers started with this control dir (the
    python processes, not the sh that runs each)."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{d}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"python3") and str(control).encode() in argv:
            r = next((e[16:] for e in env if e.startswith(b"BRAMBLE_REPLICA=")), None)
            if r is not None:
                found[int(r)] = int(d)
    return found


def test_a_replica_killed_under_load_fails_no_request(cluster2, tmp_path):
    c = cluster2
    _, control = service(c, tmp_path, more="  public: true\n")
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 2)
    pids = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(replica_pids(control)),
                    what="both fake servers")
    results, lock, stop = [], threading.Lock(), threading.Event()
    killed = threading.Event()

    def client():
        conn = None
        while not stop.is_set():
            try:
                conn = conn or http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
                conn.request("POST", "/v1/chat/completions", body=json.dumps(
                    {"model": "llama-8b", "messages": [{"role": "user", "content": "x"}]}),
                    headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                with lock:
                    results.append((r.status, killed.is_set(), r.getheader("X-Bramble-Replica")))
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    results.append((repr(e), killed.is_set(), None))
                conn = None

    threads = [threading.Thread(target=client, daemon=True) for _ in range(32)]
    for t in threads:
        t.start()
    wait_for(lambda: len(results) >= 100, what="100 requests before the kill")
    os.kill(pids[0], signal.SIGKILL)
    killed.set()
    # on until replica 0 is back (restarted by its agent) and answers again
    wait_for(lambda: any(k and w == "llm/0" for _, k, w in results[-200:]) and
             sum(1 for _, k, _ in results if k) >= 200, 90,
             "replica 0 to answer again after its restart")
    stop.set()
    for t in threads:
        t.join(60)
    bad = [r for r in results if r[0] != 200]
    assert not bad, f"{len(bad)} of {len(results)} requests failed: {bad[:5]}"
    assert "replica llm/0" in gw.proc.output() and "taken out" in gw.proc.output()
    print(f"{len(results)} requests, {sum(1 for r in results if r[1])} after the kill, "
          "none failed")


def lasting_replicas(c, tmp_path, gw):
    """Two replicas of llama-8b whose jobs live on in `sleep` once their server dies
    (health checked once a minute, so nothing else tells), both routed through gw:
    replica 0's server pid and its port."""
    control = tmp_path / "control-llm"
    control.mkdir()
    c.submit(SPEC.replace("interval: 1s", "interval: 60s").replace(
        "command: {python} {fake} --model {model} --control {control} {extra}",
        "command: {python} {fake} --model {model} --control {control}; sleep 600").format(
        name="llm", python=PYTHON, fake=FAKE, model="llama-8b", control=control,
        replicas=2, extra="", more="  public: true\n"))
    wait_routed(gw, "llama-8b", 2)
    wait_for(lambda: len(replica_pids(control)) == 2, what="both fake servers")
    port0 = next(e["port"] for e in c.cli_json("endpoints", "llm") if e["replica"] == 0)
    return replica_pids(control)[0], port0


def kill_server(pid):
    """SIGKILL a replica's server, and wait until it is gone."""
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), what="the replica's server gone")


def test_a_replica_dead_while_idle_gets_at_most_one_request(cluster2, tmp_path):
    """A replica's server dies while no request is on it, and nothing else tells
    (its job lives on in `sleep`, its health checked once a minute): the connections
    the gateway kept to it were closed, so a burst of requests tries it with one at
    most, and every request is answered by the other."""
    c = cluster2
    gw = Gateway(c)
    pid0, port0 = lasting_replicas(c, tmp_path, gw)
    for _ in range(8):  # connections kept to both
        assert gw.chat("llama-8b")[0] == 200
    mark = len(gw.proc.output())
    kill_server(pid0)
    assert burst(gw, 16) == [(200, "llm/1")] * 16
    tried = [ln for ln in gw.proc.output()[mark:].splitlines()
             if f":{port0}) failed" in ln]
    assert len(tried) <= 1, "\n".join(tried)


def burst(gw, n):
    """n requests that the gateway finds all at once: it is stopped while they are
    sent (the kernel takes their connections), and goes on when all are there. Their
    (status, replica), in order."""
    os.kill(gw.proc.pid, signal.SIGSTOP)
    try:
        conns = [http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
                 for _ in range(n)]
        for conn in conns:
            conn.request("POST", "/v1/chat/completions", body=json.dumps(
                {"model": "llama-8b", "messages": [{"role": "user", "content": "x"}]}),
                headers={"Content-Type": "application/json"})
    finally:
        os.kill(gw.proc.pid, signal.SIGCONT)
    answers = []
    for conn in conns:
        r = conn.getresponse()
        r.read()
        answers.append((r.status, r.getheader("X-Bramble-Replica")))
        conn.close()
    return answers


def test_a_replica_refusing_connections_gets_one_of_a_burst(cluster2, tmp_path):
    """A gateway with no connection kept to a replica whose server died (its job
    lives on, health checked once a minute): of a burst of requests routed to it in
    one turn, the first connection refused puts it out at once, the others go to the
    other replica without trying it, and every request is answered."""
    c = cluster2
    pid0, port0 = lasting_replicas(c, tmp_path, Gateway(c))
    kill_server(pid0)
    gw = Gateway(c, "gw-fresh")  # (it never held a connection to replica 0)
    wait_for(lambda: "llama-8b" in gw.models(), what="the new gateway's table")
    assert burst(gw, 16) == [(200, "llm/1")] * 16
    tried = [ln for ln in gw.proc.output().splitlines() if f":{port0}) failed" in ln]
    assert len(tried) == 1 and "connect" in tried[0], "\n".join(tried)


def test_a_replica_whose_node_went_silent_is_skipped_after_the_connect_timeout(
        cluster2, tmp_path):
    """A node that went silent (power cut, cable out: no reset comes back) lets a new
    connection time out rather than be refused. Nothing was sent, so the request goes
    to another replica, as for a refused connection, instead of failing (504)."""
    c = cluster2
    service(c, tmp_path, replicas=2, more="  public: true\n",
            extra="--keepalive-timeout 1")
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 2)
    port0 = next(e["port"] for e in c.cli_json("endpoints", "llm") if e["replica"] == 0)

    def established():
        out = subprocess.run(["ss", "-Htn", "state", "established", "dst",
                              f"127.0.0.1:{port0}"], capture_output=True, text=True).stdout
        return len(out.splitlines())

    # new connections to replica 0 get no answer at all (its SYNs dropped); its
    # kept ones are closed by its keep-alive time out, so the next must be new
    rule = ["INPUT", "-i", "lo", "-p", "tcp", "--dport", str(port0), "--syn", "-j", "DROP"]
    subprocess.run(["iptables", "-I", *rule], check=True, timeout=30)
    try:
        wait_for(lambda: established() == 0, what="replica 0's idle connections closed")
        mark = len(gw.proc.output())
        answers = [gw.chat("llama-8b", timeout=60) for _ in range(2)]  # (one goes to 0)
        assert [(st, h.get("X-Bramble-Replica")) for st, h, _ in answers] == \
            [(200, "llm/1")] * 2, answers
        tried = [ln for ln in gw.proc.output()[mark:].splitlines()
                 if f":{port0}) failed" in ln]
        assert tried and "timeout" in tried[0].lower(), gw.proc.output()[mark:]
    finally:
        subprocess.run(["iptables", "-D", *rule], check=True, timeout=30)


def test_bad_replicas_streams_cut_off_and_a_coordinator_away(cluster2, tmp_path):
    c = cluster2
    _, control = service(c, tmp_path, more="  public: true\n", extra="--token-delay-ms 20")
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 2)
    # a replica that answers 503 before any byte: the request goes to the other one
    (control / "fail503-0").touch()
    for _ in range(6):
        st, h, body = gw.chat("llama-8b")
        assert st == 200 and h["X-Bramble-Replica"] == "llm/1", (st, h, body)
    (control / "fail503-0").unlink()
    # a replica that answers garbage: 502 (never retried: it did answer), and it is
    # taken out, so that the next requests go to the other one
    (control / "garbage-1").touch()
    codes, bad = [], []
    for _ in range(6):
        st, h, body = gw.chat("llama-8b")
        codes.append((st, h.get("X-Bramble-Replica")))
        if st == 502:
            bad.append(body)
    assert (502, "llm/1") in codes and codes.count((200, "llm/0")) >= 4, codes
    assert all("replica llm/1 answered badly" in b["error"]["message"] and
               b["error"]["type"] == "upstream_error" for b in bad), bad
    (control / "garbage-1").unlink()
    # a replica that dies mid-stream: the stream ends with an error event, no hang
    (control / "die-mid-stream-0").touch()
    (control / "die-mid-stream-1").touch()
    st, h, out = gw.request("POST", "/v1/chat/completions",
                            {"model": "llama-8b", "stream": True,
                             "messages": [{"role": "user", "content": "a b c d e f g"}]},
                            timeout=20)
    assert st == 200, (st, out)
    events = [l[6:] for l in out.decode().split("\n") if l.startswith("data: ")]
    assert events and "error" in json.loads(events[-1]), events
    assert "[DONE]" not in events
    (control / "die-mid-stream-0").unlink()
    (control / "die-mid-stream-1").unlink()
    wait_routed(gw, "llama-8b", 2, timeout=90)  # (both back after their restart)
    # the coordinator away: the gateway serves on from its last table
    c.coordinator.kill()
    for _ in range(10):
        st, _, body = gw.chat("llama-8b", "still here")
        assert st == 200 and "still here" in body["choices"][0]["message"]["content"]
    wait_for(lambda: "does not answer; serving from routing table" in gw.proc.output(),
             30, "the gateway to notice the coordinator is away")
    st, _, body = gw.chat("llama-8b", "and now")
    assert st == 200
    c.start_coordinator()
    wait_for(lambda: gw.proc.output().count("the coordinator answers") >= 2, 30,
             "the gateway to hear the coordinator again")
    gws = c.cli_json("gateway", "list")
    assert [g["name"] for g in gws] == ["gw"] and gws[0]["connected"], gws


def metric(gw, name, **labels):
    """The value of one sample of the gateway's /metrics (0 when absent)."""
    st, _, out = gw.request("GET", "/metrics")
    assert st == 200
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in out.decode().splitlines():
        if line.startswith(name + "{" + want + "}") or (not labels and line.startswith(name + " ")):
            return float(line.rsplit(" ", 1)[1])
    return 0


def replica_stats(c):
    """{replica: its /stats} of the healthy replicas of service llm."""
    out = {}
    for e in c.cli_json("endpoints", "llm"):
        conn = http.client.HTTPConnection(e["host"], e["port"], timeout=10)
        conn.request("GET", "/stats")
        out[e["replica"]] = json.loads(conn.getresponse().read())
        conn.close()
    return out


def test_idle_connections_are_bounded_and_closed(cluster2, tmp_path):
    """1,000 connections that send nothing: the gateway holds at most
    --max-connections of them, closes the rest, closes those it held after
    --client-timeout, and answers a real client all along after."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    c = cluster2
    service(c, tmp_path, replicas=1, more="  public: true\n")
    gw = Gateway(c, "gw-idle", extra=["--max-connections", "200", "--client-timeout", "3s"])
    wait_routed(gw, "llama-8b", 1)
    idle = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            s.setblocking(False)
            idle.append(s)

        def still_open():
            n = 0
            for s in idle:
                try:
                    n += s.recv(1) != b""
                except BlockingIOError:
                    n += 1  # (nothing to read: open)
                except OSError:
                    pass  # (reset: closed)
            return n

        wait_for(lambda: still_open() <= 200, 30, "the gateway to hold at most 200")
        fds = len(os.listdir(f"/proc/{gw.proc.pid}/fd"))
        assert fds < 200 + 100, fds  # (its own files, the replicas', the coordinator's)
        # those it held go after --client-timeout; a real client is answered then
        wait_for(lambda: still_open() == 0, 30, "the idle connections to be closed")
        st, _, body = gw.chat("llama-8b")
        assert st == 200, (st, body)
        assert gw.proc.alive()
    finally:
        for s in idle:
            s.close()


def test_https_with_a_certificate_of_ones_own(cluster2, tmp_path):
    """--tls-cert/--tls-key: the gateway speaks HTTPS with that certificate (a client
    that trusts it is answered; plain HTTP is not); a key that does not go with its
    certificate is refused at the start, saying so."""
    import ssl
    c = cluster2
    service(c, tmp_path, replicas=1, more="  public: true\n")
    cert, key = tmp_path / "gw.crt", tmp_path / "gw.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    gw = Gateway(c, "gw-tls", extra=["--tls-cert", str(cert), "--tls-key", str(key)])
    ctx = ssl.create_default_context(cafile=str(cert))

    def chat_https():
        conn = http.client.HTTPSConnection("127.0.0.1", gw.port, timeout=10, context=ctx)
        try:
            conn.request("POST", "/v1/chat/completions", body=json.dumps(
                {"model": "llama-8b", "messages": [{"role": "user", "content": "hi"}]}),
                headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read())
        finally:
            conn.close()

    st, body = wait_for(lambda: (lambda a: a if a[0] == 200 else None)(chat_https()), 60,
                        "an answer over HTTPS")
    assert body["choices"][0]["message"]["content"], body
    with pytest.raises((http.client.HTTPException, OSError)):
        gw.chat("llama-8b", timeout=5)  # (plain HTTP to an HTTPS port)
    other = tmp_path / "other.key"
    subprocess.run(["openssl", "genrsa", "-out", str(other), "2048"], check=True,
                   capture_output=True)
    bad = subprocess.run([c.bin("bramble-gateway"), "--credential", str(c.root / "gw-tls.gateway"),
                          "--listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key",
                          str(other)], capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "TLS certificate or key is bad" in bad.stderr, bad.stderr


def test_a_cap_per_replica_a_bounded_queue_and_clients_that_leave(cluster2, tmp_path):
    c = cluster2
    _, control = service(c, tmp_path, replicas=1, more="  public: true\n  max_inflight: 1\n")
    gw = Gateway(c, extra=("--queue", "1", "--client-timeout", "3s"))
    wait_routed(gw, "llama-8b", 1)
    (control / "hang-0").touch()
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(gw.chat("llama-8b", timeout=60)[0]),
                                daemon=True) for _ in range(2)]
    threads[0].start()
    wait_for(lambda: replica_stats(c)[0]["inflight"] == 1, what="one request at the replica")
    threads[1].start()
    wait_for(lambda: metric(gw, "bramble_gateway_waiting", service="llm", model="llama-8b") == 1,
             what="the second request to wait in the gateway (max_inflight 1)")
    # the queue holds one: the next is refused at once, saying when to come back
    st, h, body = gw.chat("llama-8b")
    assert st == 429 and h["Retry-After"] == "1", (st, h, body)
    assert "busy" in body["error"]["message"] and body["error"]["type"] == "rate_limit_error"
    (control / "hang-0").unlink()
    for t in threads:
        t.join(60)
    assert answers == [200, 200]
    stats = replica_stats(c)[0]
    assert stats["max_inflight"] == 1, stats  # the cap held at the replica
    # a client that hangs up: its request at the replica is called off
    (control / "hang-0").touch()
    s = socket.create_connection(("127.0.0.1", gw.port))
    body = json.dumps({"model": "llama-8b", "messages": []}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_for(lambda: replica_stats(c)[0]["inflight"] == 1, what="the request at the replica")
    s.close()
    wait_for(lambda: replica_stats(c)[0]["cancelled"] == 1, 10,
             "the replica to see its request called off")
    (control / "hang-0").unlink()
    # a slow client (a byte at a time) is cut off at --client-timeout
    s = socket.create_connection(("127.0.0.1", gw.port))
    t0 = time.monotonic()
    closed = False
    for ch in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" * 20:
        try:
            s.sendall(bytes([ch]))
            s.settimeout(0.2)
            if s.recv(100) == b"":
                closed = True
                break
        except socket.timeout:
            continue
        except OSError:
            closed = True
            break
    s.close()
    assert closed and time.monotonic() - t0 < 30, "a slow client was not cut off"
    # a header flood gets an error, and the gateway serves on
    flood = gw.raw(b"GET /v1/models HTTP/1.1\r\n" +
                   b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(2000)) + b"\r\n")
    assert re.match(rb"HTTP/1.1 4\d\d", flood), flood[:100]
    assert gw.chat("llama-8b")[0] == 200
    assert metric(gw, "bramble_gateway_requests_total", model="llama-8b", code="429") == 1
    # the page is one Prometheus reads: each family's samples together, labels escaped
    st, _, page = gw.request("GET", "/metrics")
    r = subprocess.run(["promtool", "check", "metrics"], input=page, capture_output=True,
                       timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr, page.decode())
    # stopped (SIGTERM) with one request at the replica and one waiting for it: both
    # are answered, 503 in the OpenAI shape (send it again), and the gateway ends well
    (control / "hang-0").touch()
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(gw.chat("llama-8b", timeout=60)),
                                daemon=True) for _ in range(2)]
    threads[0].start()
    wait_for(lambda: replica_stats(c)[0]["inflight"] == 1, what="one request at the replica")
    threads[1].start()
    wait_for(lambda: metric(gw, "bramble_gateway_waiting", service="llm", model="llama-8b") == 1,
             what="the second request to wait in the gateway")
    gw.proc.send_signal(signal.SIGTERM)
    assert gw.proc.wait_exit(30) == 0, gw.proc.output()[-2000:]
    for t in threads:
        t.join(30)
    (control / "hang-0").unlink()
    assert [(st, body["error"]["type"]) for st, _, body in answers] == \
        [(503, "service_unavailable")] * 2, answers
    assert "stopping" in answers[0][2]["error"]["message"]


@pytest.fixture(scope="module")
def openai_node():
    """The official openai client for Node (tests/node/install.sh; tests/run.sh
    installs it into build-test/npm): a function running openai_call.mjs."""
    repo = Path(__file__).resolve().parents[2]
    dest = Path(os.environ.get("BRAMBLE_NPM_DIR") or repo / "build-test" / "npm")
    if not (dest / "node_modules" / "openai").is_dir():
        r = subprocess.run([str(repo / "tests" / "node" / "install.sh"), str(dest)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"the openai client could not be installed:\n{r.stderr}"

    def call(port, *args):
        r = subprocess.run(["node", str(dest / "openai_call.mjs"), "--base-url",
                            f"http://127.0.0.1:{port}/v1", *args],
                           capture_output=True, text=True, timeout=120)
        assert r.stdout.strip(), f"openai_call.mjs printed nothing: {r.stderr}"
        return json.loads(r.stdout.strip().splitlines()[-1])

    return call


def test_the_official_openai_client_for_node(cluster2, tmp_path, openai_node):
    c = cluster2
    service(c, tmp_path, more="  public: true\n  aliases: [llama]\n")
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 2)
    out = openai_node(gw.port, "--model", "llama-8b", "--text", "say hi")
    assert out["ok"] and out["content"].endswith("model llama-8b: say hi"), out
    assert out["usage"]["completion_tokens"] > 0
    out = openai_node(gw.port, "--model", "llama", "--stream", "--usage", "--text",
                      "one two three four")
    assert out["ok"] and out["content"].endswith("one two three four"), out
    assert out["chunks"] >= 4 and out["usage"]["completion_tokens"] >= 4, out
    out = openai_node(gw.port, "--model", "llama-8b", "--kind", "completions", "--text", "x y")
    assert out["ok"] and out["content"].endswith("x y"), out
    out = openai_node(gw.port, "--model", "llama-8b", "--kind", "embeddings")
    assert out["ok"] and out["embedding_len"] == 8, out
    out = openai_node(gw.port, "--model", "llama-8b", "--kind", "models")
    assert sorted(out["models"]) == ["llama", "llama-8b"], out
    out = openai_node(gw.port, "--model", "gpt-5")
    assert not out["ok"] and out["status"] == 404 and "/v1/models" in out["message"], out


def test_a_request_is_tried_at_most_three_times(cluster2, tmp_path):
    """A 502 or 503 before any byte reached the client sends the request to another
    replica; one that finds every replica failing is tried three times, each on a
    replica of its own, and no fourth."""
    c = cluster2
    _, control = service(c, tmp_path, replicas=3, more="  public: true\n")
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 3)
    # a replica answering 502 (as a proxy in front of a dead server does): every
    # request is answered by another one, and it is taken out
    (control / "fail502-0").touch()
    mark = len(gw.proc.output())

    def tried_and_answered():
        st, h, body = gw.chat("llama-8b")
        assert st == 200 and h["X-Bramble-Replica"] in ("llm/1", "llm/2"), (st, h, body)
        return re.search(r"replica llm/0 \(\S+\) failed: it answered 502; taken out",
                         gw.proc.output()[mark:])

    wait_for(tried_and_answered, 30, "a request to find replica 0's 502 and go elsewhere")
    (control / "fail502-0").unlink()
    wait_routed(gw, "llama-8b", 3)
    # every replica failing: three tries, one at each replica, then an error
    served = {r: s["served"] for r, s in replica_stats(c).items()}
    for r in range(3):
        (control / f"fail{502 + (r == 2)}-{r}").touch()  # 0 and 1: 502; 2: 503
    mark = len(gw.proc.output())
    st, h, body = gw.chat("llama-8b")
    assert st == 502 and body["error"]["type"] == "upstream_error", (st, h, body)
    assert "3 replicas failed to answer; the last: it answered 50" in \
        body["error"]["message"], body
    out = gw.proc.output()[mark:]
    assert out.count("taken out") == 3, out  # the third too, reported as the others
    # (a replica counts its answer just after writing it)
    after = wait_for(lambda: (lambda a: a if sum(a.values()) >= sum(served.values()) + 3
                              else None)({r: s["served"] for r, s in replica_stats(c).items()}),
                     10, "the replicas to count the three tries")
    assert {r: after[r] - served[r] for r in after} == {0: 1, 1: 1, 2: 1}, (served, after)


def test_a_stream_passes_through_as_it_comes(cluster2, tmp_path):
    """Each server-sent event reaches the client when the replica sends it, not when
    the stream ends."""
    c = cluster2
    service(c, tmp_path, replicas=1, more="  public: true\n", extra="--token-delay-ms 80")
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 1)
    text = " ".join(f"w{i}" for i in range(16))  # 20 tokens, 19 gaps: 1.5 s
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": "llama-8b", "stream": True,
         "messages": [{"role": "user", "content": text}]}),
        headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")
    events = []  # (seconds since the request, data)
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            events.append((time.monotonic() - t0, line[6:].strip().decode()))
    conn.close()
    assert events and events[-1][1] == "[DONE]", events
    got = "".join(json.loads(e)["choices"][0]["delta"].get("content", "")
                  for _, e in events[:-1])
    assert got.endswith(text), got
    first, last = events[0][0], events[-1][0]
    assert last >= 1.4, f"the replica's delays were not kept: {events}"
    assert first < last / 2, f"the first event came at {first:.2f}s of {last:.2f}s"
    # the middle token came while the later ones were still being made
    middle = events[len(events) // 2][0]
    assert first < middle < last - 0.3, events


def test_a_replica_that_closes_idle_connections_takes_requests_beside_a_stream(
        cluster2, tmp_path):
    """A replica whose server closes kept-alive connections left idle (uvicorn, vLLM's
    server, does after 5 s) looks to the gateway like one that may have died: its next
    request is tried alone. Its answer ends that doubt, not the answer's end: when
    that request is a long stream, the requests beside it are served meanwhile, not
    held until the stream ends."""
    c = cluster2
    service(c, tmp_path, replicas=1, more="  public: true\n",
            extra="--token-delay-ms 250 --keepalive-timeout 1")
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 1)
    port = c.cli_json("endpoints", "llm")[0]["port"]

    def established():
        out = subprocess.run(["ss", "-Htn", "state", "established", "dst",
                              f"127.0.0.1:{port}"], capture_output=True, text=True).stdout
        return len(out.splitlines())

    assert gw.chat("llama-8b")[0] == 200  # a connection kept to it, then left idle
    wait_for(lambda: established() == 0, what="the replica to close the idle connection")
    text = " ".join(f"w{i}" for i in range(40))  # some 45 events, 250 ms apart
    got = {"events": 0}

    def stream():
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(
            {"model": "llama-8b", "stream": True,
             "messages": [{"role": "user", "content": text}]}),
            headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        got["status"] = r.status
        while line := r.readline():
            got["events"] += line.startswith(b"data: ")
        conn.close()

    t = threading.Thread(target=stream)
    t.start()
    try:
        wait_for(lambda: got["events"] > 0, what="the stream's first event")
        st, _, out = gw.chat("llama-8b", "beside it", timeout=60)
        seen = got["events"]  # of the stream's, when the request beside it was answered
        assert st == 200 and "beside it" in out["choices"][0]["message"]["content"], out
    finally:
        t.join(90)
    assert got.get("status") == 200 and got["events"] >= 40, got
    assert seen < 30, (f"the request beside the stream was answered after {seen} of its "
                       f"{got['events']} events: held back while the stream ran")


def test_a_stream_a_client_does_not_read_leaves_its_replica_serving(cluster2, tmp_path):
    """A client that stops reading a long stream fills the gateway's buffer for it, and
    the gateway pauses that replica's transfer (the replica goes on sending into the
    connection). The paused connection is not one kept idle: its replica is not put on
    trial for the bytes waiting on it, and a request to the same (single) replica is
    answered at once, while the stream stays open."""
    c = cluster2
    service(c, tmp_path, replicas=1, more="  public: true\n")
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 1)
    text = "w " * 200_000  # 200,000 events, tens of MB: more than every buffer between
    body = json.dumps({"model": "llama-8b", "stream": True,
                       "messages": [{"role": "user", "content": text}]}).encode()
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                  b"Content-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        port = c.cli_json("endpoints", "llm")[0]["port"]

        def paused():  # the gateway stopped reading the replica: its bytes wait there
            out = subprocess.run(["ss", "-Htn", "state", "established", "dst",
                                  f"127.0.0.1:{port}"], capture_output=True, text=True).stdout
            return any(int(line.split()[0]) >= 64 << 10 for line in out.splitlines())

        wait_for(paused, what="the gateway to pause the stream its client does not read")
        st, h, out = gw.chat("llama-8b", "still here?", timeout=15)
        assert st == 200 and "still here?" in out["choices"][0]["message"]["content"], out
    finally:
        s.close()
