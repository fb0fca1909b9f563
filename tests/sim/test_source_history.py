"""The vLLM source-history generator, on the fake vLLM tree."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from vllm_bisect.sim.fake_vllm_tree import write_fake_vllm_tree
from vllm_bisect.sim.source_history import CSRC_FILE, PLANTS, PlantKind, make_source_history


@pytest.mark.parametrize("kind", list(PlantKind))
def test_one_regression_planted_among_neutral_edits(tmp_path: Path, kind: PlantKind) -> None:
    src = write_fake_vllm_tree(tmp_path / "src")
    h = make_source_history(src, tmp_path / "hist", kind, seed=3, n_commits=24)
    repo = git.Repo(h.path)
    assert len(h.shas) == 25 and h.shas[-1] == repo.head.commit.hexsha
    assert 2 <= h.planted_index < 24
    edit = PLANTS[kind][0]
    for i in range(1, 25):
        c = repo.commit(h.shas[i])
        changed = sorted(c.stats.files)
        diff = repo.git.diff(h.shas[i - 1], h.shas[i], "--unified=0")
        added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        code = [ln for ln in added if ln.strip() and not ln.lstrip().startswith(("#", "//"))]
        if i == h.planted_index:  # the regression beside two neutral edits
            assert edit.path in changed and len(changed) == (4 if kind is PlantKind.CSRC else 3)
            assert (CSRC_FILE in changed) is (kind is PlantKind.CSRC)
            assert (code != []) is (kind is not PlantKind.SPEC)  # spec removes a line
        else:  # comments only: no behaviour changes
            assert code == [] and not any(p.startswith("csrc/") for p in changed)
            assert "-" not in {ln[:1] for ln in diff.splitlines() if not ln.startswith("---")}
    record = json.loads(h.record.read_text())
    assert record["planted"] == h.planted and record["planted_file"] == edit.path
    assert not h.record.is_relative_to(h.path)  # the bisect never sees it
    assert record["expect"] == ("skip" if kind is PlantKind.CSRC else "first-bad")


def test_same_seed_same_position_and_text_not_found_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_fake_vllm_tree(tmp_path / "src")
    a = make_source_history(src, tmp_path / "a", PlantKind.CAP, seed=7)
    # another day (the clock git would read): the same commits, so a GPU run's journal
    # carried to a fresh machine names the commits it regenerates there
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2001-02-03T04:05:06 +0000")
    monkeypatch.setenv("GIT_AUTHOR_DATE", "2001-02-03T04:05:06 +0000")
    b = make_source_history(src, tmp_path / "b", PlantKind.CAP, seed=7)
    assert a.planted_index == b.planted_index and a.shas == b.shas
    (src / PLANTS[PlantKind.HOST][0].path).write_text("class Scheduler: ...\n")
    with pytest.raises(ValueError, match="not there exactly once"):
        make_source_history(src, tmp_path / "c", PlantKind.HOST, seed=7)
