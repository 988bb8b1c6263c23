"""Bad input never crashes a daemon and never corrupts the store: malformed
specs, oversized messages, random bytes on the TCP port, and well-formed CURVE
connections that send malformed frames (proto/PROTOCOL.md section 2).

The tests take their bad input, one after another, to one cluster (`loaded`,
started once for the module): each checks afterwards that the daemons still
run, the jobs from before are unchanged and a new job runs, and after each one
the daemons' logs are searched for sanitizer reports. Only
test_malformed_frame_alone starts a fresh cluster for each of its cases."""

import errno
import json
import os
import socket

import pytest
import zmq

from conftest import (FLAG_DATA, KIND_EVENT, KIND_RESPONSE, header, parse_header,
                      shared_cluster_test, start_cluster, teardown_clusters)

MiB = 1 << 20


def load(cluster):
    """cluster, with one agent and two finished jobs in its store."""
    cluster.add_agents(1)
    ids = []
    for name, cmd in (("before-ok", "echo kept"), ("before-fail", "exit 5")):
        jid = cluster.submit(f"name: {name}\ncommand: {cmd}\n")
        cluster.wait_job(jid)
        ids.append(jid)
    cluster.before = {j["id"]: (j["name"], j["state"]) for j in cluster.jobs()}
    assert set(cluster.before) == set(ids)
    return cluster


@pytest.fixture(scope="module")
def loaded_module(tmp_path_factory):
    made = []
    try:
        yield load(start_cluster(tmp_path_factory.mktemp("bad-input"), made))
    finally:
        teardown_clusters(made)


@pytest.fixture
def loaded(loaded_module, request):
    """The module's cluster with one agent and two finished jobs in its store
    (the same for every test); afterwards, the problems found while it ran."""
    yield from shared_cluster_test(loaded_module, request)


@pytest.fixture
def fresh_loaded(cluster):
    """A cluster of its own with one agent and two finished jobs in its store."""
    return load(cluster)


def assert_intact(c):
    """Daemons alive, `bramble nodes` answers, the jobs from before are listed
    unchanged, and a new job still runs."""
    c.assert_alive()
    rc, out, err = c.cli("nodes", check=False)
    assert rc == 0 and "node-1" in out, (rc, out, err)
    now = {j["id"]: (j["name"], j["state"]) for j in c.jobs()}
    for jid, v in c.before.items():
        assert now.get(jid) == v, f"job {jid} was {v}, now {now.get(jid)}"
    jid = c.submit("name: after\ncommand: echo still-works\n")
    assert c.wait_job(jid)["state"] == "completed"
    c.wait_logs(jid, "still-works")
    c.assert_alive()


# ---- specs


BAD_SPECS = [
    # (spec text, words the error must contain)
    ("name: bad\ncommand: echo hi\ncolour: blue\n", ["colour", "line 3"]),
    ("name: bad\ncommand: echo hi\nresources:\n  cpus: lots\n", ["cpus", "line 4"]),
    ("name: bad\ncommand: echo hi\nresources:\n  gpus: 1\n  vram: huge\n", ["vram", "line 5"]),
    ("name: Bad_Name!\ncommand: echo hi\n", ["name", "line 1"]),
    ("name: bad\ncommand: echo hi\nrestart:\n  max: 2\n  on: [sometimes]\n",
     ["on", "line 5"]),
    ("name: bad\ncommand: echo hi\nkind: batch\n", ["kind", "line 3"]),
]


@pytest.mark.parametrize("text,words", BAD_SPECS,
                         ids=["unknown-key", "cpus-type", "vram-size", "name-charset",
                              "restart-on", "kind"])
def test_malformed_spec_is_refused_with_field_and_line(loaded, text, words):
    spec = loaded.write_spec(text, "bad.yaml")
    rc, out, err = loaded.cli("submit", spec, check=False)
    assert rc == 1, (rc, out, err)
    assert out == "", out
    for w in words:
        assert w in err, f"error {err!r} does not name {w!r}"
    # the coordinator checks too: the same spec sent raw is refused, naming the field
    raw = loaded.raw_client()
    try:
        _, body, _ = raw.request("job.submit", {"spec": text, "sets": []})
    finally:
        raw.close()
    assert body.get("errnum") == errno.EINVAL, body
    assert words[0] in body.get("error", ""), body
    assert_intact(loaded)


def test_spec_missing_required_field(loaded):
    rc, out, err = loaded.cli("submit", loaded.write_spec("command: echo hi\n"), check=False)
    assert rc == 1 and "name" in err, (rc, out, err)
    rc, out, err = loaded.cli("submit", loaded.write_spec("name: x\ncommand: [unclosed\n"),
                              check=False)
    assert rc == 1 and "line" in err, (rc, out, err)
    assert_intact(loaded)


def test_bad_set_override(loaded):
    spec = loaded.write_spec("name: x\ncommand: \"true\"\n")
    rc, out, err = loaded.cli("submit", spec, "--set", "resources.nosuch=3", check=False)
    assert rc in (1, 2) and "nosuch" in err, (rc, out, err)
    assert_intact(loaded)


# ---- size


def test_oversized_message_is_dropped(loaded):
    raw = loaded.raw_client()
    try:
        # one frame bigger than ZMQ_MAXMSGSIZE (2 MiB): libzmq drops the connection
        big = b'{"spec": "' + b"x" * (3 * MiB) + b'", "sets": []}'
        raw.send([header("job.submit", 1), big])
        # nothing is owed in answer: libzmq drops the connection before the daemon
        # sees the message. Give it a moment to arrive (or not) before checking.
        raw.recv(timeout=2)
    finally:
        raw.close()
    assert_intact(loaded)
    assert {j["name"] for j in loaded.jobs()} == {"before-ok", "before-fail", "after"}
    # a fresh connection with the same keys works
    raw = loaded.raw_client()
    try:
        _, body, _ = raw.request("ping")
        assert body.get("principal") == "admin", body
    finally:
        raw.close()


def test_body_over_one_mib_is_refused(loaded):
    raw = loaded.raw_client()
    try:
        body = json.dumps({"spec": "name: x\ncommand: " + "y" * (MiB + 1000) + "\n",
                           "sets": []}).encode()
        assert MiB < len(body) < 2 * MiB
        raw.send([header("job.submit", 7), body])
        msg = raw.recv(timeout=30)
        if msg is not None:  # an answer is optional; if there is one it is an error
            h = parse_header(msg[0])
            assert h and h["seq"] == 7 and "errnum" in json.loads(msg[1]), msg[:2]
        _, pong, _ = raw.request("ping")
        assert pong.get("principal") == "admin"
    finally:
        raw.close()
    assert_intact(loaded)
    assert {j["name"] for j in loaded.jobs()} == {"before-ok", "before-fail", "after"}


# ---- raw TCP


def test_random_bytes_on_tcp_socket(loaded):
    rnd = os.urandom
    payloads = [
        rnd(16), rnd(4096), rnd(256 * 1024),
        b"\xff" + b"\x00" * 8 + b"\x7f" + rnd(100),  # ZMTP signature, then junk
        # a whole ZMTP 3.0 greeting asking for NULL security, then junk
        b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 31
        + rnd(1000),
        # a greeting asking for CURVE, then a HELLO command full of garbage
        b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"CURVE".ljust(20, b"\x00") + b"\x00" * 31
        + b"\x04\xc8\x05HELLO" + rnd(194),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    # one connection left half-open during the rest: it must not block the daemon
    hang = socket.create_connection(("127.0.0.1", loaded.port), timeout=10)
    hang.sendall(b"\xff\x00\x00")
    try:
        for p in payloads:
            for _ in range(3):
                with socket.create_connection(("127.0.0.1", loaded.port), timeout=10) as s:
                    try:
                        s.sendall(p)
                        s.shutdown(socket.SHUT_WR)
                        s.settimeout(2)
                        while s.recv(65536):
                            pass
                    except OSError:
                        pass  # the daemon may reset us: fine
        assert_intact(loaded)
    finally:
        hang.close()
    assert_intact(loaded)


# ---- malformed frames on a good CURVE connection


def _frames(case):
    h = header("ping", 11)
    return {
        "bad-magic": [b"XR" + h[2:], b"{}"],
        "wrong-version": [h[:2] + bytes([2]) + h[3:], b"{}"],
        "unknown-kind": [header("ping", 11, kind=9), b"{}"],
        "bad-flags": [header("ping", 11, flags=0x80), b"{}"],
        "short-header": [b"BR\x01", b"{}"],
        "type-length-mismatch": [h[:9] + bytes([30]) + h[10:], b"{}"],
        "type-bad-chars": [header("Job Submit!", 11), b"{}"],
        "empty-type": [header("", 11), b"{}"],
        "non-json-body": [h, b"this is { not json"],
        "body-not-object": [h, b"[1, 2, 3]"],
        "body-invalid-utf8": [h, b'{"x": "\xff\xfe"}'],
        "duplicate-keys": [header("job.list", 11), b'{"all": true, "all": false}'],
        "deep-nesting": [header("job.list", 11), b'{"all": ' + b"[" * 100000 + b"]" * 100000
                         + b"}"],
        "too-many-frames": [h, b"{}", b"data", b"extra", b"more"],
        "one-frame": [h],
        "empty-frames": [b"", b""],
        "data-not-announced": [h, b"{}", b"data"],
        "data-announced-missing": [header("ping", 11, flags=FLAG_DATA), b"{}"],
        "unknown-type": [header("no.such.thing", 11), b"{}"],
        "unknown-field": [header("job.list", 11), b'{"all": true, "bogus": 1}'],
        "wrong-field-type": [header("job.show", 11), b'{"id": "one"}'],
        "missing-field": [header("job.show", 11), b"{}"],
        "response-kind": [header("ping", 11, kind=KIND_RESPONSE), b"{}"],
        "event-kind-request-type": [header("job.list", 11, kind=KIND_EVENT), b'{"all": true}'],
        "node-message-from-admin": [header("node.heartbeat", 11), b'{"tasks": []}'],
        "job-log-from-admin": [header("job.log", 11, kind=KIND_EVENT, flags=FLAG_DATA),
                               b'{"job": 1, "attempt": 1, "rank": 0, "stream": 1, "seq": 0}',
                               b"forged output"],
    }[case]


# cases where the header is good enough that an error response is owed
# (a request with a valid header and 2 frames whose body or type is wrong);
# for the others an answer is optional
MUST_ANSWER = {"non-json-body", "body-not-object", "body-invalid-utf8", "duplicate-keys",
               "deep-nesting", "unknown-type", "unknown-field", "wrong-field-type",
               "missing-field", "node-message-from-admin"}

CASES = ["bad-magic", "wrong-version", "unknown-kind", "bad-flags", "short-header",
         "type-length-mismatch", "type-bad-chars", "empty-type", "non-json-body",
         "body-not-object", "body-invalid-utf8", "duplicate-keys", "deep-nesting",
         "too-many-frames", "one-frame", "empty-frames", "data-not-announced",
         "data-announced-missing", "unknown-type", "unknown-field", "wrong-field-type",
         "missing-field", "response-kind", "event-kind-request-type",
         "node-message-from-admin", "job-log-from-admin"]


def test_malformed_frames_on_curve_connection(loaded):
    """Every malformed message in CASES, one after another on one authenticated
    connection: each gets an error answer where one is owed, the connection keeps
    working (a ping after each is answered), and the daemons and store survive."""
    raw = loaded.raw_client()
    failures = []
    try:
        for case in CASES:
            raw.send(_frames(case))
            if case in MUST_ANSWER:
                msg = raw.recv(timeout=30)
                h = parse_header(msg[0]) if msg else None
                body = None
                try:
                    body = json.loads(msg[1]) if msg and len(msg) > 1 else None
                except ValueError:
                    pass
                if not (h and h["kind"] == KIND_RESPONSE and h["seq"] == 11 and
                        isinstance(body, dict) and isinstance(body.get("errnum"), int)
                        and body.get("error")):
                    failures.append(f"{case}: expected an error response with seq 11, "
                                    f"got {msg!r}")
            try:
                _, pong, _ = raw.request("ping", timeout=30)
                if pong.get("principal") != "admin":
                    failures.append(f"{case}: ping after it answered {pong}")
            except AssertionError as e:
                failures.append(f"{case}: no ping answer after it ({e})")
                break
            if not loaded.coordinator.alive():
                failures.append(f"{case}: brambled died")
                break
    finally:
        raw.close()
    assert not failures, "\n".join(failures)
    assert_intact(loaded)
    # the forged log line did not land in job 1's output
    assert "forged output" not in loaded.logs(1)


@pytest.mark.parametrize("case", ["bad-magic", "wrong-version", "non-json-body",
                                  "too-many-frames"])
def test_malformed_frame_alone(fresh_loaded, case):
    """The four named cases, each on its own fresh connection and cluster."""
    raw = fresh_loaded.raw_client()
    try:
        for _ in range(5):
            raw.send(_frames(case))
        _, pong, _ = raw.request("ping", timeout=30)
        assert pong.get("principal") == "admin", pong
    finally:
        raw.close()
    assert_intact(fresh_loaded)


def _join_keys(token):
    """The CURVE key pair a token's holder joins with (proto/token.h): BLAKE2b-256 of
    the secret keyed by "bramble join key" seeds crypto_box_seed_keypair."""
    import base64
    import ctypes
    import ctypes.util
    import hashlib
    body = token.split(".", 1)[1]
    secret = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["s"]
    seed = hashlib.blake2b(secret.encode(), digest_size=32, key=b"bramble join key").digest()
    sodium = ctypes.CDLL(ctypes.util.find_library("sodium") or "libsodium.so.23")
    pk, sk = ctypes.create_string_buffer(32), ctypes.create_string_buffer(32)
    assert sodium.crypto_box_seed_keypair(pk, sk, seed) == 0
    from zmq.utils import z85
    return z85.encode(pk.raw).decode(), z85.encode(sk.raw).decode()


def test_unknown_key_gets_no_answer_and_a_join_key_may_only_join(loaded):
    """PROTOCOL.md 1: a key that is neither a principal nor a token's join key is
    refused at the handshake (no answer at all); a token's join key may send
    node.join and nothing else (each refusal an EACCES answer)."""
    pub, sec = (k.decode() for k in zmq.curve_keypair())
    raw = loaded.raw_client(pub, sec)
    try:
        raw.send([header("ping", 1), b"{}"])
        assert raw.recv(timeout=2.0) is None, "a stranger's ping was answered"
    finally:
        raw.close()
    tok = loaded.token(1)
    raw = loaded.raw_client(*_join_keys(tok))
    try:
        for type_, body in (("ping", {}), ("node.list", {}), ("job.list", {"all": True}),
                            ("token.create", {"ttl": 60000, "uses": 1}),
                            ("job.submit", {"spec": "name: x\ncommand: \"true\"\n", "sets": []}),
                            ("node.heartbeat", {"tasks": []})):
            _, r, _ = raw.request(type_, body)
            assert r.get("errnum") == errno.EACCES, (type_, r)
        # another token's secret over this token's key: refused, and no use is counted
        _, r, _ = raw.request("node.join", {"token": loaded.token(1), "name": "evil",
                                            "public_key": pub, "labels": {},
                                            "cost_per_hour": 0.0})
        assert r.get("errnum") and "token not recognised" in r.get("error", ""), r
    finally:
        raw.close()
    assert "evil" not in loaded.nodes()
    assert_intact(loaded)


def test_many_connections_churn(loaded):
    """Connect and drop 50 CURVE clients (half with unknown keys) in a row."""
    for i in range(50):
        if i % 2:
            pub, sec = (k.decode() for k in zmq.curve_keypair())
            raw = loaded.raw_client(pub, sec)
        else:
            raw = loaded.raw_client()
        raw.send([header("ping", i), b"{}"])
        raw.close()
    raw = loaded.raw_client()
    try:
        _, pong, _ = raw.request("ping")
        assert pong["principal"] == "admin"
    finally:
        raw.close()
    assert_intact(loaded)


# ---- loose bodies and what reaches a terminal


def test_loose_bodies_are_refused_naming_the_field(loaded):
    """PROTOCOL.md says bodies are strict: each of these is refused with the field
    it got wrong, and nothing is stored or run."""
    c = loaded
    raw = c.raw_client()
    try:
        _, body, _ = raw.request("ping", {"x": 1})
        assert body.get("errnum") == errno.EPROTO and "ping" in body["error"], body
        _, body, _ = raw.request("job.submit", {"spec": "name: loose\ncommand: 'true'\n",
                                                "sets": "x"})
        assert body.get("errnum") == errno.EPROTO and "'sets'" in body["error"], body
        for limit in (-1, 2 ** 62):
            _, body, _ = raw.request("event.list", {"after": 0, "job": 0, "limit": limit})
            assert body.get("errnum") == errno.EINVAL and "limit" in body["error"], body
        _, body, _ = raw.request("event.list", {"after": 0, "job": 99999, "limit": 10})
        assert body.get("errnum") == errno.ENOENT and "no job 99999" in body["error"], body
        _, body, _ = raw.request("ping")
        assert body.get("principal") == "admin", body
    finally:
        raw.close()
    assert not any(j["name"] == "loose" for j in c.jobs())
    rc, out, err = c.cli("events", "--job", 99999, check=False)
    assert rc == 1 and "no job 99999" in err, (rc, out, err)
    assert_intact(c)


def test_job_fields_reach_the_terminal_escaped(loaded):
    """A command holding terminal escapes is shown with them spelled out, so that a
    user cannot write escape sequences onto the admin's terminal."""
    c = loaded
    spec = c.write_spec('name: colours\ncommand: "printf \\"\\\\033[31m\\"; echo \\x1b[2Jred"\n')
    jid = c.cli_json("submit", spec)["id"]
    c.wait_job(jid)
    rc, out, err = c.cli("job", "show", jid)
    assert rc == 0, (rc, out, err)
    assert "\x1b" not in out, repr(out)
    assert "\\x1b[2Jred" in out, out
    rc, out, err = c.cli("jobs")
    assert "\x1b" not in out, repr(out)
    assert_intact(c)


def test_cli_words_for_bad_flags(loaded):
    c = loaded
    rc, out, err = c.cli("--timeout", "0", "nodes", check=False)
    assert rc == 2 and "--timeout 0" in err and "more than 0" in err, (rc, out, err)
    rc, out, err = c.cli("node", "rotate-key", "ghost", check=False)
    assert rc == 1 and err.count("ghost") == 1, (rc, out, err)
    # an array of N% more than an array can hold is refused, not clamped
    spec = c.write_spec("name: many\ncommand: 'true'\narray: \"0-9%99999999999999999999\"\n")
    rc, out, err = c.cli("submit", spec, check=False)
    assert rc == 1 and "N is 1 to 10000" in err, (rc, out, err)
    spec = c.write_spec("name: half\ncommand: 'true'\nresources: {gpus: 1, vram: 0.5}\n")
    rc, out, err = c.cli("submit", spec, check=False)
    assert rc == 1 and "less than a byte" in err, (rc, out, err)
