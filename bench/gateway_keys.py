#!/usr/bin/env python3
"""gateway_keys.py GATEWAY_URL [ROUNDS] - how soon a gateway takes a key made, and
refuses a key revoked, as a user sees it: in each round `bramble key create`, then
requests with the key until one is answered 200 (the time from the command's end);
then `bramble key revoke`, then requests until one is refused 401 (the time, and
how many were still answered meanwhile). Needs a running cluster whose `bramble`
is on PATH with the admin's credential, and a service with `service.model: qwen`
(not public) behind the gateway at GATEWAY_URL."""

import subprocess
import sys
import time
import urllib.error
import urllib.request


def status(gw, key):
    req = urllib.request.Request(gw + "/v1/chat/completions",
                                 data=b'{"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}',
                                 headers={"Authorization": "Bearer " + key})
    try:
        return urllib.request.urlopen(req, timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code


def main():
    gw = sys.argv[1].rstrip("/")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    for i in range(rounds):
        name = f"bench-{int(time.time())}-{i}"
        out = subprocess.run(["bramble", "key", "create", "--name", name],
                             capture_output=True, text=True, check=True).stdout
        key = out.split()[-1]
        t0 = time.monotonic()
        while status(gw, key) != 200:
            if time.monotonic() - t0 > 30:
                sys.exit(f"a key made was not taken within 30 s (last: {status(gw, key)})")
        known = time.monotonic() - t0
        subprocess.run(["bramble", "key", "revoke", name], capture_output=True, check=True)
        t0, answered = time.monotonic(), 0
        while status(gw, key) != 401:
            answered += 1
            if time.monotonic() - t0 > 30:
                sys.exit("a key revoked was still taken after 30 s")
        print(f"known after {known * 1000:.1f} ms, refused after "
              f"{(time.monotonic() - t0) * 1000:.1f} ms ({answered} answered meanwhile)")


if __name__ == "__main__":
    main()
