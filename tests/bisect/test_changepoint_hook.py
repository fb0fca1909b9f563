"""``git bisect run vllm-bisect hook`` under ``strategy = "changepoint"`` (issue 48 item 5):
each call answers HEAD from the model of the range rebuilt from the bisect's journal (every
earlier call's servers, git's ends included), on a real history served by the simulator."""

from __future__ import annotations

import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from tests.bisect.test_hook_parity import git_bisect_run, sim_serve, spec_for
from tests.helpers import history
from vllm_bisect.bisect.search.changepoint_hook import answer_bar
from vllm_bisect.sim.history import History


def servers(h: History) -> list[str]:
    """The commits of the servers the bisect's hook calls started, in order."""
    (journal,) = (h.path / ".git" / "vllm-bisect-hook").glob("*/journal.sqlite")
    with sqlite3.connect(journal) as con:
        return [c for (c,) in con.execute("SELECT commit_sha FROM servers ORDER BY started")]


def bisect_itl(tmp: Path, **plan: Any) -> tuple[History, subprocess.CompletedProcess[str], str]:
    """`git bisect run vllm-bisect hook` under the model of the range over an ITL history
    (``plan``: the step and its noise); asserts git named the planted commit."""
    h = history(tmp, step_ms=4.0, **plan)
    spec = spec_for(h, sim_serve(), verdict={"symptom": "itl", "strategy": "changepoint"},
                    probe={"max_tokens": 48, "warmup": 0, "requests": 2})
    r, log = git_bisect_run(h, spec, tmp)
    assert f"{h.planted['itl']} is the first bad commit" in r.stdout, r.stdout + r.stderr
    return h, r, log


def test_answer_bar_spends_the_confidence_over_the_answers() -> None:
    assert answer_bar(0.99, 1) == 0.99
    assert abs(answer_bar(0.99, 15) - (1 - 0.01 / 4)) < 1e-12    # 4 answers for 15 commits
    assert answer_bar(0.99, 1000) > answer_bar(0.99, 30) > 0.99


def test_git_bisect_run_answers_from_the_model_of_the_range(tmp_path: Path) -> None:
    # a 1.5x ITL step under request and server noise; every hook call is a process of its own
    h, r, log = bisect_itl(tmp_path, n_commits=12, slow_at=7, slow_factor=1.5,
                           noise_cv=0.04, server_cv=0.02)
    assert "# skip" not in log
    started = servers(h)
    # git's ends measured on the first call, before any commit inside the range, then reused
    assert set(started[:2]) == {h.good, h.bad}, started
    assert "model of the range: P(new side)" in r.stderr


def test_the_last_answer_counts_every_server(tmp_path: Path) -> None:
    h, r, _ = bisect_itl(tmp_path, n_commits=6, slow_at=3, slow_factor=2.0, noise_cv=0.03,
                         server_cv=0.01)
    said = [int(n) for n in re.findall(r"servers? of this commit, (\d+) in all", r.stderr)]
    assert said, r.stderr[-3000:]
    assert said == sorted(said) and said[-1] == len(servers(h)), (said, servers(h))


def test_an_untestable_head_is_skipped_not_measured_forever(tmp_path: Path) -> None:
    # HEAD without an artifact went into the search's skipped set with no server, and the
    # answer loop asked for its first server again and again (a hook that never returned)
    _, _, log = bisect_itl(tmp_path, n_commits=12, slow_at=8, slow_factor=1.5,
                           noise_cv=0.03, unbuildable=(4, 5, 6))
    assert "# skip" in log, log
