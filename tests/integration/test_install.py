"""Deployment: deploy/install.sh into a scratch root, the systemd units
(systemd-analyze verify), deploy/join.sh against a live coordinator, cloud-init,
and the .deb that cpack builds (its contents listed here, and installed for real
with dpkg inside a throw-away overlay of /, so this machine's / is never touched).

Nothing here installs into / or talks to the running systemd.

The package tests need a Release build without sanitizers. They reuse the build
dir $BRAMBLE_RELEASE_BUILD when set (it is built incrementally and packaged into a
tmp dir); otherwise they configure and build one once per pytest session in a tmp
dir (a few seconds to a minute on 2 cores: well within the suite's budget). They
are not marked slow on purpose: tests/run.sh runs them with the rest.
"""

import filecmp
import os
import re
import shutil
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import BIN, REPO, pid_alive, sanitizer_lines, wait_for

DEPLOY = REPO / "deploy"
INSTALL_SH = DEPLOY / "install.sh"
JOIN_SH = DEPLOY / "join.sh"
UNITS = ("brambled.service", "bramble-agent.service")
BINARIES = ("brambled", "bramble-agent", "bramble")
SCRIPT_TIMEOUT = 120
BUILD_TIMEOUT = 900
IS_ROOT = os.geteuid() == 0

# the runtime libraries the package must depend on (Debian 12 / Raspberry Pi OS names)
RUNTIME_DEPENDS = ("libzmq5", "libsodium23", "libsqlite3-0", "libyaml-0-2", "libjansson4",
                   "libmicrohttpd12")


def run(argv, check=True, timeout=SCRIPT_TIMEOUT, **kw):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                       timeout=timeout, **kw)
    if check:
        assert r.returncode == 0, (f"`{' '.join(map(str, argv))}` exited {r.returncode}\n"
                                   f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def install_sh(destdir, *extra, check=True):
    return run(["bash", INSTALL_SH, "--destdir", destdir, "--build", BIN.parent,
                "--no-systemd", *extra], check=check)


def doc_files():
    """The docs install.sh and the package ship: README.md, SECURITY.md, docs/**,
    PROTOCOL.md and examples/** (as examples/...)."""
    files = ["README.md", "SECURITY.md", "PROTOCOL.md"]
    files += sorted(str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*")
                    if p.is_file())
    files += sorted("examples/" + str(p.relative_to(REPO / "examples"))
                    for p in (REPO / "examples").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    return files


def probe_binaries(bindir):
    """The probes a build holds: bramble-net-probe always, bramble-nccl-probe where
    CUDA and NCCL were found."""
    return [b for b in ("bramble-net-probe", "bramble-nccl-probe") if (bindir / b).exists()]


def broken_links(docdir):
    """Relative links of the installed Markdown files that lead nowhere there."""
    bad = []
    for md in docdir.rglob("*.md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", md.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            if not (md.parent / target).exists():
                bad.append(f"{md.relative_to(docdir)}: {target}")
    return bad


def passwd_entry(passwd, name):
    for line in Path(passwd).read_text().splitlines():
        f = line.split(":")
        if f[0] == name:
            return f
    return None


# ---------------------------------------------------------------------------
# deploy/install.sh


def check_layout(root, prefix="/usr"):
    """The files install.sh lays out under root (see its header)."""
    p = Path(str(root) + prefix)
    probes = probe_binaries(BIN)
    assert "bramble-net-probe" in probes, f"{BIN} has no bramble-net-probe"
    for b in list(BINARIES) + probes:
        f = p / "bin" / b
        assert f.is_file(), f"{f} missing"
        assert mode(f) == 0o755 and os.access(f, os.X_OK), f"{f}: mode {mode(f):o}"
        assert filecmp.cmp(f, BIN / b, shallow=False), f"{f} differs from the build's"
    for u in UNITS:
        f = root / "lib/systemd/system" / u
        assert f.is_file(), f"{f} missing"
        assert mode(f) == 0o644, f"{f}: mode {mode(f):o}"
        text = f.read_text()
        execs = re.findall(r"^ExecStart=(\S+)", text, re.M)
        assert execs == [f"{prefix}/bin/{u.split('.')[0]}"], execs
    sysusers = root / "usr/lib/sysusers.d/bramble.conf"
    assert sysusers.is_file() and mode(sysusers) == 0o644
    entries = [ln.split()[:2] for ln in sysusers.read_text().splitlines()
               if ln.strip() and not ln.startswith("#")]
    assert entries == [["u", "bramble"], ["u", "bramble-job"]], entries
    doc = p / "share/doc/bramble"
    for name in doc_files():
        assert (doc / name).is_file(), f"{doc / name} missing"
        assert mode(doc / name) == 0o644
    assert (doc / "install.md").is_file()
    assert (doc / "examples/hello.yaml").is_file()
    assert not broken_links(doc), broken_links(doc)
    for d in ("bramble", "bramble-agent"):
        f = root / "var/lib" / d
        assert f.is_dir(), f"{f} missing"
        assert mode(f) == 0o700, f"{f}: mode {mode(f):o}, want 0700"
    if IS_ROOT:
        assert os.stat(root / "var/lib/bramble-agent").st_uid == 0


def test_install_sh_lays_out_a_scratch_root(tmp_path):
    root = tmp_path / "root"
    r = install_sh(root)
    check_layout(root)
    # no /etc/passwd in the scratch root: the users are left to systemd-sysusers
    assert not (root / "etc").exists()
    assert "sysusers.d/bramble.conf" in r.stdout
    # and it prints the next steps
    for step in ("brambled init", "systemctl enable --now brambled", "token create",
                 "join.sh", "bramble-agent --data-dir /var/lib/bramble-agent --join"):
        assert step in r.stdout, f"next steps do not mention {step!r}:\n{r.stdout}"

    # again, over the first install (a kept data file stays)
    (root / "var/lib/bramble/keep").write_text("data")
    (root / "var/lib/bramble").chmod(0o755)
    install_sh(root)
    check_layout(root)
    assert (root / "var/lib/bramble/keep").read_text() == "data"


def test_install_sh_prefix_and_usage(tmp_path):
    root = tmp_path / "root"
    install_sh(root, "--prefix", "/usr/local")
    check_layout(root, prefix="/usr/local")
    assert not (root / "usr/bin").exists()

    r = run(["bash", INSTALL_SH, "--bogus"], check=False)
    assert r.returncode == 2 and "unknown argument" in r.stderr, r
    r = run(["bash", INSTALL_SH, "--destdir", tmp_path / "x", "--build", tmp_path / "nobuild"],
            check=False)
    assert r.returncode == 1 and "build first" in r.stderr, r


@pytest.mark.skipif(not IS_ROOT, reason="useradd --root needs root")
def test_install_sh_creates_users_in_a_scratch_root(tmp_path):
    real_passwd = Path("/etc/passwd").read_text()
    root = tmp_path / "root"
    etc = root / "etc"
    etc.mkdir(parents=True)
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (etc / "group").write_text("root:x:0:\n")
    (etc / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (etc / "gshadow").write_text("root:*::\n")
    for f in ("shadow", "gshadow"):
        (etc / f).chmod(0o640)
    install_sh(root)
    install_sh(root)  # idempotent: no second entry
    check_layout(root)
    text = (etc / "passwd").read_text()
    for name in ("bramble", "bramble-job"):
        assert text.count(f"\n{name}:") == 1, text
        e = passwd_entry(etc / "passwd", name)
        assert e[5] == "/nonexistent" and e[6] == "/usr/sbin/nologin", e
        assert int(e[2]) < 1000, f"{name} is not a system user: {e}"
        assert passwd_entry(etc / "group", name), f"no group {name}"
    # the coordinator's data dir belongs to bramble, the agent's to root
    uid = int(passwd_entry(etc / "passwd", "bramble")[2])
    gid = int(passwd_entry(etc / "group", "bramble")[2])
    st = os.stat(root / "var/lib/bramble")
    assert (st.st_uid, st.st_gid) == (uid, gid)
    # nothing leaked into the real /etc
    assert Path("/etc/passwd").read_text() == real_passwd


# ---------------------------------------------------------------------------
# the units


def unit_text(name):
    return (DEPLOY / "systemd" / name).read_text()


def unit_settings(name):
    """{key: [values]} of the [Service] section."""
    out, section = {}, None
    for line in unit_text(name).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
            continue
        k, _, v = line.partition("=")
        out.setdefault(f"{section}{k}", []).append(v)
    return out


def test_units_say_what_is_documented():
    d = unit_settings("brambled.service")
    s = "[Service]"
    assert d[s + "ExecStart"] == ["/usr/bin/brambled --data-dir /var/lib/bramble"]
    assert d[s + "User"] == ["bramble"] and d[s + "StateDirectory"] == ["bramble"]
    assert d[s + "StateDirectoryMode"] == ["0700"]
    for k, v in {"Type": "simple", "Restart": "on-failure", "RestartSec": "2",
                 "ProtectSystem": "strict", "ProtectHome": "true", "PrivateTmp": "true",
                 "NoNewPrivileges": "true", "ProtectKernelTunables": "true",
                 "ProtectKernelModules": "true", "ProtectControlGroups": "true",
                 "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
                 "LockPersonality": "true", "MemoryDenyWriteExecute": "true",
                 "RestrictRealtime": "true", "SystemCallArchitectures": "native",
                 "CapabilityBoundingSet": ""}.items():
        assert d.get(s + k) == [v], f"brambled.service: {k}={d.get(s + k)}, want {v!r}"

    a = unit_settings("bramble-agent.service")
    assert a[s + "ExecStart"] == [
        "/usr/bin/bramble-agent --data-dir /var/lib/bramble-agent --job-uids 70000-79999 "
        "--job-user bramble-job"]
    assert "--join" not in a[s + "ExecStart"][0]
    assert a.get(s + "User", ["root"]) == ["root"]
    assert a[s + "StateDirectory"] == ["bramble-agent"]
    assert a[s + "StateDirectoryMode"] == ["0700"]
    for k, v in {"Type": "simple", "Restart": "on-failure", "RestartSec": "1",
                 "KillMode": "process", "RestartKillSignal": "SIGUSR2",
                 "Delegate": "yes"}.items():
        assert a.get(s + k) == [v], f"bramble-agent.service: {k}={a.get(s + k)}, want {v!r}"
    # what would stop jobs from running as another user, on GPUs, with JITs
    for k in ("NoNewPrivileges", "PrivateDevices", "DevicePolicy", "DeviceAllow",
              "CapabilityBoundingSet", "MemoryDenyWriteExecute", "ProtectHome",
              "PrivateTmp", "ProtectKernelModules", "ProtectClock", "RestrictSUIDSGID",
              "SystemCallFilter", "RestrictAddressFamilies", "RestrictNamespaces",
              "ProtectHostname"):
        assert s + k not in a, f"bramble-agent.service must not set {k} (jobs need it)"
    assert a[s + "ProtectSystem"] != ["strict"]


def test_systemd_analyze_verify_accepts_the_units(tmp_path):
    exe = shutil.which("systemd-analyze")
    if not exe:
        pytest.skip("systemd-analyze not found: it is in Debian's `systemd` package "
                    "(tests/run.sh installs it via deploy/install-deps.sh)")
    # verify checks that ExecStart= exists: point it at the built binaries
    paths = []
    for u in UNITS:
        text = unit_text(u)
        for b in BINARIES:
            text = text.replace(f"/usr/bin/{b} ", f"{BIN / b} ")
        p = tmp_path / u
        p.write_text(text)
        paths.append(p)
    r = run([exe, "verify", "--man=no", *paths], check=False)
    ours = [ln for ln in (r.stdout + r.stderr).splitlines()
            if any(u in ln for u in UNITS)]
    assert r.returncode == 0 and not ours, (
        f"systemd-analyze verify exited {r.returncode}:\n{r.stdout}{r.stderr}")

    # hardening as systemd scores it (offline scoring: systemd >= 250)
    r = run([exe, "security", "--offline=true", "--no-pager", paths[0]], check=False)
    m = re.search(r"Overall exposure level for brambled\.service: ([0-9.]+)", r.stdout)
    if m:
        assert float(m.group(1)) <= 2.5, f"brambled.service is exposed:\n{r.stdout}"


# ---------------------------------------------------------------------------
# deploy/join.sh and cloud-init


def join_sh(cluster, data, token, *agent_flags, check=False):
    r = run(["bash", JOIN_SH, "--no-install", "--no-enable", "--agent", BIN / "bramble-agent",
             "--data-dir", data, "--timeout", "60", token, *agent_flags],
            check=check, env=cluster.env, cwd=cluster.root)
    log = cluster.log_path("join-sh")
    log.write_text(f"rc {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")
    cluster.extra_logs.append(log)  # teardown scans it for sanitizer reports
    assert not sanitizer_lines(r.stderr), r.stderr
    return r


def agents_running_with(data):
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(data).encode() in argv and pid_alive(int(d)):
            found.append(int(d))
    return found


def test_join_sh_joins_once_then_the_unit_way_runs(cluster):
    data = cluster.agent_dir("joined")
    token = cluster.token(1)
    r = join_sh(cluster, data, token, "--name", "joined", "--label", "site=test")
    assert r.returncode == 0, r.stderr
    assert "joined" in r.stderr
    cred = data / "credential"
    assert cred.is_file() and mode(cred) == 0o600
    # the agent it ran for the join is stopped again
    wait_for(lambda: not agents_running_with(data), what="the joining agent to stop")
    assert "joined" in cluster.nodes()

    # again: the data dir has joined, no second join (the one-use token is spent)
    r = join_sh(cluster, data, token)
    assert r.returncode == 0, r.stderr
    assert "already" in r.stderr

    # what bramble-agent.service does from now on: --data-dir alone
    cluster.start_agent("joined", join=False)
    cluster.wait_ready("joined")
    assert cluster.nodes()["joined"]["labels"] == {"site": "test"}


def test_join_sh_reports_a_refused_token(cluster):
    token = cluster.token(1)
    cluster.start_agent("first", token=token)  # uses the token up
    cluster.wait_ready("first")
    data = cluster.agent_dir("second")
    r = join_sh(cluster, data, token, "--name", "second")
    assert r.returncode == 1, r.stderr
    assert "join failed" in r.stderr and "refused" in r.stderr, r.stderr
    assert not (data / "credential").exists()
    assert not agents_running_with(data)

    r = run(["bash", JOIN_SH], check=False)
    assert r.returncode == 2 and "TOKEN is missing" in r.stderr


def test_cloud_init_writes_the_token_and_runs_join():
    text = (DEPLOY / "cloud-init.yaml").read_text()
    assert text.startswith("#cloud-config\n")
    try:
        import yaml
    except ImportError:
        pytest.skip("python3-yaml is not installed: cloud-init.yaml not parsed")
    doc = yaml.safe_load(text)
    files = {f["path"]: f for f in doc["write_files"]}
    tok = files["/etc/bramble/join-token"]
    assert tok["permissions"] == "0600" and tok["owner"] == "root:root"
    script = files["/usr/local/sbin/bramble-cloud-join"]
    assert script["permissions"] == "0700"
    body = script["content"]
    assert body.startswith("#!/bin/sh\n")
    assert "join.sh" in body and "--deb" in body and "/etc/bramble/join-token" in body
    assert any("/usr/local/sbin/bramble-cloud-join" in str(c) for c in doc["runcmd"])
    r = subprocess.run(["sh", "-n"], input=body, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if shutil.which("shellcheck"):
        r = subprocess.run(["shellcheck", "-s", "sh", "-"], input=body, capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_scripts_parse_and_pass_shellcheck():
    scripts = {DEPLOY / "install.sh": "bash", DEPLOY / "join.sh": "bash",
               DEPLOY / "quickstart.sh": "bash",
               DEPLOY / "debian/postinst": "sh", DEPLOY / "debian/prerm": "sh"}
    for path, shell in scripts.items():
        assert os.access(path, os.X_OK), f"{path} is not executable"
        run([shell, "-n", path])
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed: only `sh -n` / `bash -n` checked")
    run(["shellcheck", "-x", *scripts, DEPLOY / "install-deps.sh"], cwd=REPO)


def test_install_deps_sees_multiarch_packages_as_installed(tmp_path):
    """With a foreign architecture, dpkg-query prints one status per instance
    (libsodium-dev:amd64 and :arm64); they must not read as missing, or every run
    does apt-get update."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "apt-calls"
    (fake / "dpkg-query").write_text(
        "#!/usr/bin/python3\n"
        "import sys\n"
        "fmt = next(a[3:] for a in sys.argv if a.startswith('-f='))\n"
        "if sys.argv[-1] == 'missing-pkg':\n"
        "    sys.exit(1)\n"
        "for arch in ('amd64', 'arm64'):\n"
        "    sys.stdout.write(fmt.replace('${db:Status-Status}', 'installed')\n"
        "                     .replace('${Architecture}', arch).replace(chr(92) + 'n',\n"
        "                                                               chr(10)))\n")
    (fake / "dpkg").write_text("#!/bin/sh\necho amd64\n")
    for tool in ("apt-get", "sudo"):
        (fake / tool).write_text(f"#!/bin/sh\necho \"$*\" >>{calls}\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    script = f". {DEPLOY / 'install-deps.sh'}; br_install_deps libsodium-dev libzmq3-dev"
    r = run(["bash", "-c", script], env=env)
    assert not calls.exists(), f"apt-get ran for installed packages: {calls.read_text()}"
    r = run(["bash", "-c", script + " missing-pkg"], env=env)
    assert "missing-pkg" in calls.read_text() and "libsodium" not in calls.read_text(), \
        (calls.read_text(), r.stderr)


def test_quickstart_kills_only_its_own_clusters_node(tmp_path):
    """The quickstart's node kill takes this cluster's agent and the processes below
    it, not another local cluster's processes of a node with the same name."""
    fns = run(["sed", "-n", r"/^descendants() {/,/^}/p;/^kill_node() {/,/^}/p",
               DEPLOY / "quickstart.sh"]).stdout
    assert "kill_node()" in fns
    ours = subprocess.Popen(["bash", "-c", "BRAMBLE_TASK=node-1/1.1.0 sleep 600 & wait"])
    theirs = subprocess.Popen(["env", "BRAMBLE_TASK=node-1/1.1.0", "sleep", "600"])
    try:
        def our_job():
            kids = [p for p in os.listdir("/proc") if p.isdigit() and pid_alive(int(p))
                    and open(f"/proc/{p}/stat").read().split(") ")[1].split()[1]
                    == str(ours.pid)]
            return kids[0] if kids else None

        job = int(wait_for(our_job, what="the fake agent's job to start"))
        cluster = tmp_path / "cluster"
        cluster.mkdir()
        (cluster / "node-1.pid").write_text(f"{ours.pid}\n")
        run(["bash", "-c", f"{fns}\nCLUSTER_DIR={cluster}\nkill_node node-1"])
        ours.wait(timeout=30)
        wait_for(lambda: not pid_alive(job), what="the node's job to die")
        assert theirs.poll() is None, "another cluster's process was killed"
    finally:
        for p in (ours, theirs):
            if p.poll() is None:
                p.kill()
                p.wait()


# ---------------------------------------------------------------------------
# the .deb (cpack -G DEB)


def deb_arch():
    r = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True)
    return r.stdout.strip()


@pytest.fixture(scope="session")
def release_build(tmp_path_factory):
    """A Release build dir without sanitizers: $BRAMBLE_RELEASE_BUILD, or one built
    once per session in a tmp dir."""
    for tool in ("cmake", "cpack", "dpkg-deb", "dpkg"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} not found: the .deb cannot be built or read here "
                        "(Debian packages cmake, dpkg-dev)")
    jobs = os.environ.get("JOBS") or str(os.cpu_count() or 2)
    given = os.environ.get("BRAMBLE_RELEASE_BUILD")
    if given:
        build = Path(given).resolve()
        assert (build / "CMakeCache.txt").is_file(), \
            f"BRAMBLE_RELEASE_BUILD={given} is not a configured build dir"
    else:
        build = tmp_path_factory.mktemp("release-build")
        run(["cmake", "-S", REPO, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
             "-DBRAMBLE_TESTS=OFF", "-DBRAMBLE_SANITIZE=OFF", "-DBRAMBLE_FUZZ=OFF"],
            timeout=BUILD_TIMEOUT)
    run(["cmake", "--build", build, "-j", jobs], timeout=BUILD_TIMEOUT)
    assert (build / "CPackConfig.cmake").is_file(), f"{build}: no CPackConfig.cmake"
    return build


@pytest.fixture(scope="session")
def deb(release_build, tmp_path_factory):
    out = tmp_path_factory.mktemp("packages")
    r = run(["cpack", "-G", "DEB", "-B", out], cwd=release_build, timeout=BUILD_TIMEOUT)
    version = re.search(r"set\(CPACK_PACKAGE_VERSION \"([^\"]+)\"",
                        (release_build / "CPackConfig.cmake").read_text()).group(1)
    path = out / f"bramble_{version}_{deb_arch()}.deb"
    assert path.is_file(), f"no {path.name} in {sorted(os.listdir(out))}:\n{r.stdout}"
    return path


def test_deb_contents(deb):
    r = run(["dpkg-deb", "-c", deb])
    print(r.stdout)  # the package's contents, in the test's output
    listed = {}
    for line in r.stdout.splitlines():
        f = line.split()
        listed[f[-1]] = (f[0], f[1])
    expected = [f"./usr/bin/{b}" for b in list(BINARIES) + ["bramble-net-probe"]]
    expected += [f"./usr/lib/systemd/system/{u}" for u in UNITS]
    expected += ["./usr/lib/sysusers.d/bramble.conf"]
    expected += [f"./usr/share/doc/bramble/{d}" for d in doc_files()]
    missing = [p for p in expected if p not in listed]
    assert not missing, f"not in {deb.name}: {missing}\n{r.stdout}"
    assert "./usr/share/doc/bramble/install.md" in listed
    for b in BINARIES:
        assert listed[f"./usr/bin/{b}"] == ("-rwxr-xr-x", "root/root"), listed[f"./usr/bin/{b}"]
    for u in UNITS:
        assert listed[f"./usr/lib/systemd/system/{u}"][0] == "-rw-r--r--"

    # the packaged units run the packaged binaries
    x = deb.parent / "extract"
    run(["dpkg-deb", "-x", deb, x])
    for u in UNITS:
        text = (x / "usr/lib/systemd/system" / u).read_text()
        assert f"ExecStart=/usr/bin/{u.split('.')[0]} " in text, text


def test_deb_and_install_sh_install_the_same_files(deb, release_build, tmp_path):
    """One list of files, two ways to install them: the .deb and install.sh put the
    same files (the same bytes, but for stripping) under /usr."""
    x = tmp_path / "deb"
    run(["dpkg-deb", "-x", deb, x])
    root = tmp_path / "root"
    run(["bash", INSTALL_SH, "--destdir", root, "--build", release_build, "--no-systemd",
         "--no-users"])

    def files(top, unit_dir):
        out = set()
        for f in top.rglob("*"):
            if f.is_file():
                rel = str(f.relative_to(top))
                out.add(rel.replace(unit_dir, "UNITS/"))
        return {f for f in out if not f.startswith("var/")}

    from_deb = files(x, "usr/lib/systemd/system/")
    from_sh = files(root, "lib/systemd/system/")
    assert from_deb == from_sh, (f"only in the .deb: {sorted(from_deb - from_sh)}; "
                                 f"only from install.sh: {sorted(from_sh - from_deb)}")
    doc = x / "usr/share/doc/bramble"
    assert not broken_links(doc), broken_links(doc)
    for f in from_deb:
        if f.startswith("usr/share/doc/"):
            assert (x / f).read_bytes() == (root / f).read_bytes(), f"{f} differs"


def test_deb_control_and_depends(deb):
    r = run(["dpkg-deb", "-I", deb])
    print(r.stdout)
    fields = dict(re.findall(r"^ ([A-Za-z-]+): (.*)$", r.stdout, re.M))
    assert fields["Package"] == "bramble"
    assert fields["Architecture"] == deb_arch()
    depends = [d.strip().split()[0] for d in fields["Depends"].split(",")]
    for lib in RUNTIME_DEPENDS:
        assert lib in depends, f"Depends lacks {lib}: {fields['Depends']}"
    for script in ("postinst", "prerm"):
        assert re.search(rf"^\s+\d+ bytes,\s+\d+ lines\s+\*\s+{script}\s", r.stdout, re.M), \
            f"no executable {script} in the control archive:\n{r.stdout}"


# Installs the .deb with dpkg in a private mount namespace in which /etc, /var and
# /usr are overlays whose writes land in UP (a tmp dir), and /run/systemd is hidden
# (postinst then leaves systemd alone): the real / is never written. Refuses (exit
# 77) unless a probe file shows that writes really go to the overlays.
DPKG_IN_OVERLAY = textwrap.dedent(r"""
    set -eu
    UP=$1; DEB=$2
    for d in etc var usr; do
        mkdir -p "$UP/up-$d" "$UP/work-$d"
        mount -t overlay overlay \
            -o "lowerdir=/$d,upperdir=$UP/up-$d,workdir=$UP/work-$d" "/$d" || exit 77
        touch "/$d/.bramble-overlay-probe"
        [ -e "$UP/up-$d/.bramble-overlay-probe" ] || exit 77
        rm "/$d/.bramble-overlay-probe"
    done
    if [ -d /run/systemd ]; then mount -t tmpfs tmpfs /run/systemd || exit 77; fi
    echo "== install"
    dpkg -i "$DEB"
    echo "== reinstall (the upgrade path of prerm and postinst)"
    dpkg -i "$DEB"
    echo "== state"
    getent passwd bramble bramble-job
    stat -c 'dir %n %U %G %a' /var/lib/bramble /var/lib/bramble-agent
    for b in brambled bramble-agent bramble; do "/usr/bin/$b" --help >/dev/null && echo "runs $b"; done
    if command -v systemd-analyze >/dev/null; then
        systemd-analyze verify --man=no /usr/lib/systemd/system/brambled.service \
            /usr/lib/systemd/system/bramble-agent.service 2>&1 && echo "verify ok"
    fi
    echo "== remove"
    dpkg -r bramble
    [ -e /usr/bin/brambled ] || echo "removed brambled"
    [ -d /var/lib/bramble ] && echo "kept /var/lib/bramble"
""")


def test_deb_installs_and_removes_in_an_overlay(deb, tmp_path):
    if not IS_ROOT or not shutil.which("unshare"):
        pytest.skip("installing the .deb in a private overlay of / needs root and unshare")
    real = {p: (Path(p).read_text() if p.startswith("/etc") else Path(p).exists())
            for p in ("/etc/passwd", "/etc/group", "/usr/bin/brambled", "/var/lib/bramble",
                      "/var/lib/bramble-agent", "/usr/lib/systemd/system/brambled.service")}
    script = tmp_path / "dpkg-in-overlay.sh"
    script.write_text(DPKG_IN_OVERLAY)
    up = tmp_path / "overlay"
    up.mkdir()
    r = run(["unshare", "--mount", "--propagation", "private", "sh", script, up, deb],
            check=False, timeout=300)
    if r.returncode == 77:
        pytest.skip(f"no overlay mounts here (container?): {r.stderr.strip()}")
    out = r.stdout
    assert r.returncode == 0, f"dpkg in the overlay failed ({r.returncode}):\n{out}\n{r.stderr}"
    users = {ln.split(":")[0]: ln.split(":") for ln in out.splitlines() if ln.count(":") == 6}
    for name in ("bramble", "bramble-job"):
        assert name in users, f"postinst did not create {name}:\n{out}\n{r.stderr}"
        assert users[name][6] == "/usr/sbin/nologin", users[name]
    assert "dir /var/lib/bramble bramble bramble 700" in out, out
    assert "dir /var/lib/bramble-agent root root 700" in out, out
    for b in BINARIES:
        assert f"runs {b}" in out, out
    if shutil.which("systemd-analyze"):
        assert "verify ok" in out, out
    assert "removed brambled" in out and "kept /var/lib/bramble" in out, out
    # and the real system is as it was
    for p, before in real.items():
        now = Path(p).read_text() if p.startswith("/etc") else Path(p).exists()
        assert now == before, f"{p} changed outside the overlay"
