"""API keys at the gateway: `bramble key create|list|revoke`, a user's keys and
what they may be used for, a revoked key refused, a user's requests a minute
(`user set --rpm`), and the official openai client for Node sending a key."""

import json
import re
import time

from conftest import wait_for
from test_gateway import (Gateway, metric, openai_node, service,  # noqa: F401 (a fixture)
                          wait_routed)


def add_user(c, name):
    cred = c.root / f"{name}.credential"
    c.cli("user", "add", name, "--out", cred)
    return cred


def key_create(c, *args, credential=None):
    _, out, _ = c.cli("key", "create", *args, credential=credential)
    key = out.strip().splitlines()[-1]
    assert key.startswith("brk-") and " " not in key, out
    return key


def chat(gw, model, key=None):
    h = {"Authorization": f"Bearer {key}"} if key else {}
    st, hd, out = gw.request("POST", "/v1/chat/completions",
                             {"model": model, "messages": [{"role": "user",
                                                            "content": "hi"}]},
                             headers=h)
    return st, hd, json.loads(out) if out else None


def models(gw, key=None):
    h = {"Authorization": f"Bearer {key}"} if key else {}
    st, _, out = gw.request("GET", "/v1/models", headers=h)
    assert st == 200, out
    return sorted(m["id"] for m in json.loads(out)["data"])


def test_keys_say_who_may_use_which_model_and_a_revoked_one_is_refused(
        cluster2, tmp_path, openai_node):
    c = cluster2
    ann, bob = add_user(c, "ann"), add_user(c, "bob")
    c.cli("user", "set", "bob", "--rpm", "3")
    service(c, tmp_path, replicas=1, more="  aliases: [llama]\n  adapters: [sql-lora]\n",
            extra="--adapters sql-lora")
    gw = Gateway(c)
    # bad input is refused by name, and makes no key
    rc, _, err = c.cli("key", "create", "--name", "Bad_Name", check=False, credential=ann)
    assert rc != 0 and "key name 'Bad_Name'" in err, err
    rc, _, err = c.cli("key", "create", "--models", "a,,b", check=False, credential=ann)
    assert rc == 2 and "--models 'a,,b'" in err, err
    rc, _, err = c.cli("key", "create", "--models", "a,a", check=False, credential=ann)
    assert rc != 0 and "model 'a' is named twice" in err, err
    assert c.cli_json("key", "list", credential=ann) == []
    a = key_create(c, "--name", "notebook", credential=ann)
    b = key_create(c, "--models", "llama-8b", credential=bob)
    admin = key_create(c, "--models", "sql-lora")
    rc, _, err = c.cli("key", "create", "--name", "notebook", check=False, credential=ann)
    assert rc != 0 and "a key named 'notebook' already" in err, err
    # the gateway hears of the keys (the last one made is known once its table came)
    wait_for(lambda: chat(gw, "sql-lora", admin)[0] == 200, 60,
             "the gateway to take the admin's key for sql-lora")
    # a model that is not public needs a key the gateway knows
    st, _, body = chat(gw, "llama-8b")
    assert st == 401 and "needs an API key" in body["error"]["message"], body
    st, _, body = chat(gw, "llama-8b", "brk-not-a-key")
    assert st == 401 and "not valid" in body["error"]["message"], body
    st, _, body = chat(gw, "no-such-model", admin)
    assert st == 404, body
    assert models(gw) == [] and models(gw, "brk-not-a-key") == []
    # ann's key may use every name; bob's only llama-8b (and its alias); the
    # admin's only the adapter
    for name in ("llama-8b", "llama", "sql-lora"):
        st, h, body = chat(gw, name, a)
        assert st == 200 and h["X-Bramble-Replica"] == "llm/0", (name, st, body)
    assert models(gw, a) == ["llama", "llama-8b", "sql-lora"]
    assert models(gw, b) == ["llama", "llama-8b"]
    assert models(gw, admin) == ["sql-lora"]
    st, _, body = chat(gw, "sql-lora", b)
    assert st == 403 and body["error"]["type"] == "permission_error", body
    st, _, body = chat(gw, "llama-8b", admin)
    assert st == 403 and "may not be used for model 'llama-8b'" in body["error"]["message"]
    # bob may send 3 requests a minute: a bucket of 3 that fills one every 20 s
    t0, codes = time.monotonic(), []
    for name in ["llama-8b", "llama"] * 3:
        st, h, body = chat(gw, name, b)
        codes.append(st)
        if st == 429:
            assert int(h["Retry-After"]) >= 1 and "3 requests a minute" in \
                body["error"]["message"], (h, body)
    elapsed = time.monotonic() - t0
    assert set(codes) <= {200, 429}, codes
    assert 3 <= codes.count(200) <= 3 + int(elapsed / 20), (codes, elapsed)
    if elapsed < 20:
        assert codes.count(429) == 3, codes
    # the official client sends its key as a bearer token
    out = openai_node(gw.port, "--api-key", a, "--model", "llama", "--stream", "--usage")
    assert out["ok"] and out["usage"]["completion_tokens"] > 0, out
    out = openai_node(gw.port, "--api-key", "brk-nothing", "--model", "llama")
    assert not out["ok"] and out["status"] == 401, out
    # each sees their own keys; the admin everyone's with --all
    mine = c.cli_json("key", "list", credential=ann)
    assert [(k["name"], k["user"], k["models"]) for k in mine] == [("notebook", "ann", [])]
    every = c.cli_json("key", "list", "--all")
    assert sorted(k["user"] for k in every) == ["admin", "ann", "bob"], every
    rc, _, err = c.cli("key", "list", "--all", check=False, credential=bob)
    assert rc != 0 and "only the admin" in err, err
    # bob cannot revoke ann's key; she can, by name, and the gateway refuses it
    rc, _, err = c.cli("key", "revoke", mine[0]["id"], check=False, credential=bob)
    assert rc != 0 and f"no key '{mine[0]['id']}'" in err, err
    c.cli("key", "revoke", "notebook", credential=ann)
    answered = []  # (a request may reach the gateway before the news of the revoke)

    def refused():
        st = chat(gw, "llama-8b", a)[0]
        if st == 200:
            answered.append(st)
        return st == 401

    wait_for(refused, 30, "ann's revoked key refused")
    assert c.cli_json("key", "list", credential=ann) == []
    # the admin revokes anyone's key by its id; a removed user's keys go with them
    bob_id = next(k["id"] for k in every if k["user"] == "bob")
    c.cli("user", "remove", "bob")
    wait_for(lambda: chat(gw, "llama-8b", b)[0] == 401, 30, "a removed user's key refused")
    rc, _, err = c.cli("key", "revoke", bob_id, check=False)
    assert rc != 0 and f"no key '{bob_id}'" in err, err
    admin_id = next(k["id"] for k in every if k["user"] == "admin")
    c.cli("key", "revoke", admin_id)
    wait_for(lambda: chat(gw, "sql-lora", admin)[0] == 401, 30, "the admin's key refused")
    # what the gateway answered reaches `bramble usage --models`, per user and model
    # (the name asked for), with the tokens the replicas' answers said they used
    def rows(*cred):
        got = c.cli_json("usage", "--models", credential=cred[0] if cred else None)
        return {(r["user"], r["model"]): r for r in got}

    def ann_counted():
        r = rows(ann)
        return {k: v["requests"] for k, v in r.items()} == {
            ("ann", "llama-8b"): 1 + len(answered), ("ann", "llama"): 2,
            ("ann", "sql-lora"): 1}

    wait_for(ann_counted, 30, "the gateway's report of ann's requests")
    mine = rows(ann)
    assert all(v["errors"] == 0 and v["prompt_tokens"] > 0 and v["completion_tokens"] > 0
               and v["ms"] >= 0 for v in mine.values()), mine
    every = rows()
    assert every[("bob", "sql-lora")]["requests"] == 1 == every[("bob", "sql-lora")]["errors"]
    assert every[("", "llama-8b")]["errors"] >= 2  # no key, a bad one, revoked ones
    assert sum(every[("bob", m)]["errors"] for m in ("llama-8b", "llama")
               if ("bob", m) in every) >= codes.count(429)
    # ... and its /metrics: request seconds and time to first token as histograms,
    # tokens by kind
    st, _, page = gw.request("GET", "/metrics")
    page = page.decode()
    for line in ('bramble_gateway_request_seconds_count{model="llama"} ',
                 'bramble_gateway_ttft_seconds_bucket{model="llama",le="+Inf"} ',
                 'bramble_gateway_requests_total{model="llama-8b",code="401"} '):
        assert line in page, (line, page)
    tokens = re.search(r'bramble_gateway_tokens_total\{model="llama",kind="completion"\} '
                       r'(\d+)', page)
    assert tokens and int(tokens.group(1)) >= mine[("ann", "llama")]["completion_tokens"]
    # a name nobody serves is counted without it (clients cannot grow the page)
    assert 'model="no-such' not in page
    assert 'bramble_gateway_requests_total{model="",code="404"} 1' in page, page
    # the admin's key actions are in the audit log, by key
    acts = [(e["action"], e["target"]) for e in c.cli_json("audit")]
    assert ("key.revoke", f"key {admin_id}") in acts and \
        any(a == "key.create" for a, _ in acts), acts
    assert gw.proc.alive()


def test_a_gateways_key_reads_the_routing_table_and_nothing_else(cluster2, tmp_path):
    """A gateway's credential cannot work the cluster through the CLI; once the
    gateway is removed its key is refused, and its gateway (the running one, and one
    started with it) serves nothing."""
    c = cluster2
    service(c, tmp_path, replicas=1, more="  public: true\n")
    gw = Gateway(c)
    wait_routed(gw, "llama-8b", 1)
    cred = c.root / "gw.gateway"
    spec = c.write_spec("name: sneaky\ncommand: true\nresources: {cpus: 0}\n", "sneaky.yaml")
    for args, what in ((["jobs"], "listing jobs"), (["nodes"], "listing nodes"),
                       (["submit", spec], "submitting jobs"), (["logs", "1"], "reading job logs"),
                       (["key", "create"], "managing API keys"),
                       (["gateway", "add", "gw2"], "managing gateways")):
        rc, _, err = c.cli(*args, check=False, credential=cred)
        assert rc != 0 and f"not allowed: {what}: a gateway may only read the routing " \
            "table" in err, (args, err)
    assert [j["name"] for j in c.cli_json("jobs")].count("sneaky") == 0
    assert [g["name"] for g in c.cli_json("gateway", "list")] == ["gw"]
    # removed: its key is refused at once, and the coordinator tells it nothing more
    mark = len(gw.proc.output())
    c.cli("gateway", "remove", "gw")
    assert c.cli_json("gateway", "list") == []
    rc, _, err = c.cli("jobs", check=False, credential=cred)
    assert rc != 0 and "refused this key" in err, err
    refused = "the coordinator refused the watch: not allowed: reading the gateways' " \
              "routing table: this key has been revoked"
    wait_for(lambda: refused in gw.proc.output()[mark:], 30,
             "the removed gateway to be refused the routing table")
    # ... and it serves nothing from then on, saying so, its coordinator counted away
    wait_for(lambda: "serving nothing" in gw.proc.output()[mark:], 30,
             "the removed gateway to say it serves nothing")
    assert gw.models() == []
    st, _, body = gw.chat("llama-8b")
    assert st == 404, (st, body)
    assert metric(gw, "bramble_gateway_coordinator_up") == 0
    service(c, tmp_path, name="other", model="qwen-7b", replicas=1, more="  public: true\n")
    wait_for(lambda: c.cli_json("endpoints", "other"), 60, "service other to be healthy")
    seen = gw.proc.output().count(refused)
    wait_for(lambda: gw.proc.output().count(refused) > seen, 30,
             "the gateway to ask for the table again after service other was up")
    assert gw.models() == []
    # a gateway started with the removed key is refused and serves nothing
    again = c.spawn("bramble-gateway", [c.bin("bramble-gateway"), "--credential", str(cred),
                                        "--listen", "127.0.0.1:0"])
    wait_for(lambda: "the coordinator refused this gateway's key (removed, or another "
             "cluster's): serving nothing" in again.output(), 30,
             "a gateway started with a removed key to say it is refused")
    gw.port = int(re.search(r"serving on http://127\.0\.0\.1:(\d+)",
                            again.output()).group(1))  # (the client, to the new one)
    assert gw.models() == []
    st, _, body = gw.chat("llama-8b")
    assert st == 404, (st, body)
    assert metric(gw, "bramble_gateway_coordinator_up") == 0
    assert again.alive()
