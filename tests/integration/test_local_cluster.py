"""`bramble up` / `bramble down`: a whole cluster on loopback in one command."""

import http.client
import json
import os
import re
import subprocess
import urllib.parse

from conftest import BIN, CLI_TIMEOUT, pid_alive, sanitizer_lines, tail, wait_for


def test_up_and_down(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    d = tmp_path / "local"
    env = {k: v for k, v in os.environ.items()
           if k not in ("BRAMBLE_CREDENTIAL", "XDG_DATA_HOME", "XDG_CONFIG_HOME")}
    env["HOME"] = str(home)
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    bramble = str(BIN / "bramble")

    def run(*args, check=True):
        r = subprocess.run([bramble, *map(str, args)], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=CLI_TIMEOUT + 60)
        san = sanitizer_lines(r.stderr)
        assert not san, r.stderr
        if check:
            assert r.returncode == 0, (args, r.returncode, r.stdout, r.stderr)
        return r

    def logs():
        return "\n".join(f"--- {f}\n{tail(f)}" for f in sorted(d.glob("*.log")))

    pids = []
    try:
        r = run("up", "--agents", 2, "--dir", d, check=False)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{logs()}"
        # the dashboard is on by default, on a free loopback port, and said so
        shown = re.search(r"bramble dashboard .*at (http://127\.0\.0\.1:\d+)\)", r.stdout)
        assert shown, r.stdout
        cred = home / ".config" / "bramble" / "credential"
        assert cred.exists(), f"no credential at {cred}"
        assert (cred.stat().st_mode & 0o077) == 0, oct(cred.stat().st_mode)
        for pf in d.glob("*.pid"):
            pids.append(int(pf.read_text().split()[0]))
        assert len(pids) == 3, list(d.glob("*.pid"))
        assert all(pid_alive(p) for p in pids)

        nodes = json.loads(run("nodes", "--json").stdout)
        assert sorted(n["name"] for n in nodes) == ["node-1", "node-2"], nodes
        assert all(n["state"] == "ready" for n in nodes), nodes

        spec = tmp_path / "hi.yaml"
        spec.write_text("name: hi\ncommand: echo hi from $BRAMBLE_NODE_NAME\n")
        r = run("submit", spec, "--wait")
        jid = r.stdout.split()[0]
        wait_for(lambda: "hi from node-" in run("logs", jid).stdout,
                 what="the job's output in bramble logs")

        # the dashboard's login link works, at the address up printed
        link = run("dashboard").stdout.strip().splitlines()[0]
        assert link.startswith(shown.group(1) + "/login?t="), (link, shown.group(1))
        conn = http.client.HTTPConnection(*urllib.parse.urlsplit(link).netloc.split(":"))
        conn.request("GET", link[link.index("/login"):])
        resp = conn.getresponse()
        assert resp.status == 303 and "HttpOnly" in (resp.getheader("Set-Cookie") or ""), \
            (resp.status, resp.getheaders())
        conn.close()

        # a second `up` on the same dir is refused while it runs
        r = run("up", "--agents", 2, "--dir", d, check=False)
        assert r.returncode == 1, (r.stdout, r.stderr)
    finally:
        r = run("down", "--dir", d, check=False)
        down_rc = (r.returncode, r.stdout, r.stderr)
        wait_for(lambda: not any(pid_alive(p) for p in pids),
                 what="the local cluster's processes to exit after bramble down")
    assert down_rc[0] == 0, down_rc
    found = []
    for f in d.glob("*.log"):
        found += sanitizer_lines(f.read_text(errors="replace"))
    assert not found, "sanitizer reports:\n" + "\n".join(found) + "\n" + logs()
