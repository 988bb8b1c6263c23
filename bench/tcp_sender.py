#!/usr/bin/env python3
"""tcp_sender.py PORT MB - what the forward benches read: listens on 127.0.0.1:PORT
and sends MB megabytes of zeros to each connection, one after another, until
killed. A client that leaves early (a readiness check) is dropped."""
import socket
import sys

port, total = int(sys.argv[1]), int(sys.argv[2]) << 20
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(8)
block = b"\0" * (1 << 20)
while True:
    c, _ = s.accept()
    left = total
    try:
        while left:
            left -= c.send(block[:min(left, len(block))])
    except OSError:
        pass
    c.close()
