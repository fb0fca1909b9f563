"""Find-the-fix: old = has the problem, new = fixed; the search reports the first fixed commit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bisect.test_driver import run_driver
from tests.helpers import history, make_spec, write_spec
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Verdict


def test_first_fixed_commit_of_a_slowdown(tmp_path: Path) -> None:
    # slow from the base on, fixed at commit 6: itl_factor's reference is the fixed end
    h = history(tmp_path, n_commits=10, slow_at=0, fixed_at=6, slow_factor=5.0, step_ms=5.0)
    spec = make_spec(h, range={"search": "fix"},
                     verdict={"symptom": "itl", "itl_factor": 2.0, "strategy": "threshold"})
    r = run_driver(spec, tmp_path)
    assert r.search == "fix" and r.first_bad == h.planted["fix"]
    by_commit = {o.commit: o.verdict for o in r.probed}
    assert by_commit[h.good] is Verdict.GOOD and by_commit[h.bad] is Verdict.BAD  # old/new terms
    assert r.probed[0].commit == h.bad  # the fixed (reference) end is measured first


def test_the_default_finds_the_first_fixed_commit_with_the_model_of_the_range(
        tmp_path: Path) -> None:
    # auto on itl: the model of the range, its step the other way (the new side faster)
    h = history(tmp_path, n_commits=12, slow_at=0, fixed_at=7, slow_factor=3.0, step_ms=5.0)
    spec = make_spec(h, range={"search": "fix"}, probe={"requests": 3},
                     verdict={"symptom": "itl", "verify_samples": 0, "rest_check": False})
    r = run_driver(spec, tmp_path)
    assert r.strategy_chosen == "changepoint" and r.search == "fix"
    assert r.first_bad == h.planted["fix"]
    assert r.model is not None and r.confidence is not None and r.confidence >= 0.99


def test_fix_search_refuses_a_range_without_the_problem(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=0, fixed_at=2)
    spec = make_spec(h, range={"search": "fix", "good": h.shas[2], "bad": h.shas[4]})
    with pytest.raises(NotReproduced, match="has the problem"):
        run_driver(spec, tmp_path)


def test_cli_reports_which_search_ran(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=8, cap_at=0, fixed_at=5)
    spec = write_spec(tmp_path / "spec.toml", make_spec(h))
    cmd = [sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec), "--search", "fix",
           "--session", str(tmp_path / "s"), "--cache-dir", str(tmp_path / "c")]
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["search"] == "fix" and doc["first_new_label"] == "first fixed commit"
    assert doc["first_bad"] == h.planted["fix"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)  # resumed, cached
    assert r.returncode == 0, r.stderr
    assert f"first fixed commit: {h.planted['fix']}" in r.stdout
    report = (tmp_path / "s" / "report.md").read_text()
    assert "First fixed commit" in report and "Find-the-fix search" in report


def test_parallel_workers_find_the_first_fixed_commit(tmp_path: Path) -> None:
    # the endpoints run beside interior commits; the fixed end is still judged first (it is
    # the reference of itl_factor), and interior commits are judged in old/new terms
    from tests.bisect.test_parallel import bisect

    h = history(tmp_path, n_commits=12, slow_at=0, fixed_at=8, slow_factor=5.0, step_ms=5.0)
    spec = make_spec(h, range={"search": "fix"}, parallel={"workers": 3},
                     ops={"serialize_startup": False},
                     verdict={"symptom": "itl", "itl_factor": 2.0, "strategy": "threshold"})
    r = bisect(spec, tmp_path)
    assert r.search == "fix" and r.workers == 3 and r.first_bad == h.planted["fix"]
    assert all(o.verdict is not Verdict.SKIP for o in r.probed)
