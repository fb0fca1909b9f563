"""Servers that drip or flood the reads around the probe (real sockets on 127.0.0.1, through
the real entry points): response headers dripped byte by byte, ``/version`` dripped or 1 GiB,
``/health`` dripped. Each ends within its bound (the request deadline, a 10 s / 64 KiB
``/version``, ``ops.startup_timeout_s``), never a hang; a huge ``/version`` is not read."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.bisect.test_hook_parity import HOOK, git, spec_for
from tests.helpers import history, write_spec
from tests.probes.hostile_sse import HostileServer

CLI = [sys.executable, "-m", "vllm_bisect.cli"]
SCRIPT = Path(__file__).with_name("hostile_sse.py")


def probe_cli(url: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    r = subprocess.run([*CLI, "probe", "--url", url, "--model", "m", "--requests", "1",
                        "--warmup", "0", "--max-tokens", "8", *extra],
                       capture_output=True, text=True, timeout=300)
    return r, time.monotonic() - started


def test_dripped_response_headers_hit_the_request_deadline() -> None:
    # --timeout 2: the deadline is 2 s + 8 tokens at 1 token/s; the headers would take 1000 s
    with HostileServer("headers-drip") as url:
        r, took = probe_cli(url, "--timeout", "2")
    assert r.returncode != 0, r.stdout
    assert "deadline" in r.stderr, r.stderr[-2000:]
    assert took < 120


def test_a_dripping_version_is_given_up_and_the_probe_measures() -> None:
    with HostileServer("version-drip") as url:
        r, took = probe_cli(url, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert '"server_version": null' in r.stdout
    assert took < 120  # /version would take 1000 s


def test_a_huge_version_is_not_read_whole() -> None:
    srv = HostileServer("version-huge")
    with srv as url:
        r, _ = probe_cli(url, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert '"server_version": null' in r.stdout
    assert srv.handler.sent[0] < 256 << 20  # of 1 GiB: the client stopped at the cap


def hook_at_bad(tmp_path: Path, mode: str, startup_timeout_s: float, max_tokens: int
                ) -> tuple[subprocess.CompletedProcess[str], float]:
    """The hook at a two-commit history's bad end, served by the hostile server in ``mode``;
    its result and wall time."""
    h = history(tmp_path, n_commits=2)
    serve = f"exec {sys.executable} {SCRIPT} {{port}} {mode}"
    spec = spec_for(h, serve, ops={"retries": 0, "startup_timeout_s": startup_timeout_s},
                    probe={"max_tokens": max_tokens, "min_tokens": 4})
    path = write_spec(tmp_path / "spec.toml", spec)
    git(h.path, "checkout", "-q", h.bad)
    started = time.monotonic()
    r = subprocess.run([*HOOK, "--spec", str(path), "--cache-dir", str(tmp_path / "cache")],
                       cwd=h.path, capture_output=True, text=True, timeout=300)
    return r, time.monotonic() - started


def test_dripped_health_headers_end_at_the_startup_timeout(tmp_path: Path) -> None:
    r, wall = hook_at_bad(tmp_path, "health-drip", 3, 8)
    assert r.returncode == 125, r.stderr[-3000:]
    assert "not healthy after 3 s" in r.stderr
    assert wall < 120


def test_a_health_200_with_a_dripping_body_is_healthy_at_once(tmp_path: Path) -> None:
    """The status decides; the body (2000 bytes at 2 a second: 1000 s) is never read."""
    r, wall = hook_at_bad(tmp_path, "health-body-drip", 30, 4)
    assert r.returncode == 0, r.stderr[-3000:]   # measured (4 tokens >= 4): good
    assert "not healthy" not in r.stderr
    assert wall < 120
