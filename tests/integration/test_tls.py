"""TLS on the coordinator's HTTP side (docs/metrics.md, docs/dashboard.md):
`brambled --http ADDR:PORT --http-cert FILE --http-key FILE` serves /metrics and
the dashboard over HTTPS only.

A self-signed certificate and key are made with Debian's openssl for each test.
Over HTTPS, with a client that trusts that certificate: /metrics answers 200 to
a metrics token; `bramble dashboard` prints an https:// link, and the login it
makes sets a session cookie with Secure and HttpOnly. Plain HTTP to the same port
gets no answer. At start, a key file that group or others may read, a missing
file, a file that is not PEM, an encrypted key, and a certificate with another
certificate's key are each refused with a message that names the file. `brambled init` records
the certificate and key, and a later start serves HTTPS with no flags.
"""

import http.client
import re
import shutil
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import Cluster, free_port, read_yaml_flat, wait_for

OPENSSL = shutil.which("openssl")
NEEDS = "(Debian's openssl; tests/run.sh installs it via deploy/install-deps.sh)"


# ---------------------------------------------------------------------------
# helpers


def make_pair(d, name):
    """A self-signed certificate for localhost and 127.0.0.1, and its key (0600)."""
    if not OPENSSL:
        pytest.fail(f"openssl not found {NEEDS}")
    cert, key = d / f"{name}.crt", d / f"{name}.key"
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-subj", "/CN=localhost", "-days", "1",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    key.chmod(0o600)
    return cert, key


@pytest.fixture
def pair(tmp_path):
    d = tmp_path / "tls"
    d.mkdir()
    return make_pair(d, "server")


def context(cert):
    """A client context that trusts cert (and checks the host name)."""
    return ssl.create_default_context(cafile=str(cert))


def https_get(port, cert, path="/metrics", token=None):
    """(status, body) of a GET over HTTPS that trusts cert."""
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=context(cert), timeout=10) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def tls_cluster(make_cluster, pair, extra=()):
    c = make_cluster(start=False)
    port = free_port()
    cert, key = pair
    c.start_coordinator(extra=["--http", f"127.0.0.1:{port}", "--http-cert", str(cert),
                               "--http-key", str(key), *extra])
    return c, port


def metrics_token(c):
    _, out, err = c.cli("token", "create", "--metrics")
    tok = out.strip()
    assert tok.startswith("brm1."), (out, err)
    return tok


def refused(c, *flags, rc=1):
    """stderr of a brambled that must refuse to start with these flags."""
    r = subprocess.run([Cluster.bin("brambled"), "--data-dir", str(c.data), *map(str, flags)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == rc, (flags, r.returncode, r.stderr)
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
    assert "LeakSanitizer" not in r.stderr, r.stderr
    return r.stderr


# ---------------------------------------------------------------------------
# serving


def test_metrics_over_https_and_no_plain_http(make_cluster, pair):
    c, port = tls_cluster(make_cluster, pair)
    cert, _ = pair
    assert f"HTTPS on 127.0.0.1:{port}" in c.coordinator.output()
    token = metrics_token(c)

    got = {}

    def scraped():
        got["answer"] = https_get(port, cert, token=token)
        return got["answer"][0] == 200

    wait_for(scraped, what="/metrics over HTTPS to answer 200")
    assert "bramble_build_info" in got["answer"][1], got["answer"][1][:300]
    # the token rules hold over HTTPS as they do over HTTP
    assert https_get(port, cert)[0] == 401
    assert https_get(port, cert, token="brm1." + "0" * 48)[0] == 401

    # a client that does not trust the certificate refuses it
    with pytest.raises(urllib.error.URLError) as e:
        urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics",
                               context=ssl.create_default_context(), timeout=10)
    assert isinstance(e.value.reason, ssl.SSLCertVerificationError), e.value

    # plain HTTP to the same port gets no HTTP answer at all
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        with pytest.raises((http.client.HTTPException, OSError)):
            conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
            conn.getresponse().read()
    finally:
        conn.close()
    # and the coordinator still serves HTTPS after it
    assert https_get(port, cert, token=token)[0] == 200


def test_dashboard_link_is_https_and_cookie_secure(make_cluster, pair):
    c, port = tls_cluster(make_cluster, pair)
    cert, _ = pair
    _, out, err = c.cli("dashboard")
    url = out.strip()
    assert re.fullmatch(rf"https://127\.0\.0\.1:{port}/login\?t=[0-9a-f]{{64}}", url), out
    assert "HTTPS" in err, err
    assert c.cli_json("dashboard", "--json")["scheme"] == "https"

    # the link's login over HTTPS: a 303 and a cookie that is Secure and HttpOnly
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context(cert), timeout=15)
    try:
        conn.request("GET", f"{parts.path}?{parts.query}")
        r = conn.getresponse()
        r.read()
        assert r.status == 303, r.status
        cookie = r.getheader("Set-Cookie")
    finally:
        conn.close()
    attrs = [a.strip() for a in cookie.split(";")]
    assert "Secure" in attrs and "HttpOnly" in attrs and "SameSite=Strict" in attrs, cookie
    m = re.fullmatch(r"bramble_session=([0-9a-f]{64})", attrs[0])
    assert m, cookie

    # and the session works over HTTPS
    session = f"bramble_session={m.group(1)}"
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context(cert), timeout=15)
    try:
        conn.request("GET", "/", headers={"Cookie": session})
        r = conn.getresponse()
        body = r.read().decode(errors="replace")
        assert r.status == 200, (r.status, body[:300])
    finally:
        conn.close()
    csrf = re.search(r'<meta name="csrf" content="([0-9a-f]{64})">', body).group(1)

    # a POST from the page's own https:// origin passes the origin check; one that
    # claims the http:// origin of the same address does not
    def post_logout(origin):
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context(cert),
                                           timeout=15)
        try:
            conn.request("POST", "/logout", headers={
                "Cookie": session, "X-CSRF-Token": csrf, "Origin": origin,
                "Sec-Fetch-Site": "same-origin"})
            r = conn.getresponse()
            return r.status, r.getheader("Set-Cookie"), r.read().decode(errors="replace")
        finally:
            conn.close()

    status, _, body = post_logout(f"http://127.0.0.1:{port}")
    assert status == 403 and "origin" in body, (status, body)
    status, cleared, body = post_logout(f"https://127.0.0.1:{port}")
    assert status == 200, (status, body)
    assert "Max-Age=0" in cleared and "Secure" in cleared, cleared


def test_init_records_certificate_and_key(make_cluster, pair, tmp_path):
    cert, key = pair
    # `brambled init` checks the files and records them as absolute paths
    d = tmp_path / "recorded"
    port = free_port()
    r = subprocess.run([Cluster.bin("brambled"), "init", "--data-dir", str(d), "--listen",
                        f"tcp://127.0.0.1:{free_port()}", "--http", str(port),
                        "--http-cert", str(cert), "--http-key", str(key)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "with TLS" in r.stdout, (r.stdout, r.stderr)
    conf = read_yaml_flat(d / "coordinator.yaml")
    assert conf["http_cert"] == str(cert.resolve()) and conf["http_key"] == str(key.resolve()), conf

    # a data dir that records them serves HTTPS with no flags
    c = make_cluster(start=False)
    yaml = c.data / "coordinator.yaml"
    yaml.write_text(yaml.read_text() + f"http: '127.0.0.1:{port}'\n"
                    f"http_cert: '{cert.resolve()}'\nhttp_key: '{key.resolve()}'\n")
    c.start_coordinator()
    assert f"HTTPS on 127.0.0.1:{port}" in c.coordinator.output()
    token = metrics_token(c)
    wait_for(lambda: https_get(port, cert, token=token)[0] == 200,
             what="/metrics over HTTPS from the recorded certificate")

    # a data dir that records one without the other is refused
    half = make_cluster(start=False)
    yaml = half.data / "coordinator.yaml"
    yaml.write_text(yaml.read_text() + f"http_cert: '{cert.resolve()}'\n")
    err = refused(half, "--http", free_port())
    assert "http_cert and http_key go together" in err, err

    # init refuses a certificate without --http, and an open key, before it writes
    open_key = tmp_path / "open.key"
    open_key.write_bytes(key.read_bytes())
    open_key.chmod(0o640)
    for flags, words in ((["--http-cert", cert, "--http-key", key], "need --http"),
                         (["--http", free_port(), "--http-cert", cert, "--http-key",
                           open_key], f"{open_key}: permissions 0640 are too open")):
        r = subprocess.run([Cluster.bin("brambled"), "init", "--data-dir", str(tmp_path / "x"),
                            *map(str, flags)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and words in r.stderr, (r.returncode, r.stderr)
        assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------------------
# refused at start


def test_bad_certificates_are_refused_at_start(make_cluster, pair, tmp_path):
    c = make_cluster(start=False)
    cert, key = pair
    http = ["--http", f"127.0.0.1:{free_port()}"]

    # a key that group or others may read, as ssh refuses one
    open_key = tmp_path / "open.key"
    open_key.write_bytes(key.read_bytes())
    open_key.chmod(0o644)
    err = refused(c, *http, "--http-cert", cert, "--http-key", open_key)
    assert str(open_key) in err and "0644" in err and "too open" in err, err

    # a certificate with another certificate's key
    other_cert, other_key = make_pair(tmp_path / "tls", "other")
    err = refused(c, *http, "--http-cert", cert, "--http-key", other_key)
    assert str(cert) in err and str(other_key) in err and "refused" in err, err

    # a missing file, and files that are not what they should be
    missing = tmp_path / "missing.crt"
    err = refused(c, *http, "--http-cert", missing, "--http-key", key)
    assert str(missing) in err and "No such file" in err, err
    err = refused(c, *http, "--http-cert", key, "--http-key", key)
    assert f"certificate file {key}" in err and "no PEM certificate" in err, err
    not_key = tmp_path / "not.key"
    not_key.write_bytes(other_cert.read_bytes())
    not_key.chmod(0o600)
    err = refused(c, *http, "--http-cert", cert, "--http-key", not_key)
    assert f"key file {not_key}" in err and "no PEM private key" in err, err
    locked = tmp_path / "locked.key"
    subprocess.run([OPENSSL, "pkey", "-in", str(key), "-aes256", "-passout", "pass:x",
                    "-out", str(locked)], check=True, capture_output=True, timeout=60)
    locked.chmod(0o600)
    err = refused(c, *http, "--http-cert", cert, "--http-key", locked)
    assert f"key file {locked}: encrypted" in err, err
    err = refused(c, *http, "--http-cert", cert, "--http-key", tmp_path)
    assert str(tmp_path) in err and "not a regular file" in err, err

    # both or neither, and only with --http
    err = refused(c, *http, "--http-cert", cert, rc=2)
    assert "--http-cert and --http-key go together" in err, err
    err = refused(c, "--http-cert", cert, "--http-key", key, rc=2)
    assert "need --http" in err, err

    # nothing of it stops a good start afterwards
    c.start_coordinator(extra=[*http, "--http-cert", cert, "--http-key", key])
    assert "HTTPS on" in c.coordinator.output()
