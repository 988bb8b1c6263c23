"""Classes of students (docs/teaching.md, "A class of students"): `bramble class
create NAME --students N` makes users NAME-1 .. NAME-N, each with the same limits
and a credential file (mode 0600) ready to hand out; `bramble class remove NAME`
revokes them all and nothing else; `bramble class list` shows them.

- A class of 5 with --max-jobs 1: the credentials work, each student sees only
  their own jobs, a student's second job waits with the max-jobs reason, and
  `class remove` locks every student out while another user stays.
- A class whose name is taken is refused naming the user that holds it, and
  nothing is made; bad flags are refused naming what was wrong; a refusal of the
  coordinator leaves nothing that `class remove` cannot take away."""

import json
import os
import secrets
import stat

from conftest import wait_for


def submit_as(c, cred, text):
    spec = c.write_spec(text)
    _, out, _ = c.cli("submit", spec, "--json", credential=cred)
    return json.loads(out)["id"]


def user_names(c):
    return {u["name"] for u in c.cli_json("user", "list")}


def test_a_class_is_made_used_and_removed(cluster):
    c = cluster
    c.add_agents(1)
    keeper = c.root / "keeper.credential"
    c.cli("user", "add", "keeper", "--out", keeper)

    _, out, _ = c.cli("class", "create", "demo", "--students", "5", "--max-jobs", "1",
                      "--out", c.root / "demo")
    assert "class demo: made 5 student(s), demo-1 .. demo-5; limits: max-jobs 1" in out, out
    students = [f"demo-{i}" for i in range(1, 6)]
    creds = {s: c.root / "demo" / f"{s}.credential" for s in students}
    for s, cred in creds.items():
        assert stat.S_IMODE(os.stat(cred).st_mode) == 0o600, cred
    readme = (c.root / "demo" / "README.txt").read_text()
    assert "bramble --credential demo-1.credential submit" in readme, readme
    assert "max-jobs 1" in readme and "bramble --credential demo-1.credential queue" in readme

    # each student is a user with the class's limits; the class is listed
    users = {u["name"]: u for u in c.cli_json("user", "list")}
    for s in students:
        assert users[s]["kind"] == "user" and users[s]["limits"] == {"max_jobs": 1}, users
    _, out, _ = c.cli("user", "list")
    assert all(ln.split()[0] != "demo-1" or "max-jobs 1" in ln for ln in out.splitlines()), out
    classes = c.cli_json("class", "list")
    assert classes == [{"name": "demo", "students": 5, "first": "demo-1", "last": "demo-5",
                        "limits": {"max_jobs": 1}}], classes

    # the credentials work, and each student sees their own jobs only
    gate = c.root / f"gate-{secrets.token_hex(3)}"
    hold = f"command: \"while [ ! -e {gate} ]; do sleep 0.05; done\"\n"
    first = submit_as(c, creds["demo-1"], "name: first\n" + hold)
    other = submit_as(c, creds["demo-2"], "name: other\n" + hold)
    c.wait_job(first, "running")
    ids = [j["id"] for j in c.cli_json("jobs", "--all", credential=creds["demo-1"])]
    assert ids == [first], ids
    ids = [j["id"] for j in c.cli_json("jobs", "--all", credential=creds["demo-2"])]
    assert ids == [other], ids

    # max-jobs 1: demo-1's second job waits, and says why in their own queue
    second = submit_as(c, creds["demo-1"], "name: second\ncommand: \"true\"\n")
    wait_for(lambda: "max-jobs 1 (1 running)" in (c.job(second)["reason"] or ""),
             what="demo-1's second job to wait on max-jobs")
    queue = c.cli_json("queue", credential=creds["demo-1"])
    assert [e["id"] for e in queue] == [second], queue
    assert "max-jobs 1" in queue[0]["reason"], queue

    # removed: every student is locked out, their jobs cancelled, keeper stays
    _, out, _ = c.cli("class", "remove", "demo")
    assert "class demo: removed 5 student(s), demo-1 .. demo-5" in out, out
    assert "their keys are revoked" in out, out
    for s, cred in creds.items():
        rc, _, err = c.cli("jobs", credential=cred, check=False)
        assert rc == 1 and "refused" in err, (s, err)
    assert user_names(c) == {"admin", "keeper"}
    for jid in (first, other, second):
        c.wait_job(jid, "cancelled")
    rc, out, _ = c.cli("jobs", credential=keeper)
    assert rc == 0, out
    assert c.cli_json("class", "list") == []
    rc, _, err = c.cli("class", "remove", "demo", check=False)
    assert rc == 1 and "no class 'demo': no user is named demo-<number>" in err, err


def test_taken_names_and_bad_flags_are_refused(cluster):
    c = cluster
    c.cli("user", "add", "lab-2", "--out", c.root / "lab-2.credential")
    before = user_names(c)

    # a class whose name is taken: refused naming the user, nothing made
    rc, out, err = c.cli("class", "create", "lab", "--students", "3", "--out",
                         c.root / "lab", check=False)
    assert rc == 1 and "class lab exists already" in err and "lab-2" in err, (rc, out, err)
    assert "class remove lab" in err, err
    assert user_names(c) == before and not (c.root / "lab").exists()

    # bad flags: refused before anything is asked, naming what was wrong
    for args, needle in (
            (["lab3", "--students", "0"], "--students '0' (a number from 1 to 1000)"),
            (["lab3", "--students", "x"], "--students 'x'"),
            (["lab3"], "--students N"),
            (["lab3", "--students", "2", "--max-jobs", "1.5"], "--max-jobs '1.5'"),
            (["lab3", "--students", "2", "--bogus"], "--bogus"),
            (["Lab3", "--students", "2"], "class name 'Lab3'"),
            (["l" * 61, "--students", "10"], "is too long"),
            (["lab3", "--students", "2", "--endpoint", "gw"], "tcp://HOST:PORT"),
            ([], "NAME")):
        rc, out, err = c.cli("class", "create", *args, check=False)
        assert rc == 2 and needle in err, (args, rc, out, err)
    rc, _, err = c.cli("class", "remove", "lab", "--jobs", "keep", check=False)
    assert rc == 2 and "--jobs takes 'cancel' or 'admin', not 'keep'" in err, err
    assert user_names(c) == before

    # a limit the coordinator refuses: said, and nothing is made
    rc, out, err = c.cli("class", "create", "lab4", "--students", "3", "--share", "0",
                         "--out", c.root / "lab4", check=False)
    assert rc == 1 and "lab4-1: share must be a number from 0.001" in err, (rc, out, err)
    assert "no student was made" in err, err
    assert user_names(c) == before

    # a failure midway (a folder where a credential goes): said, with the students
    # made so far, and class remove takes them all away
    mid = c.root / "mid"
    (mid / "mid-3.credential").mkdir(parents=True)
    rc, out, err = c.cli("class", "create", "mid", "--students", "5", "--out", mid,
                         check=False)
    assert rc == 1 and "mid-3 was made, but its credential could not be written" in err, err
    made = user_names(c) - before
    assert {"mid-1", "mid-2", "mid-3"} <= made, made
    assert f"made so far: {len(made)} of the 5 students (mid-1 .. " in err, err
    assert "'bramble class remove mid' removes them" in err, err
    assert not (mid / "README.txt").exists()
    _, out, _ = c.cli("class", "remove", "mid")
    assert f"removed {len(made)} student(s)" in out, out
    assert user_names(c) == before

    # only the admin manages classes
    cred = c.root / "lab-2.credential"
    for args in (["class", "create", "x", "--students", "2"], ["class", "remove", "lab"],
                 ["class", "list"]):
        rc, _, err = c.cli(*args, credential=cred, check=False)
        assert rc == 1 and "not allowed" in err, (args, err)
    assert user_names(c) == before
