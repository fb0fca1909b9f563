"""A transient index error (HTTP 503 once) is a skip for this run only: the result cache keeps
only final answers (no wheel for a commit, a wrong build), so a later run on the same cache
asks the index again and finds the culprit. Two real `vllm-bisect run` processes against a
real local index laid out like wheels.vllm.ai whose interior commits answer 503 once."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.bisect.range import open_repo
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.sim.wheel_index import build_wheel, publish

CLI = [sys.executable, "-m", "vllm_bisect.cli"]
X86 = "cp38-abi3-manylinux_2_28_x86_64"


class FlakyOnce(SimpleHTTPRequestHandler):
    """Serves a directory; the first GET of each path in ``flaky`` answers 503."""

    flaky: set[str] = set()  # noqa: RUF012 (replaced per server)
    hits: list[str] = []  # noqa: RUF012

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.hits.append(self.path)
        if self.path in self.flaky:
            self.flaky.discard(self.path)
            self.send_error(503, "busy")
            return
        super().do_GET()


def test_a_503_once_is_asked_again_by_a_later_run(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=2)
    co = Checkouts(open_repo(h.path), tmp_path / "build-cache")
    root = tmp_path / "index"
    for i, sha in enumerate(h.shas):
        publish(root, sha, {"default": [build_wheel(co.get(sha), tmp_path / "w" / str(i), X86)]})
    interior = {f"/{sha}/vllm/metadata.json" for sha in h.shas[1:-1]}
    handler: type[FlakyOnce] = type("H", (FlakyOnce,), {"flaky": set(interior), "hits": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0),
                                functools.partial(handler, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    spec = make_spec(h, build={"kind": "wheel", "index_url": url, "variant": "default"},
                     verdict={"verify_samples": 0}, ops={"retries": 0})
    path = write_spec(tmp_path / "spec.toml", spec)
    try:
        runs = []
        for n in (1, 2):
            r = subprocess.run([*CLI, "run", "--spec", str(path), "--session",
                                str(tmp_path / f"session{n}"), "--cache-dir",
                                str(tmp_path / "cache"), "--json"],
                               capture_output=True, text=True, timeout=600)
            assert r.returncode in (0, 1), r.stderr[-3000:]
            runs.append(json.loads(r.stdout))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert runs[0]["first_bad"] is None  # every interior commit was a 503: skipped
    assert runs[1]["first_bad"] == h.planted["length"], runs[1]
    asked = [p for p in handler.hits if p in interior]
    assert len(asked) > len(set(asked))  # the second run asked again
