"""Data sets: `bramble data push DIR NAME[:TAG]` packs a directory as git would list
it, sends the coordinator's content store only the files it lacks, verified by hash
and fsynced before the push is acknowledged; tags are immutable; data sets are their
owner's unless shared; quotas refuse naming the largest files; an upload cut off (the
CLI killed, the coordinator killed with kill -9) goes on from what was stored, and
nothing half-sent ever counts."""
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import read_yaml_flat, wait_for
from treefiles import blob, write




def store_dir(c):
    return c.data / "store"


def objects(c):
    """{hash: bytes} of every whole content in the store."""
    found = {}
    top = store_dir(c) / "objects"
    for sub in top.iterdir():
        for f in sub.iterdir():
            found[f.name] = f.read_bytes()
    return found


def partials(c):
    return {f.name: f.stat().st_size for f in (store_dir(c) / "partial").iterdir()}


def push(c, *args, credential=None, check=True):
    rc, out, err = c.cli("data", "push", *args, "--json", credential=credential, check=check)
    return (json.loads(out) if rc == 0 else None), rc, err


def add_user(c, name):
    cred = c.root / f"{name}.credential"
    c.cli("user", "add", name, "--out", cred)
    return cred


def test_push_sends_only_what_the_store_lacks(cluster):
    c = cluster
    tree = c.root / "laptop" / "model"
    write(tree / "weights.bin", blob(3 << 20, 1))
    write(tree / "config.json", b'{"layers": 2}\n')
    write(tree / "tok" / "vocab.txt", b"a\nb\n")
    write(tree / "scratch.tmp", b"never sent")
    (tree / ".brambleignore").write_text("*.tmp\n")
    os.symlink("tok/vocab.txt", tree / "vocab")

    d, _, _ = push(c, tree, "llama")
    assert (d["name"], d["tag"], d["version"]) == ("llama", "v1", 1)
    # weights, config, vocab, .brambleignore and the link; not scratch.tmp
    assert d["files"] == 5, d
    assert d["sent_bytes"] == d["bytes"] == (3 << 20) + 14 + 4 + 6, d
    stored = objects(c)
    for f in ("weights.bin", "config.json", "tok/vocab.txt"):
        data = (tree / f).read_bytes()
        assert stored[hashlib.blake2b(data, digest_size=32).hexdigest()] == data, f
    assert not any(v == b"never sent" for v in stored.values())

    # the same tree again: a new version, nothing sent
    d2, _, _ = push(c, tree, "llama:base")
    assert (d2["tag"], d2["version"], d2["sent_bytes"], d2["sent_files"]) == ("base", 2, 0, 0)
    # one file changed: only it is sent
    write(tree / "config.json", b'{"layers": 3}\n')
    d3, _, _ = push(c, tree, "llama")
    assert (d3["tag"], d3["sent_files"], d3["sent_bytes"]) == ("v3", 1, 14), d3

    # a tag names one version for good; v1, v2... are the versions' own
    _, rc, err = push(c, tree, "llama:base", check=False)
    assert rc == 1 and "llama:base exists" in err, err
    _, rc, err = push(c, tree, "llama:v9", check=False)
    assert rc == 1 and "v9" in err, err
    _, rc, err = push(c, tree, "Llama!", check=False)
    assert rc == 1 and "'llama!'" in err.lower() and "not a data set name" in err, err

    listed = c.cli_json("data", "list")
    assert [(x["name"], x["tag"]) for x in listed] == [("llama", "v1"), ("llama", "base"),
                                                       ("llama", "v3")]
    shown = c.cli_json("data", "show", "llama:base")
    assert shown["version"] == 2 and shown["versions"] == ["v1", "base", "v3"]
    assert shown["largest"][0] == {"path": "weights.bin", "size": 3 << 20}
    _, out, _ = c.cli("data", "show", "llama")
    assert "tag:       v3" in out and "weights.bin" in out, out

    # removing versions frees only what no other version holds
    before = objects(c)
    c.cli("data", "rm", "llama:v3")
    after = objects(c)
    gone = set(before) - set(after)
    # its one file of its own, and its listing (the manifest's text nodes read)
    assert sorted(before[h] for h in gone if not before[h].startswith(b'{"hash"')) == \
        [b'{"layers": 3}\n'], gone
    assert len(gone) == 2, gone
    c.cli("data", "rm", "llama")
    assert objects(c) == {}, "the store keeps files no data set holds"
    assert c.cli_json("data", "list") == []
    rc, _, err = c.cli("data", "show", "llama", check=False)
    assert rc == 1 and "no data set llama" in err, err


def test_left_out_and_refused_files_are_named(cluster):
    c = cluster
    tree = c.root / "repo"
    write(tree / "train.py", b"print(1)\n")
    write(tree / "data" / "big.npy", b"x" * 100)
    (tree / ".gitignore").write_text("data/\n")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    _, out, err = c.cli("data", "push", tree, "repo")
    assert "left out by .gitignore/.brambleignore: data/" in err, err
    assert c.cli_json("data", "show", "repo")["files"] == 2  # train.py, .gitignore
    # a git-ignored directory sent on purpose
    (tree / ".brambleignore").write_text("!data/\n")
    d, _, _ = push(c, tree, "repo")
    assert d["files"] == 4 and d["sent_files"] == 2, d  # data/big.npy, .brambleignore

    # a socket in the tree is refused, named, and nothing is pushed
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tree / "agent.sock"))
    try:
        _, rc, err = push(c, tree, "repo", check=False)
    finally:
        sock.close()
    assert rc == 1 and "agent.sock" in err and "socket" in err, err
    os.unlink(tree / "agent.sock")
    os.symlink("/etc/passwd", tree / "passwd")
    _, rc, err = push(c, tree, "repo", check=False)
    assert rc == 1 and "passwd" in err and "out of the tree" in err, err
    assert len(c.cli_json("data", "list")) == 2


def test_data_sets_are_their_owners_unless_shared(cluster):
    c = cluster
    alice, bob, carol = (add_user(c, n) for n in ("alice", "bob", "carol"))
    tree = c.root / "w"
    write(tree / "w.bin", blob(1000, 2))
    push(c, tree, "weights", credential=alice)
    assert c.cli_json("data", "list", credential=bob) == []
    rc, _, err = c.cli("data", "show", "alice/weights", credential=bob, check=False)
    assert rc == 1 and "no data set alice/weights" in err, err
    # bob's own data set of the same name is another one; its bytes are stored once
    d, _, _ = push(c, tree, "weights", credential=bob)
    assert d["version"] == 1 and d["owner"] == "bob"
    # the file and the one listing of the same tree
    assert len(objects(c)) == 2, objects(c).keys()

    write(tree / "w2.bin", blob(500, 3))
    d, _, _ = push(c, tree, "weights:shared", "--share", "bob", credential=alice)
    assert d["shares"] == ["bob"]
    seen = {(x["owner"], x["tag"]) for x in c.cli_json("data", "list", credential=bob)}
    assert seen == {("bob", "v1"), ("alice", "shared")}, seen
    assert c.cli_json("data", "show", "alice/weights", credential=bob)["tag"] == "shared"
    assert c.cli_json("data", "list", credential=carol) == []
    # using is not owning
    rc, _, err = c.cli("data", "rm", "alice/weights:shared", credential=bob, check=False)
    assert rc == 1 and "not allowed" in err, err
    rc, _, err = c.cli("data", "rm", "weights:shared", credential=bob, check=False)
    assert rc == 1 and "no data set weights:shared" in err, err
    _, rc, err = push(c, tree, "x", "--share", "nobody", credential=alice, check=False)
    assert rc == 1 and "--share nobody: no such user" in err, err

    push(c, tree, "open", "--public", credential=alice)
    assert [x["name"] for x in c.cli_json("data", "list", credential=carol)] == ["open"]
    # the admin sees and removes anyone's
    assert len(c.cli_json("data", "list")) == 4
    c.cli("data", "rm", "alice/open")
    assert c.cli_json("data", "list", credential=carol) == []


def test_over_quota_names_the_largest_files(make_cluster):
    c = make_cluster(start=False)
    c.start_coordinator(extra=["--user-store-quota", "1MiB"])
    alice = add_user(c, "alice")
    tree = c.root / "t"
    sizes = {"a.bin": 400_000, "b.bin": 300_000, "c.bin": 200_000, "d.bin": 150_000,
             "e.bin": 120_000, "f.bin": 1_000, "g.bin": 10}
    for i, (name, n) in enumerate(sizes.items()):
        write(tree / name, blob(n, 10 + i))
    _, rc, err = push(c, tree, "big", credential=alice, check=False)
    assert rc == 1 and "over your quota" in err and "--user-store-quota" in err, err
    for name in ("a.bin", "b.bin", "c.bin", "d.bin", "e.bin"):
        assert name in err, (name, err)
    assert "f.bin" not in err and ".brambleignore" in err, err
    assert c.cli_json("data", "list", credential=alice) == []
    assert objects(c) == {} and partials(c) == {}, "a refused push stored its files"
    # what fits goes; the admin has no such quota
    (tree / ".brambleignore").write_text("a.bin\nb.bin\n")
    d, _, _ = push(c, tree, "small", credential=alice)
    assert d["files"] == 6
    push(c, tree.parent / "t", "admins")


def test_a_full_store_refuses_naming_its_quota_and_the_largest_files(make_cluster):
    """Past --store-quota (the whole store's, the admin's pushes too): the push is
    refused saying so, naming the largest files and .brambleignore; no data set
    is made, and a push that fits then goes."""
    c = make_cluster(start=False)
    c.start_coordinator(extra=["--store-quota", "1MiB"])
    tree = c.root / "t"
    sizes = {"a.bin": 500_000, "b.bin": 400_000, "c.bin": 300_000, "d.bin": 2_000}
    for i, (name, n) in enumerate(sizes.items()):
        write(tree / name, blob(n, 30 + i))
    _, rc, err = push(c, tree, "big", check=False)
    assert rc == 1 and "--store-quota" in err and ".brambleignore" in err, err
    for name in ("a.bin", "b.bin", "c.bin"):
        assert name in err, (name, err)
    assert "this tree adds 1.1MiB to the " in err and "may hold 1.0MiB" in err, err
    assert c.cli_json("data", "list") == []
    # refused before any file was sent: nothing stored takes the room (its listing,
    # sent first, goes too)
    assert partials(c) == {}
    wait_for(lambda: objects(c) == {}, what="the refused push's listing to go")
    (tree / ".brambleignore").write_text("a.bin\n")
    d, _, _ = push(c, tree, "small")
    assert d["files"] == 4  # (.brambleignore is one of them)


def put_file(client, data):
    """content.put every chunk of data, as a client that never asked content.lack; the
    first refusal's body, or None when it is all stored."""
    h = hashlib.blake2b(data, digest_size=32).hexdigest()
    for off in range(0, len(data), 256 * 1024):
        _, r, _ = client.request("content.put", {"hash": h, "size": len(data), "offset": off},
                                 data=data[off:off + 256 * 1024])
        if r.get("errnum"):
            return r
    assert r.get("whole") is True, r
    return None


def test_quota_holds_for_a_client_that_skips_content_lack(make_cluster):
    """Storing files by content.put alone, never submitting them, counts against the
    user's quota from the first chunk: a client cannot fill the store past it."""
    c = make_cluster(start=False)
    c.start_coordinator(extra=["--user-store-quota", "1MiB"])
    alice = add_user(c, "alice")
    y = read_yaml_flat(alice)
    raw = c.raw_client(y["public_key"], y["secret_key"])
    try:
        assert put_file(raw, blob(400_000, 1)) is None
        assert put_file(raw, blob(400_000, 2)) is None
        again = put_file(raw, blob(400_000, 1))  # the same file again: not charged twice
        assert again is None, again
        r = put_file(raw, blob(400_000, 3))
        assert r and "over your quota" in r["error"] and "not (yet) submitted" in r["error"], r
        assert "--user-store-quota" in r["error"], r
    finally:
        raw.close()
    held = objects(c)
    assert len(held) == 2 and partials(c) == {}, "a refused file was stored"
    # the CLI's push is told what holds the quota, before it sends anything
    tree = c.root / "t"
    write(tree / "w.bin", blob(300_000, 4))
    _, rc, err = push(c, tree, "w", credential=alice, check=False)
    assert rc == 1 and "over your quota" in err and "not (yet) submitted" in err, err
    assert objects(c).keys() == held.keys()
    # what it stored counts as its own once a push refers to it: no longer twice
    write(tree / "a.bin", blob(400_000, 1))
    (tree / "w.bin").unlink()
    d, _, _ = push(c, tree, "a", credential=alice)
    assert d["files"] == 1
    # another user is not held back by alice's uploads
    bob = add_user(c, "bob")
    write(c.root / "b" / "x.bin", blob(900_000, 5))
    push(c, c.root / "b", "x", credential=bob)


def test_knowing_a_hash_is_not_holding_the_file(make_cluster):
    """Alice's private file is in the store. Bob, who knows its hash, is told it is
    lacking; a tree of his that holds the same bytes sends them (checked, then let
    go: the store keeps one copy), and Alice's own push again sends nothing."""
    c = make_cluster()
    alice, bob = add_user(c, "alice"), add_user(c, "bob")
    secret = b"alice's private weights\n" * 1000
    write(c.root / "a" / "w.bin", secret)
    push(c, c.root / "a", "mine", credential=alice)
    h = hashlib.blake2b(secret, digest_size=32).hexdigest()
    assert objects(c)[h] == secret
    y = read_yaml_flat(bob)
    raw = c.raw_client(y["public_key"], y["secret_key"])
    try:
        _, r, _ = raw.request("content.lack", {"contents": [{"hash": h, "size": len(secret)}]})
        assert r["lack"] == [[0, 0]] and r["bytes"] == len(secret), r
    finally:
        raw.close()
    write(c.root / "b" / "copy.bin", secret)
    d, _, _ = push(c, c.root / "b", "his", credential=bob)
    assert (d["sent_files"], d["sent_bytes"]) == (1, len(secret)), d
    assert list(objects(c)).count(h) == 1 and partials(c) == {}, partials(c)
    d, _, _ = push(c, c.root / "a", "mine", credential=alice)
    assert (d["sent_files"], d["sent_bytes"]) == (0, 0), d
    # proved, his next push of it sends nothing either
    d, _, _ = push(c, c.root / "b", "his", credential=bob)
    assert (d["sent_files"], d["sent_bytes"]) == (0, 0), d


def push_on_terminal(c, tree, name, *args):
    """`bramble data push` with its stderr on a terminal (a pty), run while the
    coordinator is stopped for 1.5 s, so that the upload takes longer than the
    second after which a progress line is shown: (rc, what the terminal got)."""
    master, slave = os.openpty()
    os.kill(c.coordinator.pid, signal.SIGSTOP)
    try:
        p = subprocess.Popen([c.bin("bramble"), "--credential", str(c.credential), "data",
                              "push", str(tree), name, *args], stdout=subprocess.DEVNULL,
                             stderr=slave, env=c.env, cwd=c.root)
        os.close(slave)
        time.sleep(1.5)  # (the premise: the upload cannot be over within its first second)
    finally:
        os.kill(c.coordinator.pid, signal.SIGCONT)
    got = b""
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:  # (EIO: the push exited, the terminal closed)
            break
        if not b:
            break
        got += b
    os.close(master)
    return p.wait(60), got.decode(errors="replace")


def test_a_slow_push_shows_its_progress_on_a_terminal_only(cluster):
    """An upload over a second shows a progress line (bytes, rate, time left) on a
    terminal, ending with a newline; with --json, or stderr not a terminal, none."""
    c = cluster
    tree = c.root / "laptop" / "slow"
    write(tree / "a.bin", blob(2 << 20, 21))
    rc, out = push_on_terminal(c, tree, "slow")
    assert rc == 0, out
    line = re.search(r"uploading: [\d.]+ of 2\.0 MiB \(\d+%\), [\d.]+ MB/s, \d+s left", out)
    assert line and "(100%)" in out and out.endswith("\n"), out
    write(tree / "b.bin", blob(2 << 20, 22))
    rc, out = push_on_terminal(c, tree, "slow", "--json")
    assert rc == 0 and "uploading" not in out, out
    write(tree / "c.bin", blob(2 << 20, 23))
    rc, _, err = c.cli("data", "push", tree, "slow")  # (stderr a pipe)
    assert rc == 0 and "uploading" not in err, err


def start_push(c, tree, name, credential=None):
    argv = [c.bin("bramble"), "--credential", str(credential or c.credential), "data", "push",
            str(tree), name, "--json"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=c.env,
                            cwd=c.root)


def stop_mid_upload(c, proc, data, what):
    """SIGSTOP proc once the store holds part (not all) of the file of bytes data (not
    of the manifest's listing, which goes first); its size then."""
    name = hashlib.blake2b(data, digest_size=32).hexdigest()
    held = {}

    def partway():
        if proc.poll() is not None:
            raise AssertionError(f"the push ended before {what}: {proc.communicate()}")
        held.update(partials(c))
        return held.get(name, 0) > 0

    wait_for(partway, what=f"part of a file stored ({what})", interval=0.002)
    proc.send_signal(signal.SIGSTOP)
    return held[name]


def test_cli_killed_mid_upload_resumes(cluster):
    c = cluster
    tree = c.root / "big"
    size = 64 << 20
    write(tree / "huge.bin", blob(size, 20))
    write(tree / "small.txt", b"small\n")
    proc = start_push(c, tree, "big")
    held = stop_mid_upload(c, proc, (tree / "huge.bin").read_bytes(), "the CLI is killed")
    assert 0 < held < size
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert c.cli_json("data", "list") == [], "a push cut off counted"
    h = hashlib.blake2b((tree / "huge.bin").read_bytes(), digest_size=32).hexdigest()
    assert h not in objects(c), "a partial file was counted whole"
    d, _, _ = push(c, tree, "big")
    assert 0 < d["sent_bytes"] <= size - held + 6, (d, held)
    assert objects(c)[h] == (tree / "huge.bin").read_bytes()
    assert partials(c) == {}


def test_coordinator_killed_mid_upload_keeps_what_it_acknowledged(cluster):
    c = cluster
    first = c.root / "first"
    for i in range(20):
        write(first / f"f{i:02}.bin", blob(5000 + i, 30 + i))
    acked, _, _ = push(c, first, "first")
    code = c.root / "code"  # a job's code: acknowledged once the job is stored
    for i in range(10):
        write(code / f"c{i:02}.py", f"print({i})\n" * (100 + i))
    write(code / "job.yaml", "name: kept\ncode: .\ncommand: python3 c00.py\n")
    job = int(c.cli("submit", code / "job.yaml")[1].strip())
    tree = c.root / "second"
    write(tree / "huge.bin", blob(48 << 20, 40))
    proc = start_push(c, tree, "second")
    stop_mid_upload(c, proc, (tree / "huge.bin").read_bytes(), "the coordinator is killed")
    c.coordinator.kill(signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    c.start_coordinator()
    listed = c.cli_json("data", "list")
    assert [(x["name"], x["tag"], x["files"]) for x in listed] == [("first", "v1", 20)]
    stored = objects(c)
    for f in sorted(first.iterdir()):
        data = f.read_bytes()
        assert stored.get(hashlib.blake2b(data, digest_size=32).hexdigest()) == data, f
    assert [j["id"] for j in c.jobs()] == [job]
    for f in sorted(code.iterdir()):
        data = f.read_bytes()
        assert stored.get(hashlib.blake2b(data, digest_size=32).hexdigest()) == data, f
    again, _, _ = push(c, first, "first")
    assert again["sent_bytes"] == 0 and again["manifest"] == acked["manifest"]
    d, _, _ = push(c, tree, "second")
    assert 0 < d["sent_bytes"] < 48 << 20, d  # went on from what the store held
    data = (tree / "huge.bin").read_bytes()
    assert objects(c)[hashlib.blake2b(data, digest_size=32).hexdigest()] == data


def manifest_text(entries):
    """A tree's manifest, its hash computed as bramble's (proto/manifest_check.c),
    over entries [(path, link, mode, size, content)], each a str or bytes."""
    def b(s):
        return s if isinstance(s, bytes) else s.encode()
    hs = hashlib.blake2b(digest_size=32)
    for s in (b"bramble-manifest-1", b"dir"):
        hs.update(s + b"\0")
    for path, link, mode, size, content in entries:
        for s in (b(path), b"l" if link else b"f", str(mode).encode(), str(size).encode(),
                  b(content)):
            hs.update(s + b"\0")
    es = [{"path": b(p).decode(), "size": size, "mode": mode, ("link" if link else "hash"):
           b(content).decode()} for p, link, mode, size, content in entries]
    m = {"hash": hs.hexdigest(), "root": "dir", "files": len(es),
         "bytes": sum(e["size"] for e in es if "hash" in e), "entries": es}
    return m, json.dumps(m).encode()


def test_a_bad_manifest_is_refused_naming_the_entry(cluster):
    """A client that sends its own listing (not the CLI's packer): a path with '..',
    an absolute path, a NUL, a name over 255 bytes, a link out of the tree. Each push
    is refused naming the entry and what was wrong, no data set is made, and the
    listing it sent leaves the store (nothing half-stored counts)."""
    c = cluster
    y = read_yaml_flat(c.credential)
    raw = c.raw_client(y["public_key"], y["secret_key"])
    body = b"x\n"
    h = hashlib.blake2b(body, digest_size=32).hexdigest()
    long_name = "n" * 300
    cases = [
        ([("../x", 0, 420, 2, h)], "'../x': not allowed: a '..' in the path"),
        ([("/etc/passwd", 0, 420, 2, h)], "'/etc/passwd': not allowed: an absolute path"),
        ([("a\0b", 0, 420, 2, h)], "'a': its path holds a NUL byte"),
        ([(long_name, 0, 420, 2, h)],
         f"'{long_name[:100]}...' (300 bytes): not allowed: a name of more than 255 bytes"),
        ([("ok/l", 1, 511, 12, "../../../etc")], "ok/l: a link out of the tree"),
    ]
    try:
        assert put_file(raw, body) is None
        for entries, said in cases:
            m, text = manifest_text(entries)
            lh = hashlib.blake2b(text, digest_size=32).hexdigest()
            assert put_file(raw, text) is None
            assert lh in objects(c)
            _, r, _ = raw.request("data.push", {
                "name": "bad", "listing": {"hash": lh, "size": len(text)},
                "manifest": {k: m[k] for k in ("hash", "root", "files", "bytes")}})
            assert r.get("errnum") and said in r.get("error", ""), (said, r)
            wait_for(lambda: lh not in objects(c),
                     what="the refused push's listing to leave the store")
        # a sound listing naming a file never sent: a submit is refused naming it
        missing = hashlib.blake2b(b"never sent\n", digest_size=32).hexdigest()
        m, text = manifest_text([("run.sh", 0, 493, 11, missing)])
        lh = hashlib.blake2b(text, digest_size=32).hexdigest()
        assert put_file(raw, text) is None
        before = len(c.jobs())
        _, r, _ = raw.request("job.submit", {
            "spec": "name: sent-nothing\ncommand: sh run.sh\n", "sets": [],
            "code": {"listing": {"hash": lh, "size": len(text)}, "dir": "/laptop/proj",
                     "manifest": {k: m[k] for k in ("hash", "root", "files", "bytes")}}})
        assert r.get("error") == "run.sh is not stored yet: send every file first", r
        assert len(c.jobs()) == before, "a submit whose code was not stored made a job"
    finally:
        raw.close()
    assert c.cli_json("data", "list") == [], "a refused push made a data set"
