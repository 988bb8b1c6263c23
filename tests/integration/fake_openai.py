#!/usr/bin/python3
"""A fake OpenAI-compatible model server, standing in for a vLLM replica in the
bramble-gateway tests. Python 3.11 standard library only.

    PORT=8001 BRAMBLE_REPLICA=3 fake_openai.py --model M [--adapters a,b]
        [--control DIR] [--token-delay-ms N] [--start-delay-ms N]
        [--keepalive-timeout S]

Listens on 0.0.0.0:$PORT (HTTP/1.1, keep-alive), after --start-delay-ms (a model
that takes that long to load; it prints "loaded in N ms" when it listens),
closes a kept-alive connection idle for --keepalive-timeout seconds (as uvicorn,
vLLM's server, does after 5 s; default: never), and answers:
  GET  /health               200 "ok"
  GET  /v1/models            the model and each adapter
  POST /v1/chat/completions  "replica R model M: " + the last message's text
  POST /v1/completions       the same with the prompt
  POST /v1/embeddings        8 floats per input, derived from its text
                             (encoding_format "base64" honoured, as vLLM does)
  GET  /stats                {"inflight", "max_inflight", "served", "cancelled",
                              "replica"}
                             over the /v1/* POSTs (served: answers written,
                             errors included; garbage / deaths not counted)
"stream": true streams one SSE chunk per space-separated token, chunked by hand.
Every answer to a /v1/* POST carries the header "X-Replica: R".

Control files in --control DIR, looked at on each /v1/* POST (R = this replica):
  hang-R             wait (50 ms steps) until the file is removed, then answer;
                     a client that hangs up meanwhile is counted ("cancelled"
                     in /stats) and gets nothing
  slow-R             holds a number of ms: sleep that long before answering
  garbage-R          write "this is not http\\r\\n\\r\\n" raw and close the socket
  fail503-R          answer 503 with an OpenAI error body
  fail502-R          answer 502 with an OpenAI error body (a proxy in front of
                     a replica that is gone answers so)
  sick-R             answer 503 to everything, GET /health included (looked at
                     on each request)
  die-mid-stream-R   on a streamed request, os._exit(1) after 2 tokens
"""

import argparse
import base64
import hashlib
import http.server
import json
import os
import re
import select
import socket
import struct
import sys
import threading
import time

ARGS = None
REPLICA = os.environ.get("BRAMBLE_REPLICA", "0")
LOCK = threading.Lock()
STATS = {"inflight": 0, "max_inflight": 0, "served": 0, "cancelled": 0}


def control(name):
    """The path of control file NAME-R when it exists, else None."""
    path = ARGS.control and os.path.join(ARGS.control, f"{name}-{REPLICA}")
    return path if path and os.path.exists(path) else None


def text_of(content):
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def words(text):
    return len(text.split())


def embedding(text):
    digest = hashlib.sha256(text.encode()).digest()
    return [round(b / 127.5 - 1.0, 6) for b in digest[:8]]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake_openai/1"

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        # headers and body go out as two writes: without this, Nagle's algorithm
        # holds the second until the client's delayed ACK (40 ms), as real
        # servers (uvicorn under vLLM) do not
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- plain answers ----------------------------------------------------------

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Replica", REPLICA)
        # the head and the body in one write, as a real server's small answer goes: a
        # replica killed between two writes would leave a 200 cut short, which no
        # proxy may retry
        self._headers_buffer.append(b"\r\n")
        self._headers_buffer.append(body)
        self.flush_headers()
        self.wfile.flush()

    def send_error_json(self, status, message, etype="invalid_request_error"):
        self.send_json(status, {"error": {"message": message, "type": etype,
                                          "param": None, "code": None}})

    def do_GET(self):
        if control("sick"):
            self.send_error_json(503, "replica sick (sick)", "server_error")
        elif self.path == "/health":
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "owned_by": "fake"}
                for m in [ARGS.model] + ARGS.adapters]})
        elif self.path == "/stats":
            with LOCK:
                self.send_json(200, dict(STATS, replica=REPLICA))
        else:
            self.send_error_json(404, f"no route GET {self.path}")

    # -- the /v1 POSTs ----------------------------------------------------------

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if self.path not in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
            self.send_error_json(404, f"no route POST {self.path}")
            return
        with LOCK:
            STATS["inflight"] += 1
            STATS["max_inflight"] = max(STATS["max_inflight"], STATS["inflight"])
        answered = False
        try:
            answered = self.answer(raw)
        finally:
            with LOCK:
                STATS["inflight"] -= 1
                STATS["served"] += 1 if answered else 0

    def client_gone(self):
        """Whether the client hung up (its side of the connection reads as ended)."""
        r, _, _ = select.select([self.connection], [], [], 0)
        try:
            return bool(r) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def answer(self, raw):
        """Answers one /v1 POST; returns False when no HTTP answer was written."""
        while control("hang"):
            if self.client_gone():
                with LOCK:
                    STATS["cancelled"] += 1
                self.close_connection = True
                return False
            time.sleep(0.05)
        if slow := control("slow"):
            try:
                with open(slow) as f:
                    time.sleep(float(f.read().strip() or 0) / 1000)
            except (OSError, ValueError):
                pass
        if control("garbage"):
            self.wfile.write(b"this is not http\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True
            return False
        if control("fail502"):
            self.send_error_json(502, "bad gateway (fail502)", "server_error")
            return True
        if control("fail503") or control("sick"):
            self.send_error_json(503, "replica overloaded (fail503)", "server_error")
            return True
        try:
            req = json.loads(raw)
            if not isinstance(req, dict):
                raise ValueError("the body is not a JSON object")
        except ValueError as e:
            self.send_error_json(400, f"invalid JSON body: {e}")
            return True
        model = req.get("model")
        if model not in [ARGS.model] + ARGS.adapters:
            self.send_error_json(404, f"The model `{model}` does not exist.")
            return True
        if self.path == "/v1/embeddings":
            return self.embeddings(req, model)
        chat = self.path == "/v1/chat/completions"
        if chat:
            msgs = req.get("messages") if isinstance(req.get("messages"), list) else []
            texts = [text_of(m.get("content")) for m in msgs if isinstance(m, dict)]
            last, prompt_words = (texts[-1] if texts else ""), sum(map(words, texts))
        else:
            prompt = req.get("prompt", "")
            last = " ".join(map(str, prompt)) if isinstance(prompt, list) else str(prompt)
            prompt_words = words(last)
        content = f"replica {REPLICA} model {model}: {last}"
        tokens = re.findall(r"[^ ]+ *", content)
        usage = {"prompt_tokens": prompt_words, "completion_tokens": len(tokens),
                 "total_tokens": prompt_words + len(tokens)}
        rid = ("chatcmpl-" if chat else "cmpl-") + os.urandom(6).hex()
        if req.get("stream"):
            opts = req.get("stream_options") or {}
            return self.stream(chat, rid, model, tokens, usage,
                               isinstance(opts, dict) and opts.get("include_usage"))
        choice = {"index": 0, "finish_reason": "stop", "logprobs": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": content}
        else:
            choice["text"] = content
        self.send_json(200, {"id": rid, "object": "chat.completion" if chat else "text_completion",
                             "created": int(time.time()), "model": model,
                             "choices": [choice], "usage": usage})
        return True

    def embeddings(self, req, model):
        inp = req.get("input")
        inputs = [inp] if isinstance(inp, str) else inp
        if not isinstance(inputs, list) or not all(isinstance(s, str) for s in inputs):
            self.send_error_json(400, "input must be a string or a list of strings")
            return True
        data = []
        for i, text in enumerate(inputs):
            vec = embedding(text)
            if req.get("encoding_format") == "base64":
                vec = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            data.append({"object": "embedding", "index": i, "embedding": vec})
        n = sum(map(words, inputs))
        self.send_json(200, {"object": "list", "model": model, "data": data,
                             "usage": {"prompt_tokens": n, "total_tokens": n}})
        return True

    # -- streaming --------------------------------------------------------------

    def chunk(self, obj):
        data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def stream(self, chat, rid, model, tokens, usage, include_usage):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Replica", REPLICA)
        self.end_headers()
        base = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": model}

        def choice(text, finish=None, first=False):
            if not chat:
                return {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            return {"index": 0, "delta": delta if text or first else {},
                    "finish_reason": finish, "logprobs": None}

        die = control("die-mid-stream")
        for i, tok in enumerate(tokens):
            if die and i == 2:
                os._exit(1)
            if i and ARGS.token_delay_ms:
                time.sleep(ARGS.token_delay_ms / 1000)
            self.chunk(dict(base, choices=[choice(tok, first=i == 0)]))
        self.chunk(dict(base, choices=[choice("", "stop")]))
        if include_usage:
            self.chunk(dict(base, choices=[], usage=usage))
        self.chunk(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        return True


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """Quiet about clients that went away (a cancelled stream); loud otherwise."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def main():
    global ARGS
    p = argparse.ArgumentParser(description="fake OpenAI-compatible replica")
    p.add_argument("--model", required=True)
    p.add_argument("--adapters", default="")
    p.add_argument("--control", default=None)
    p.add_argument("--token-delay-ms", type=float, default=0)
    p.add_argument("--start-delay-ms", type=float, default=0)
    p.add_argument("--keepalive-timeout", type=float, default=0)
    ARGS = p.parse_args()
    if ARGS.keepalive_timeout:
        Handler.timeout = ARGS.keepalive_timeout  # (an idle read times out: closed)
    t0 = time.monotonic()
    time.sleep(ARGS.start_delay_ms / 1000)
    ARGS.adapters = [a for a in ARGS.adapters.split(",") if a]
    port = int(os.environ.get("PORT", "8000"))
    server = Server(("0.0.0.0", port), Handler)
    print(f"fake_openai listening {port} model {ARGS.model} replica {REPLICA}, loaded in "
          f"{(time.monotonic() - t0) * 1000:.0f} ms", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
