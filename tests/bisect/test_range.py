"""Refs and ranges on real repositories."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from tests.helpers import history
from vllm_bisect.bisect.range import commit_range, open_repo
from vllm_bisect.errors import RangeError


def test_lists_first_parent_commits_oldest_first(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=8)
    rng = commit_range(open_repo(h.path), h.good, h.bad)
    assert [c.sha for c in rng.commits] == list(h.shas[1:])
    assert rng.commits[-1].sha == h.bad
    assert rng.commits[0].subject.endswith(")")  # "(#NNNNN)"


def test_short_shas_and_tags_resolve(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4)
    repo = open_repo(h.path)
    repo.create_tag("v0.23.0", ref=h.good)
    rng = commit_range(repo, "v0.23.0", h.bad[:9])
    assert rng.good.sha == h.good and rng.bad.sha == h.bad


@pytest.mark.parametrize("good,bad,match", [
    ("deadbeef", None, "unknown good ref"),
    (None, "nosuchbranch", "unknown bad ref"),
])
def test_unknown_refs(tmp_path: Path, good: str | None, bad: str | None, match: str) -> None:
    h = history(tmp_path, n_commits=3)
    with pytest.raises(RangeError, match=match) as e:
        commit_range(open_repo(h.path), good or h.good, bad or h.bad)
    assert e.value.hint


def test_same_and_swapped_and_unrelated(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3)
    repo = open_repo(h.path)
    with pytest.raises(RangeError, match="same commit"):
        commit_range(repo, h.good, h.good)
    with pytest.raises(RangeError, match="not an ancestor") as e:
        commit_range(repo, h.bad, h.good)
    assert "swapped" in e.value.hint
    repo.git.checkout("-b", "side", h.shas[1])
    (h.path / "side.txt").write_text("x")
    repo.index.add(["side.txt"])
    side = repo.index.commit("side").hexsha
    with pytest.raises(RangeError, match="not an ancestor"):
        commit_range(repo, side, h.bad)


def test_not_a_repo(tmp_path: Path) -> None:
    with pytest.raises(RangeError, match="not a git repository"):
        open_repo(tmp_path)
    with pytest.raises(RangeError, match="does not exist"):
        open_repo(tmp_path / "nope")


def test_merge_commits_first_parent(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3)
    repo = git.Repo(h.path)
    repo.git.checkout("-b", "feature", h.bad)
    (h.path / "f.txt").write_text("f")
    repo.index.add(["f.txt"])
    repo.index.commit("feature work")
    repo.git.checkout("main")
    (h.path / "m.txt").write_text("m")
    repo.index.add(["m.txt"])
    repo.index.commit("main work")
    repo.git.merge("feature", "--no-ff", "-m", "Merge feature (#1)")
    head = repo.head.commit.hexsha
    fp = commit_range(repo, h.good, head, first_parent=True)
    full = commit_range(repo, h.good, head, first_parent=False)
    assert len(fp.commits) == 5 and len(full.commits) == 6
