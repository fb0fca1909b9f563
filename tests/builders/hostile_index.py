"""A hostile wheel index for tests: a real HTTP server on 127.0.0.1 serving fixed routes
(malicious metadata.json, redirects, wrong hashes, crafted wheels) and logging every hit."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

ENDLESS_LIMIT = 1 << 30   # the endless body's own end: a client that never stops reading


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunk_delay_s: float = 0.0   # > 0: the body goes out in 8 pieces, this far apart
    fail_first: int = 0          # answer 503 to this many requests first
    drip_s: float = 0.0          # > 0: one byte of the body this often (zeros past the body)
    length: int | None = None    # the Content-Length to declare (default: the body's)
    header_drip_s: float = 0.0   # > 0: the status line and headers, one byte this often
    endless: bool = False        # no Content-Length: the body repeated until the client stops


class RouteServer:
    """``with RouteServer() as srv:``; ``srv.routes[path] = Route(...)``; ``srv.hits``."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.hits: list[str] = []
        self.stop = threading.Event()
        self.sent = 0   # bytes dripped
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.hits.append(self.path)
                r = server.routes.get(self.path.split("?")[0], Route(b"not found", 404))
                if r.fail_first > 0:
                    r.fail_first -= 1
                    r = Route(b"busy", 503)
                length = len(r.body) if r.length is None else r.length
                try:
                    if r.header_drip_s > 0:
                        head = f"HTTP/1.1 200 OK\r\nX-Slow: {'a' * 2000}\r\n\r\n"
                        self._drip(head.encode(), len(head), r.header_drip_s)
                        return
                    if r.endless:
                        self._endless(r.body)
                        return
                    self.send_response(r.status)
                    for k, v in {"Content-Length": str(length), **r.headers}.items():
                        self.send_header(k, v)
                    self.end_headers()
                    if r.drip_s > 0:
                        self._drip(r.body, length, r.drip_s)
                        return
                    self._body(r)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _drip(self, data: bytes, length: int, every_s: float) -> None:
                for i in range(length):  # past the data: zeros (a 2 GiB body is not built)
                    if server.stop.is_set():
                        return
                    self.wfile.write(data[i:i + 1] or b"0")
                    self.wfile.flush()
                    server.sent += 1
                    time.sleep(every_s)

            def _endless(self, piece: bytes) -> None:
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                chunk = piece * max(1, (1 << 16) // len(piece))
                while server.sent < ENDLESS_LIMIT and not server.stop.is_set():
                    self.wfile.write(chunk)
                    server.sent += len(chunk)

            def _body(self, r: Route) -> None:
                if r.chunk_delay_s <= 0:
                    self.wfile.write(r.body)
                    return
                step = max(1, len(r.body) // 8)
                for i in range(0, len(r.body), step):
                    self.wfile.write(r.body[i:i + step])
                    self.wfile.flush()
                    time.sleep(r.chunk_delay_s)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> RouteServer:
        self.thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def metadata(self, commit: str, entries: list[dict[str, Any]]) -> None:
        self.routes[f"/{commit}/vllm/metadata.json"] = Route(json.dumps(entries).encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(out: Path, version: str, pth_marker: Path | None = None,
               pth_code: str | None = None) -> Path:
    """An installable pure-Python 'vllm' wheel; with ``pth_marker``, a .pth file that writes
    that marker whenever Python starts in an environment where it is installed; with
    ``pth_code``, a .pth file that runs that line (``import time; time.sleep(3600)``)."""
    files = {
        "vllm/__init__.py": b"",
        f"vllm-{version}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode(),
        f"vllm-{version}.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if pth_marker is not None:
        files["vllm_hook.pth"] = (f"import pathlib; pathlib.Path({str(pth_marker)!r})"
                                  ".write_text('ran')\n").encode()
    if pth_code is not None:
        files["vllm_slow.pth"] = (pth_code + "\n").encode()
    record = f"vllm-{version}.dist-info/RECORD"
    lines = [f"{p},sha256={_b64(d)},{len(d)}" for p, d in files.items()] + [f"{record},,"]
    files[record] = ("\n".join(lines) + "\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"vllm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
    return path


def entry(filename: str, path: str, version: str, **extra: Any) -> dict[str, Any]:
    return {"package_name": "vllm", "filename": filename, "path": path, "version": version,
            "platform_tag": "any", **extra}


def make_bomb(out: Path, version: str, member_bytes: int, name: str = "vllm/zeros.bin") -> Path:
    """A valid 'vllm' wheel plus one member of ``member_bytes`` zeros, deflated (2 GiB packs
    to about 2 MB): written in 1 MiB blocks, never held in memory."""
    path = make_wheel(out, version)
    add_zeros(path, name, member_bytes)
    return path


def add_zeros(wheel: Path, name: str, member_bytes: int) -> None:
    """Add a member of ``member_bytes`` zeros, deflated, to ``wheel``."""
    block = bytes(1 << 20)
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(wheel, "a", compresslevel=9) as z, \
            z.open(info, "w", force_zip64=True) as fh:
        for _ in range(member_bytes // len(block)):
            fh.write(block)


def with_member(wheel: Path, name: str, data: bytes = b"x") -> Path:
    """The wheel with one more member named ``name`` (``../x``, ``/etc/x``)."""
    with zipfile.ZipFile(wheel, "a") as z:
        z.writestr(zipfile.ZipInfo(name), data)
    return wheel
