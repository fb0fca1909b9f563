"""A local PEP 503 simple package index (a stand-in for PyPI), and tiny packages to fill it.

``PackageIndex(dist_dir)`` serves every wheel and sdist in ``dist_dir`` on 127.0.0.1 from a
real threaded HTTP server: ``/simple/`` lists the projects, ``/simple/<name>/`` links each
file as ``/files/<file>#sha256=<digest>``. ``build_package(name, version, source, out)``
writes a one-module pure-Python wheel (no build backend needed).
"""

from __future__ import annotations

import base64
import hashlib
import html
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename


def build_package(name: str, version: str, source: str, out_dir: Path) -> Path:
    """A wheel of package ``name`` (one module, ``source``) at ``version``, written directly
    (a pure-Python wheel is a zip with its metadata and RECORD): no setuptools needed, so
    `vllm-bisect sim history --study deps` runs on the user's install (``pip install -e .``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dist_name = canonicalize_name(name).replace("-", "_")
    info = f"{dist_name}-{version}.dist-info"
    files = {
        f"{name}.py": source.encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                             "Summary: a package built by vllm-bisect's simulator\n").encode(),
        f"{info}/WHEEL": (b"Wheel-Version: 1.0\nGenerator: vllm-bisect\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
        f"{info}/top_level.txt": f"{name}\n".encode(),
    }

    def digest(data: bytes) -> str:
        raw = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"sha256={raw},{len(data)}"

    record = "".join(f"{path},{digest(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    wheel = out_dir / f"{dist_name}-{version}-py3-none-any.whl"
    part = wheel.with_name(wheel.name + ".part")
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            zf.writestr(zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0)), data)
    part.replace(wheel)
    return wheel


def _project(filename: str) -> str | None:
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[0])
        return str(parse_sdist_filename(filename)[0])
    except ValueError:
        return None


class PackageIndex:
    def __init__(self, dist_dir: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        self.dist = dist_dir
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def _answer(self, head: bool) -> None:
                body, ctype = index.page(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._answer(head=False)

            def do_HEAD(self) -> None:  # installers ask before they download (range support)
                self._answer(head=True)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="package-index")
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/simple"

    def files(self) -> dict[str, list[Path]]:
        out: dict[str, list[Path]] = {}
        for f in sorted(self.dist.iterdir()):
            name = _project(f.name)
            if name is not None:
                out.setdefault(canonicalize_name(name), []).append(f)
        return out

    def page(self, path: str) -> tuple[bytes | None, str]:
        self.requests.append(path)
        path = path.split("?", 1)[0]
        if path.startswith("/files/"):
            f = self.dist / Path(path[len("/files/"):]).name
            return (f.read_bytes(), "application/octet-stream") if f.is_file() else (None, "")
        parts = [p for p in path.split("/") if p]
        if parts == ["simple"]:
            links = [(f"/simple/{n}/", n) for n in self.files()]
        elif len(parts) == 2 and parts[0] == "simple":
            found = self.files().get(canonicalize_name(parts[1]))
            if found is None:
                return None, ""
            links = [(f"/files/{f.name}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}",
                      f.name) for f in found]
        else:
            return None, ""
        body = "".join(f'<a href="{html.escape(h)}">{html.escape(t)}</a>\n' for h, t in links)
        return (f"<!DOCTYPE html>\n<html><body>\n{body}</body></html>\n".encode(), "text/html")

    def __enter__(self) -> PackageIndex:
        self.thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
