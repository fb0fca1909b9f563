"""Request deadlines a user can read (issue 49, item 3): an absurd ``probe.max_tokens`` is
refused at load, one above the served model's context (``/v1/models``' max_model_len) when
the first server answers; the per-request deadline derived from ``max_tokens`` is printed by
``vllm-bisect run`` and by the hook before any request is sent."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bisect.test_hook_guard import assert_aborted, bisect_run
from tests.bisect.test_hook_parity import HOOK, git, sim_serve, spec_for
from tests.helpers import history, write_spec

CLI = [sys.executable, "-m", "vllm_bisect.cli"]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("value", ["1000000000", str(2**63 - 1)])
def test_an_absurd_max_tokens_is_refused_at_load(tmp_path: Path, value: str) -> None:
    h = history(tmp_path, n_commits=3, cap_at=2)
    path = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    text = re.sub(r"(?m)^max_tokens = 160$", f"max_tokens = {value}", path.read_text())
    assert text != path.read_text()
    path.write_text(text)
    want = "probe.max_tokens: Input should be less than or equal to 1048576"
    r = subprocess.run([*CLI, "run", "--spec", str(path), "--session", str(tmp_path / "s"),
                        "--cache-dir", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and want in flat(r.stderr), r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    r, judged = bisect_run(h, [*HOOK, "--spec", str(path), "--cache-dir",
                               str(tmp_path / "cache")])
    assert_aborted(r, judged, want)


def test_max_tokens_above_the_served_context_is_an_error(tmp_path: Path) -> None:
    # the history's simulated vLLM serves --max-model-len 8192 unless told otherwise
    h = history(tmp_path, n_commits=3, cap_at=2)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve(),
                                                       probe={"max_tokens": 10000}))
    r = subprocess.run([*CLI, "run", "--spec", str(spec), "--session", str(tmp_path / "s"),
                        "--cache-dir", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-3000:]
    assert ("probe.max_tokens = 10000 is above the served model's context (8192 tokens"
            in flat(r.stderr)), r.stderr[-3000:]
    assert "Traceback" not in r.stderr


def test_the_deadline_is_printed_by_run_and_the_hook(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=2, cap_at=2)
    spec = write_spec(tmp_path / "spec.toml", spec_for(
        h, sim_serve(), ops={"request_timeout_s": 30, "min_tokens_per_s": 4}))
    want = ("each probe request's deadline: 70 s = ops.request_timeout_s 30 s + 160 tokens "
            "at ops.min_tokens_per_s 4/s")
    r = subprocess.run([*CLI, "run", "--spec", str(spec), "--session", str(tmp_path / "s"),
                        "--cache-dir", str(tmp_path / "cache")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert want in flat(r.stderr), r.stderr[-3000:]
    git(h.path, "checkout", "-q", h.good)
    r = subprocess.run([*HOOK, "--spec", str(spec), "--cache-dir", str(tmp_path / "cache")],
                       cwd=h.path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert want in flat(r.stderr), r.stderr[-3000:]
