"""Release tags off main: a range between them runs between their branch points on main."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from tests.helpers import history
from vllm_bisect.bisect.range import commit_range
from vllm_bisect.errors import RangeError
from vllm_bisect.triage import resolve_refs, triage


def release(repo: git.Repo, base: str, version: str, picks: int) -> str:
    """Cut releases/<version> from base, add cherry-picks, tag it; back to main."""
    branch = repo.create_head(f"releases/{version}", base)
    branch.checkout()
    root = Path(repo.working_tree_dir or ".")
    for i in range(picks):
        (root / f"pick-{version}-{i}.txt").write_text(f"{i}\n")
        repo.index.add([f"pick-{version}-{i}.txt"])
        repo.index.commit(f"[Bugfix] cherry-pick {i} for {version}")
    (root / "vllm" / "version.py").write_text(f'__version__ = "{version.removeprefix("v")}"\n')
    repo.index.add(["vllm/version.py"])
    tag = repo.create_tag(version, ref=repo.index.commit(f"Release {version}"))
    repo.heads.main.checkout()
    return tag.commit.hexsha


def test_run_between_release_tags_uses_branch_points(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=12)
    repo = git.Repo(h.path)
    old_tag = release(repo, h.shas[3], "v0.10.2", picks=2)
    new_tag = release(repo, h.shas[9], "v0.12.0", picks=1)
    rng = commit_range(repo, "v0.10.2", "v0.12.0")
    assert (rng.good.sha, rng.bad.sha) == (h.shas[3], h.shas[9])
    assert [c.sha for c in rng.commits] == list(h.shas[4:10])
    assert len(rng.notes) == 2
    assert "v0.10.2" in rng.notes[0] and h.shas[3][:12] in rng.notes[0]
    assert "merge-base" in rng.notes[0] and "cherry-pick 1 for v0.10.2" in rng.notes[0]
    assert old_tag[:12] in rng.notes[0] and new_tag[:12] in rng.notes[1]
    # a version without the v names the tag too, and a tag on main is used as it is
    repo.create_tag("v0.11.0", ref=h.shas[6])
    rng = commit_range(repo, "0.11.0", "v0.12.0")
    assert rng.good.sha == h.shas[6] and len(rng.notes) == 1


def test_unknown_release_is_a_clear_error(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3)
    with pytest.raises(RangeError, match=r"unknown good ref: 'v9\.9\.9'"):
        commit_range(git.Repo(h.path), "v9.9.9", h.shas[-1])


def test_triage_maps_release_tags_and_says_so(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=10)
    repo = git.Repo(h.path)
    release(repo, h.shas[2], "v0.10.2", picks=3)
    release(repo, h.shas[8], "v0.12.0", picks=1)
    t = triage("With v0.10.2 we achieve ~60 tok/s but only 28 tok/s after upgrading to v0.12.0.")
    resolve_refs(t, repo)
    assert (t.good, t.bad) == (h.shas[2], h.shas[8])
    assert any("release branch" in w and "v0.10.2" in w for w in t.warnings)
    notes = [r.why for r in t.read if r.what == "release branch point"]
    assert notes and "cherry-pick 2 for v0.10.2" in notes[0]
