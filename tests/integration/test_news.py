"""News instead of polling (PROTOCOL.md `event.watch`): a client that watches hears
of every event it may see right after the coordinator stores it, hears nothing of
other users' jobs, is refused jobs it may not see; `events -f` prints a job's events
as they happen; and `submit --wait` still returns when its job ends after the
coordinator restarted in the middle (the restart forgot every watch; the CLI's
renewal brings it back)."""

import json
import subprocess
import threading
import time

from conftest import (DEADLINE, KIND_EVENT, KIND_RESPONSE, header, parse_header,
                      read_yaml_flat, wait_for)


def news_until_response(client, seq):
    """The event.news messages that arrive before the response to request seq."""
    news = []
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        msg = client.recv(deadline - time.monotonic())
        if msg is None:
            continue
        h = parse_header(msg[0])
        if h and h["kind"] == KIND_RESPONSE and h["seq"] == seq:
            return news
        if h and h["kind"] == KIND_EVENT and h["type"] == "event.news":
            news.append(json.loads(msg[1]))
    raise AssertionError(f"no response to seq {seq}")


def wait_news(client, job):
    def got():
        msg = client.recv(0.2)
        if msg is None:
            return None
        h = parse_header(msg[0])
        return h and h["kind"] == KIND_EVENT and h["type"] == "event.news" and \
            json.loads(msg[1]) == {"job": job}
    wait_for(got, what=f"event.news for job {job}")


def test_watchers_hear_what_they_may_see(cluster, tmp_path):
    cluster.add_agents(1)
    cred = tmp_path / "alice.credential"
    cluster.cli("user", "add", "alice", "--out", cred)
    keys = read_yaml_flat(cred)
    admin = cluster.raw_client()
    alice = cluster.raw_client(keys["public_key"], keys["secret_key"])
    try:
        _, body, _ = admin.request("event.watch", {"job": 0})
        assert body == {"ttl_ms": 30000}, body
        _, body, _ = alice.request("event.watch", {"job": 0})
        assert body == {"ttl_ms": 30000}, body

        jid = cluster.submit("name: admins\ncommand: echo hi\n")
        wait_news(admin, 0)
        cluster.wait_job(jid)
        # alice may not watch the admin's job, nor ask for logs of every job
        h, body, _ = alice.request("event.watch", {"job": jid})
        assert h["type"] == "event.watch" and "no job" in json.dumps(body), body
        _, body, _ = alice.request("event.watch", {"job": 0, "logs": True})
        assert "logs needs one job" in json.dumps(body), body
        _, body, _ = alice.request("event.watch", {"job": -3})
        assert "job must be an id" in json.dumps(body), body
        # everything the admin's job did was flushed before this ping is read:
        # alice heard none of it
        alice.seq += 1
        alice.send([header("ping", alice.seq), b"{}"])
        assert news_until_response(alice, alice.seq) == []

        # her own job: she hears of it
        rc, out, err = cluster.cli("submit", cluster.write_spec("name: hers\ncommand: true\n",
                                                                "hers.yaml"),
                                   "--json", credential=cred)
        mine = json.loads(out)["id"]
        wait_news(alice, 0)
        cluster.wait_job(mine)
    finally:
        admin.close()
        alice.close()


def test_events_follow_prints_as_it_happens(cluster):
    cluster.add_agents(1)
    jid = cluster.submit("name: followed\ncommand: 'sleep 0.3; exit 2'\n")
    p = subprocess.Popen([cluster.bin("bramble"), "--credential", str(cluster.credential),
                          "events", "-f", "--job", str(jid)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=cluster.env)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(p.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("failed" in line.split() for line in list(lines)),
                 what="events -f to print the job's end")
    finally:
        p.terminate()
        p.wait(10)
        reader.join(10)
    text = "".join(lines)
    assert "running" in text and "failed" in text, text


def test_submit_wait_outlives_a_coordinator_restart(cluster, tmp_path):
    cluster.add_agents(1)
    go = tmp_path / "go"
    spec = cluster.write_spec(f"name: restart-wait\ncommand: 'while [ ! -e {go} ]; do "
                              f"sleep 0.05; done'\n", "restart.yaml")
    p = subprocess.Popen([cluster.bin("bramble"), "--credential", str(cluster.credential),
                          "submit", str(spec), "--wait"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=cluster.env)
    try:
        wait_for(lambda: any(j["name"] == "restart-wait" and j["state"] == "running"
                             for j in cluster.jobs()), what="the job to run")
        cluster.coordinator.kill()
        cluster.start_coordinator()
        go.write_text("")
        out, err = p.communicate(timeout=DEADLINE)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert p.returncode == 0, (out, err)
