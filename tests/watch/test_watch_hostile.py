"""`vllm-bisect watch` on hostile series, through the real CLI: values that are inf or nan
are reported (never dropped silently: a step to inf read as "no change point"); a commit
measured twice never gives a window whose ends run backwards in history; a series of a
million rows is refused with a clear error, not read for minutes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import history
from tests.watch.test_watch_cli import cli


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_non_finite_values_are_reported(tmp_path: Path, bad: float) -> None:
    rng = np.random.default_rng(3)
    itl = list(10 * (1 + 0.02 * rng.standard_normal(40)))
    with (tmp_path / "s.jsonl").open("w") as fh:
        for i in range(40):
            fh.write(json.dumps({"commit": f"n{i}", "mean_itl_ms": itl[i] if i < 25 else bad})
                     + "\n")
    r = cli("watch", "s.jsonl", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    said = " ".join(r.stderr.split())
    assert "Not finite, left out of mean_itl_ms: 15 point(s) (n25:" in said, r.stderr
    assert [p["point"] for p in doc["nonfinite"]["mean_itl_ms"]] == [f"n{i}" for i in range(25, 40)]
    assert "Not finite, left out of mean_itl_ms" in (tmp_path / "watch" / "watch.md").read_text()
    plain = cli("watch", "s.jsonl", cwd=tmp_path)
    assert "Not finite" in " ".join(plain.stderr.split()), plain.stderr


def _is_ancestor(repo: Path, a: str, b: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=repo).returncode == 0


@pytest.mark.parametrize("with_repo", [True, False])
def test_a_commit_measured_twice_never_reverses_a_window(tmp_path: Path, with_repo: bool) -> None:
    """c1..c20 measured at 10 ms; later (the machine changed) c1..c10 again at 12 ms. In time
    order the step falls between c20 and c1's second run: a window from c20 back to c1."""
    h = history(tmp_path, n_commits=21)
    commits = h.shas[1:21]
    rng = np.random.default_rng(5)
    rows = [(c, i, 10.0) for i, c in enumerate(commits)]
    rows += [(c, 20 + i, 12.0) for i, c in enumerate(commits[:10])]
    with (tmp_path / "s.csv").open("w") as fh:
        fh.write("commit,time,mean_itl_ms\n")
        for c, t, level in rows:
            fh.write(f"{c},{1_800_000_000 + 60 * t},{level * (1 + 0.01 * rng.standard_normal())}\n")
    args = ["--repo", str(h.path)] if with_repo else []
    r = cli("watch", "s.csv", "--json", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    order = {c: i for i, c in enumerate(commits)}
    for c in json.loads(r.stdout)["change_points"]:
        before, after = c["last_before"], c["first_after"]
        assert order[before] <= order[after], c        # never backwards in history
        assert _is_ancestor(h.path, before, after), c
        if before == after:
            assert c["spec"] is None, c                 # a step inside one commit: no window


def test_a_million_row_series_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    with path.open("w") as fh:
        fh.write("commit,mean_itl_ms\n")
        fh.writelines(f"n{i},10.0\n" for i in range(1_000_000))
    r = cli("watch", "big.csv", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    said = " ".join(r.stderr.split())
    assert "holds more than 100000 points" in said and "hint:" in said
