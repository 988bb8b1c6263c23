"""Who may talk to the coordinator: unknown keys, join tokens (one use,
expired, revoked), removed nodes, credential file permissions."""

import json
import os
import time

import zmq

from conftest import read_yaml_flat, wait_for, write_credential


def _assert_refused_agent(proc, *needles):
    rc = proc.wait_exit()
    out = proc.output()
    assert rc != 0, f"{proc.name} exited 0 although it was refused:\n{out}"
    low = out.lower()
    for n in needles:
        assert n.lower() in low, f"{proc.name} output lacks {n!r}:\n{out}"
    return out


def test_unknown_key_pair_is_refused(cluster):
    admin = read_yaml_flat(cluster.credential)
    pub, sec = (k.decode() for k in zmq.curve_keypair())
    cred = write_credential(cluster.root / "stranger.credential", admin["endpoint"],
                            admin["server_public_key"], "admin", pub, sec)
    rc, out, err = cluster.cli("nodes", credential=cred, check=False)
    assert rc == 1, (rc, out, err)
    assert out == "", out
    low = err.lower()
    assert err.startswith("bramble:"), err
    assert any(w in low for w in ("not known", "unknown", "refused", "not allowed")), err
    rc, out, err = cluster.cli("token", "create", credential=cred, check=False)
    assert rc == 1 and out == "", (rc, out, err)
    rc, out, err = cluster.cli("submit", cluster.write_spec("name: x\ncommand: \"true\"\n"),
                               credential=cred, check=False)
    assert rc == 1 and out == "", (rc, out, err)
    # nothing was submitted
    assert cluster.jobs() == []
    cluster.assert_alive()


def test_group_readable_credential_is_refused(cluster):
    copy = cluster.root / "loose.credential"
    copy.write_text(cluster.credential.read_text())
    os.chmod(copy, 0o640)
    rc, out, err = cluster.cli("nodes", credential=copy, check=False)
    assert rc != 0 and out == "", (rc, out, err)
    assert err.strip(), "no message for a group-readable credential"


def test_one_use_token_works_once(cluster):
    tok = cluster.token(uses=1)
    cluster.start_agent("node-1", token=tok)
    cluster.wait_ready("node-1")
    second = cluster.start_agent("node-2", token=tok)
    _assert_refused_agent(second, "token used up")
    assert set(cluster.nodes()) == {"node-1"}
    cluster.assert_alive()


def test_expired_token_is_refused(cluster):
    _, out, _ = cluster.cli("token", "create", "--ttl", "1s", "--uses", "5", "--json")
    info = json.loads(out)
    assert isinstance(info["expires"], (int, float)), info
    # wait on the condition, not a fixed time: the token's own expiry has passed
    wait_for(lambda: time.time() > info["expires"] + 0.05, timeout=30,
             what="the token to expire")
    agent = cluster.start_agent("node-1", token=info["token"])
    _assert_refused_agent(agent, "token expired")
    assert cluster.nodes() == {}


def test_revoked_token_is_refused(cluster):
    _, out, _ = cluster.cli("token", "create", "--uses", "3", "--ttl", "10m", "--json")
    info = json.loads(out)
    cluster.cli("token", "revoke", info["id"])
    toks = {t["id"]: t for t in cluster.cli_json("token", "list")}
    assert toks[info["id"]]["revoked"] in (True, 1), toks
    agent = cluster.start_agent("node-1", token=info["token"])
    _assert_refused_agent(agent, "token revoked")
    assert cluster.nodes() == {}


def test_garbage_token_is_refused(cluster):
    agent = cluster.start_agent("node-1", token="brt1.not-a-token")
    rc = agent.wait_exit()
    assert rc != 0, agent.output()
    assert agent.output().strip()


def test_removed_node_cannot_reconnect(cluster):
    tok = cluster.token(uses=2)
    a1 = cluster.start_agent("node-1", token=tok)
    cluster.start_agent("node-2", token=tok)
    cluster.wait_ready("node-1", "node-2")

    cluster.cli("node", "remove", "node-1")
    _assert_refused_agent(a1, "refused")
    nodes = cluster.nodes()
    assert "node-1" not in nodes or nodes["node-1"]["state"] != "ready", nodes

    # restarting it with its saved key fails too
    again = cluster.start_agent("node-1", join=False)
    out = _assert_refused_agent(again, "refused", "--join-file")
    # and it says what to delete to join that machine again
    assert f"delete {cluster.agent_dir('node-1')}/agent.yaml" in out, out
    nodes = cluster.nodes()
    assert "node-1" not in nodes or nodes["node-1"]["state"] != "ready", nodes

    # the other node is untouched
    assert nodes["node-2"]["state"] == "ready"
    cluster.assert_alive()


def test_node_name_taken_is_refused(cluster):
    tok = cluster.token(uses=2)
    cluster.start_agent("node-1", token=tok)
    cluster.wait_ready("node-1")
    # a second agent (own data dir) asking for the same name
    argv = [cluster.bin("bramble-agent"), "--data-dir", cluster.root / "agents" / "dup",
            "--join", tok, "--name", "node-1"]
    dup = cluster.spawn("agent-dup", argv)
    _assert_refused_agent(dup, "taken")
    assert cluster.nodes()["node-1"]["state"] == "ready"
    cluster.assert_alive()
