"""A hostile vLLM stand-in: a real HTTP server on 127.0.0.1 whose completions stream misbehaves.

Stdlib only, so a serve command can run it as a script: ``python3 hostile_sse.py PORT MODE``.
It answers /health and /version like vLLM; ``/v1/completions`` follows MODE:

endless      valid chunks forever, one every 5 ms
keepalive    SSE comment lines forever (no output chunk ever: only a deadline stops it)
slowloris    a valid stream, one byte every 0.2 s
hugeline     one 3 MB line without a newline
text-int     ``"text": 123``
finish-dict  ``"finish_reason": {"x": 1}``
deep         a data line nested 100 000 deep
usage-neg / usage-huge / usage-bool   completion_tokens -5, 10**30, true
metrics-huge /metrics is 5 MB (the completions are valid)
choices-dict / choices-str / done-only   ``"choices": {}``, ``"choices": "aaaa"``, only [DONE]
headers-drip the completion's response headers, one byte every 0.5 s (for minutes)
version-drip /version's body, one byte every 0.5 s (the completions are valid)
version-huge /version declares and sends 1 GiB (the completions are valid)
health-drip  /health's status line and headers, one byte every 0.5 s (for minutes)
usage-below-chunks / usage-below-running   10 text chunks and a final count of 3 (no running
             counts) / 4 text chunks, running counts 3, 6, 9, 12 and a final count of 5
usage-inflated / usage-inflated-running    4 text chunks (no running counts / running 1..4),
             a final count of the request's max_tokens
choice-empty ``"choices": [{}]``, then a final count of 0
error-escape the completion answers HTTP 500 with terminal escape sequences in its body
(the valid stream, of every mode not named above: 4 text chunks, or ``$HOSTILE_SSE_TOKENS``)
model-other  /v1/models lists ``m``, ``sim-model`` and ``tiny`` (as every mode does), the stream's
             chunks say ``"model": "other"`` (a router answering for another model)
metrics-nan / metrics-inf / metrics-down / metrics-overaccept   the spec-decode counters of
             /metrics are NaN / +Inf / go down from one scrape to the next / grow by 500
             accepted tokens per draft over 3 positions (the completions are valid)
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import ClassVar

MODES = ("endless", "keepalive", "slowloris", "hugeline", "text-int", "finish-dict", "deep",
         "usage-neg", "usage-huge", "usage-bool", "metrics-huge", "valid", "choices-dict",
         "choices-str", "done-only", "headers-drip", "version-drip", "version-huge",
         "health-drip", "health-body-drip", "usage-below-chunks", "usage-below-running",
         "usage-inflated", "usage-inflated-running", "choice-empty", "metrics-nan",
         "metrics-inf", "metrics-down", "metrics-overaccept", "error-escape", "model-other")
DRIP_S = 0.5
# a title change (OSC), a screen clear and a colour (CSI), an 8-bit CSI, a bidi override
ESCAPES = "boom \x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m \x9b1m\u202eevil"
HUGE = 1 << 30


# the names the tests ask for (vLLM lists each --served-model-name); the chunks carry no
# "model" field but in model-other (an absent one is not checked)
MODELS = json.dumps({"object": "list", "data": [{"id": n, "object": "model", "root": "m"}
                                                for n in ("m", "sim-model", "tiny")]})


def _chunk(text: object = "tok ", finish: object = None, usage: object = None,
           model: str | None = None) -> bytes:
    obj: dict[str, object] = {"id": "x", "object": "text_completion",
                              "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if model is not None:
        obj["model"] = model
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _valid(n: int = 4) -> bytes:
    out = b"".join(_chunk(usage={"completion_tokens": i + 1}) for i in range(n))
    out += b'data: {"choices": [], "usage": {"completion_tokens": %d}}\n\n' % n
    return out + b"data: [DONE]\n\n"


class Handler(BaseHTTPRequestHandler):
    mode = "valid"
    stop = threading.Event()
    sent: ClassVar[list[int]] = [0]   # body bytes written by the drip and huge modes (shared by the class)
    scrapes: ClassVar[list[int]] = [0]  # /metrics answers so far

    def log_message(self, *args: object) -> None:
        pass

    def _head(self, ctype: str, length: int | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.send_header("Connection", "close")
        self.end_headers()

    def _drip(self, data: bytes) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for b in data:
                if self.stop.is_set():
                    return
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                self.sent[0] += 1
                time.sleep(DRIP_S)

    def _huge(self) -> None:
        block = b"0" * (1 << 20)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(HUGE // len(block)):
                if self.stop.is_set():
                    return
                self.wfile.write(block)
                self.sent[0] += len(block)

    def do_GET(self) -> None:
        if self.path == "/health" and self.mode == "health-drip":
            self._drip(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 2000 + b"\r\n\r\n")
            return
        if self.path == "/health" and self.mode == "health-body-drip":  # 200, then a drip
            self._head("application/json", 2000)
            self._drip(b"{" + b" " * 1998 + b"}")
            return
        if self.path == "/version" and self.mode == "version-drip":
            self._head("application/json", 1000)
            self._drip(b'{"version": "' + b"9" * 2000)
            return
        if self.path == "/version" and self.mode == "version-huge":
            self._head("application/json", HUGE)
            self._huge()
            return
        if self.path == "/metrics":
            line = b'vllm:generation_tokens_total{model_name="m"} 1.0\n'
            body = line * (5_000_000 // len(line)) if self.mode == "metrics-huge" else line
            body += self._spec_counters()
            self._head("text/plain", len(body))
            self.wfile.write(body)
            return
        body = (b'{"version": "0.0.0+hostile"}' if self.path == "/version"
                else MODELS.encode() if self.path == "/v1/models" else b"{}")
        self._head("application/json", len(body))
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        self.max_tokens = int(body.get("max_tokens") or 16)
        if self.mode == "headers-drip":
            self._drip(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 2000 + b"\r\n\r\n")
            return
        if self.mode == "error-escape":
            body = ESCAPES.encode()
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self._head("text/event-stream")
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._stream()

    def _stream(self) -> None:
        w, m = self.wfile, self.mode
        if m in ("endless", "keepalive"):
            while not self.stop.is_set():
                w.write(_chunk() if m == "endless" else b": keep-alive\n\n")
                w.flush()
                time.sleep(0.005)
        elif m == "slowloris":
            for b in _valid(50):
                if self.stop.is_set():
                    return
                w.write(bytes([b]))
                w.flush()
                time.sleep(0.2)
        elif m == "hugeline":
            w.write(b"data: {\"x\": \"" + b"a" * 3_000_000)
        elif m == "deep":
            w.write(b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n")
        elif m == "text-int":
            w.write(_chunk(text=123) + b"data: [DONE]\n\n")
        elif m == "finish-dict":
            w.write(_chunk(finish={"x": 1}) + b"data: [DONE]\n\n")
        elif m == "choices-dict":
            w.write(b'data: {"choices": {}}\n\ndata: [DONE]\n\n')
        elif m == "choices-str":
            w.write(b'data: {"choices": "aaaa"}\n\ndata: [DONE]\n\n')
        elif m == "done-only":
            w.write(b"data: [DONE]\n\n")
        elif m.startswith(("usage-below", "usage-inflated")) or m == "choice-empty":
            w.write(self._contradicting(m) + b"data: [DONE]\n\n")
        elif m.startswith("usage-"):
            bad = {"usage-neg": -5, "usage-huge": 10**30, "usage-bool": True}[m]
            w.write(_chunk(usage={"completion_tokens": bad}) + b"data: [DONE]\n\n")
        elif m == "model-other":
            w.write(b"".join(_chunk(usage={"completion_tokens": i + 1}, model="other")
                             for i in range(4)) + b"data: [DONE]\n\n")
        else:
            w.write(_valid(int(os.environ.get("HOSTILE_SSE_TOKENS", "4"))))

    def _spec_counters(self) -> bytes:
        """The spec-decode counters of the ``metrics-*`` modes, at this scrape."""
        self.scrapes[0] += 1
        n, m = self.scrapes[0], self.mode
        values = {"metrics-nan": (10 * n, "NaN", ["NaN"]),
                  "metrics-inf": (10 * n, "+Inf", ["+Inf"]),
                  "metrics-down": (1000 - 100 * n, 2000 - 200 * n, [500 - 50 * n]),
                  "metrics-overaccept": (n, 500 * n, [n, n, n])}.get(m)
        if values is None:
            return b""
        drafts, accepted, per_pos = values
        lines = [f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {drafts}',
                 f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}']
        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",'
                  f'position="{i}"}} {v}' for i, v in enumerate(per_pos)]
        return ("\n".join(lines) + "\n").encode()

    def _contradicting(self, m: str) -> bytes:
        """A stream whose token counts disagree with each other (mode ``m``)."""
        if m == "choice-empty":
            return b'data: {"choices": [{}]}\n\ndata: {"choices": [], "usage": {"completion_tokens": 0}}\n\n'
        n = 10 if m == "usage-below-chunks" else 4
        step = 3 if m == "usage-below-running" else 1   # (3 tokens a chunk, as under MTP)
        running = m.endswith("-running")
        out = b"".join(_chunk(usage={"completion_tokens": (i + 1) * step} if running else None)
                       for i in range(n))
        final = {"usage-below-chunks": 3, "usage-below-running": 5}.get(m, self.max_tokens)
        return out + b'data: {"choices": [], "usage": {"completion_tokens": %d}}\n\n' % final


class HostileServer:
    """``with HostileServer(mode) as url:`` serves MODE on a free 127.0.0.1 port."""

    def __init__(self, mode: str, port: int = 0) -> None:
        assert mode in MODES, mode
        handler: type[Handler] = type("H", (Handler,), {"mode": mode, "stop": threading.Event(), "sent": [0],
                                                       "scrapes": [0]})
        self.handler = handler
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.handler.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    server = HostileServer(sys.argv[2], int(sys.argv[1]))
    server.thread.start()
    server.thread.join()
