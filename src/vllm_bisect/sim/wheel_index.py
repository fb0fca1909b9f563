"""A local stand-in for vLLM's per-commit wheel index (https://wheels.vllm.ai).

Laid out as vLLM's docs/contributing/ci/nightly_builds.md describes: ``<sha>/`` holds the
wheel files and an ``index.html`` linking ``vllm/`` and the variant folders;
``<sha>/vllm/{index.html,metadata.json}`` is the default variant and
``<sha>/<variant>/vllm/{index.html,metadata.json}`` the others. ``path`` in metadata.json is
relative to the metadata.json URL with ``+`` escaped as ``%2B``. Served by a real threaded
HTTP server on 127.0.0.1. Faults for tests: ``html`` (an HTML error page where metadata.json
should be) and ``truncated`` (metadata.json cut short).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<py>[^-]+)-(?P<abi>[^-]+)-"
                   r"(?P<plat>[^-]+)\.whl$")


def build_wheel(checkout: Path, out_dir: Path, platform_tag: str,
                variant: str | None = None) -> Path:
    """Build the synthetic vllm wheel of a checkout with its own in-tree backend."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SYNTH_WHEEL_TAG": platform_tag}
    if variant:
        env["SYNTH_WHEEL_VARIANT"] = variant
    else:
        env.pop("SYNTH_WHEEL_VARIANT", None)
    code = ("import sys; sys.path.insert(0, '_build'); import backend; "
            f"print(backend.build_wheel({str(out_dir)!r}))")
    name = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env, check=True,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return out_dir / name


def _metadata(wheel: Path, rel_prefix: str) -> dict[str, str]:
    m = WHEEL.match(wheel.name)
    if m is None:
        raise ValueError(f"not a wheel filename: {wheel.name}")
    return {"package_name": m["name"], "version": m["version"], "python_tag": m["py"],
            "abi_tag": m["abi"], "platform_tag": m["plat"], "filename": wheel.name,
            "path": rel_prefix + quote(wheel.name)}


def _index_html(title: str, links: list[tuple[str, str]]) -> str:
    body = "\n".join(f'    <a href="{href}">{text}</a><br/>' for href, text in links)
    return f"<!DOCTYPE html>\n<html>\n  <body>\n    <h1>{title}</h1>\n{body}\n  </body>\n</html>\n"


def publish(root: Path, commit: str, wheels: dict[str, list[Path]],
            fault: str | None = None) -> None:
    """Lay out one commit's folder: wheels[variant] lists that variant's wheel files."""
    folder = root / commit
    folder.mkdir(parents=True, exist_ok=True)
    variants = []
    for variant, files in wheels.items():
        for w in files:
            (folder / w.name).write_bytes(w.read_bytes())
        sub = folder / "vllm" if variant == "default" else folder / variant / "vllm"
        sub.mkdir(parents=True, exist_ok=True)
        prefix = "../" if variant == "default" else "../../"
        entries = [_metadata(folder / w.name, prefix) for w in files]
        text = json.dumps(entries, indent=2)
        if fault == "html":
            text = "<html><head><title>502 Bad Gateway</title></head><body>502</body></html>"
        elif fault == "truncated":
            text = text[: len(text) // 2]
        (sub / "metadata.json").write_text(text)
        (sub / "index.html").write_text(_index_html(
            "Links for vllm", [(e["path"], e["filename"]) for e in entries]))
        if variant != "default":
            variants.append(variant)
    (folder / "index.html").write_text(_index_html(
        "Simple index", [(f"{v}/", f"{v}/") for v in variants] + [("vllm/", "vllm")]))


class _QuietHandler(SimpleHTTPRequestHandler):
    delay_s = 0.0  # per wheel download, to model a slow index

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.delay_s and self.path.endswith(".whl"):
            time.sleep(self.delay_s)
        super().do_GET()


@dataclass
class IndexServer:
    """``with IndexServer(root) as url:`` serves root over HTTP on 127.0.0.1."""

    root: Path
    delay_s: float = 0.0
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def __enter__(self) -> str:
        handler_cls = type("Handler", (_QuietHandler,), {"delay_s": self.delay_s})
        handler = functools.partial(handler_cls, directory=str(self.root))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
