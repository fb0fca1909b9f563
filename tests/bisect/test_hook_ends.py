"""The hook checks git's ends once, as ``run`` does (issue 49, item 2): under a real
``git bisect run``, a threshold under which the bad end shows no symptom (or the good end
shows it) stops the bisect at once (exit 128, both measurements and what to change); the
ends are measured on the first call only, cached and reused. Thresholds no commit can meet
are refused at spec load."""

from __future__ import annotations

import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.bisect.test_hook_guard import assert_aborted, bisect_run
from tests.bisect.test_hook_parity import HOOK, hook_first_bad, sim_serve, spec_for
from tests.helpers import history, write_spec


def itl_history(tmp: Path, n: int = 6):  # type: ignore[no-untyped-def]
    return history(tmp, n_commits=n, slow_at=3, slow_factor=3.0, step_ms=5.0)


@pytest.mark.parametrize(("threshold", "end"), [(10_000.0, "bad"), (0.01, "good")])
def test_ends_that_do_not_reproduce_stop_git_bisect(tmp_path: Path, threshold: float,
                                                     end: str) -> None:
    h = itl_history(tmp_path)
    spec = write_spec(tmp_path / "spec.toml", spec_for(
        h, sim_serve(), verdict={"symptom": "itl", "max_itl_ms": threshold,
                                 "strategy": "threshold"}))
    r, judged = bisect_run(h, [*HOOK, "--spec", str(spec), "--cache-dir",
                               str(tmp_path / "cache")])
    sha = h.bad if end == "bad" else h.good
    assert_aborted(r, judged, f"{end} end {sha[:12]} judged", f"{h.good[:12]} judged",
                   f"{h.bad[:12]} judged", "ms <=" if end == "bad" else "ms >", "threshold")


def test_ends_are_measured_once_and_reused(tmp_path: Path) -> None:
    h = itl_history(tmp_path, n=8)
    spec = spec_for(h, sim_serve(), verdict={"symptom": "itl", "max_itl_ms": 3.0,
                                             "strategy": "threshold"})
    first_bad, _ = hook_first_bad(h, spec, tmp_path)
    assert first_bad == h.planted["itl"]
    (journal,) = (h.path / ".git" / "vllm-bisect-hook").glob("*/journal.sqlite")
    with sqlite3.connect(journal) as con:
        started = [c for (c,) in con.execute("SELECT commit_sha FROM servers ORDER BY started")]
    # the first call measured both ends before its HEAD; no later call measured them again
    assert started[:2] == [h.good, h.bad], started
    assert started.count(h.good) == started.count(h.bad) == 1, started


@pytest.mark.parametrize(("key", "value", "words"), [
    ("max_itl_ms", "1e308", "verdict.max_itl_ms: Input should be less than or equal to 60000"),
    ("max_itl_ms", "5e-324", "verdict.max_itl_ms: Input should be greater than or equal to"),
    ("itl_factor", "1e300", "verdict.itl_factor: Input should be less than or equal to 1000"),
    ("min_output_tokens", "1000000000", "verdict.min_output_tokens: Input should be less"),
    ("min_output_tokens", "200", "min_output_tokens = 200 is above probe.max_tokens = 160"),
])
def test_absurd_thresholds_are_refused_at_load(tmp_path: Path, key: str, value: str,
                                               words: str) -> None:
    h = history(tmp_path, n_commits=3)
    verdict: dict[str, Any] = {"symptom": "length", "strategy": "threshold"}
    if "itl" in key:  # a valid itl spec without the key, then the key written in
        verdict = {"symptom": "itl", "strategy": "threshold",
                   ("max_itl_ms" if key == "itl_factor" else "itl_factor"): 2.0}
    text = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve(), verdict=verdict)
                      ).read_text()
    text = re.sub(r"(?m)^\[verdict\]$", f"[verdict]\n{key} = {value}", text, count=1)
    (tmp_path / "spec.toml").write_text(text)
    r, judged = bisect_run(h, [*HOOK, "--spec", str(tmp_path / "spec.toml"), "--cache-dir",
                               str(tmp_path / "cache")])
    assert_aborted(r, judged, words)
    assert not any((tmp_path / "cache").glob("**/serve-*.log"))  # refused before serving


def test_the_hook_outside_git_bisect_does_not_measure_the_ends(tmp_path: Path) -> None:
    h = itl_history(tmp_path, n=3)
    spec = write_spec(tmp_path / "spec.toml", spec_for(
        h, sim_serve(), verdict={"symptom": "itl", "max_itl_ms": 10_000.0, "strategy": "threshold"}))
    r = subprocess.run([*HOOK, "--spec", str(spec), "--cache-dir", str(tmp_path / "cache")],
                       cwd=h.path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
