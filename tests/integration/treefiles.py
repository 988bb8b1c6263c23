"""Trees of files for the tests of files that travel (code, data sets, outputs):
writing files, bytes that compress badly, and an agent that cannot see the
submitting machine's directory.

    c.start_agent(name, wrap=hidden(laptop))   # laptop: an empty tmpfs for it
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


def hidden(laptop):
    """wrap= argv: the agent (and its jobs) in a mount namespace where laptop is an
    empty tmpfs."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs none "{laptop}" && exec "$@"', "sh"]
