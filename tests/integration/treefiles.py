"""Trees of files for the tests of files that travel (code, data sets, outputs):
writing files, bytes that compress badly, and agents that cannot see the
submitting machine's directory.

    c.start_agent(name, wrap=hidden(laptop))   # laptop: an empty tmpfs for it
    c, laptop, names = laptop_cluster(make_cluster, tmp_path, n=2)
"""
import hashlib


def write(path, data):
    """Write data (str or bytes) to path, its directories made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)


def blob(n, seed):
    """n bytes that differ with seed (and compress badly)."""
    out = bytearray()
    h = hashlib.blake2b(str(seed).encode(), digest_size=64).digest()
    while len(out) < n:
        h = hashlib.blake2b(h, digest_size=64).digest()
        out += h
    return bytes(out[:n])


def hidden(laptop, *more):
    """wrap= argv: the agent (and its jobs) in a mount namespace where laptop, and
    each of more (the coordinator's data dir, its content store within: no disk
    shared with the coordinator either), is an empty tmpfs."""
    mounts = " && ".join(f'mount -t tmpfs none "{d}"' for d in (laptop, *more))
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'{mounts} && exec "$@"', "sh"]


def hidden_node(c, laptop, extra=(), name="node-1"):
    """Start agent name (joined, ready) of cluster c where neither laptop nor the
    coordinator's data dir is visible (hidden())."""
    c.start_agent(name, wrap=hidden(laptop, c.data),
                  extra=("--probe-port", "0", "--replica-port", "0") + tuple(extra))
    c.wait_ready(name)


def laptop_cluster(make_cluster, tmp_path, n=2, extra=(), **kw):
    """A cluster of n agents (node-1...) that cannot see tmp_path/laptop, which the
    CLI sees, nor the coordinator's data dir: (cluster, laptop, names)."""
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    c = make_cluster(**kw)
    tok = c.token(uses=n)
    names = [f"node-{i}" for i in range(1, n + 1)]
    for name in names:
        c.start_agent(name, token=tok, wrap=hidden(laptop, c.data),
                      extra=("--probe-port", "0", "--replica-port", "0") + tuple(extra))
    c.wait_ready(*names)
    return c, laptop, names


def events(c, job_id):
    """The reasons of a job's events, oldest first."""
    return [e["reason"] or "" for e in c.cli_json("job", "show", str(job_id))["events"]]
