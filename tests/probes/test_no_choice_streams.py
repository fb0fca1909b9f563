"""A stream without one well-formed choice (``"choices": {}``, ``"choices": "aaaa"``, only
``[DONE]``) is a probe error, never "0 output tokens": a length bisect would call the commit
bad. Through the real entry points: ``vllm-bisect probe`` against a real local server, and
``vllm-bisect hook`` whose serve command starts that server (skip, exit 125, not bad, 1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bisect.test_hook_parity import HOOK, git, spec_for
from tests.helpers import history, write_spec
from tests.probes.hostile_sse import HostileServer

CLI = [sys.executable, "-m", "vllm_bisect.cli"]
SCRIPT = Path(__file__).with_name("hostile_sse.py")
MODES = ["choices-dict", "choices-str", "done-only"]


@pytest.mark.parametrize("mode", MODES)
def test_probe_cli_reports_an_error_not_zero_tokens(mode: str) -> None:
    with HostileServer(mode) as url:
        r = subprocess.run([*CLI, "probe", "--url", url, "--model", "m", "--requests", "1",
                            "--warmup", "0", "--max-tokens", "8", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout
    assert "output_tokens" not in r.stdout
    assert "choice" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("mode", MODES)
def test_a_length_hook_skips_instead_of_judging_bad(tmp_path: Path, mode: str) -> None:
    h = history(tmp_path, n_commits=3)
    serve = f"exec {sys.executable} {SCRIPT} {{port}} {mode}"
    spec = spec_for(h, serve, ops={"retries": 0}, probe={"max_tokens": 8, "min_tokens": 4})
    path = write_spec(tmp_path / "spec.toml", spec)
    git(h.path, "checkout", "-q", h.bad)
    r = subprocess.run([*HOOK, "--spec", str(path), "--cache-dir", str(tmp_path / "cache")],
                       cwd=h.path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 125, r.stderr[-3000:]
    assert "choice" in r.stderr
