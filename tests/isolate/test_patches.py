"""Diff subsets as scratch commits in a real git repository."""

from __future__ import annotations

from pathlib import Path

import git

from vllm_bisect.isolate.patches import (
    REF_PREFIX,
    Scratch,
    apply_hunks,
    diff_changes,
    invert,
    python_only,
)


def _repo(tmp: Path) -> tuple[git.Repo, str, str]:
    repo = git.Repo.init(tmp / "r", initial_branch="main")
    root = Path(repo.working_dir)
    (root / "a.py").write_text("one\ntwo\nthree\nfour\nfive\n")
    (root / "gone.py").write_text("x = 1\n")
    (root / "blob.bin").write_bytes(b"\0\1\2")
    repo.index.add(["a.py", "gone.py", "blob.bin"])
    parent = repo.index.commit("base").hexsha
    (root / "a.py").write_text("ONE\ntwo\nthree\nfour\nFIVE\nsix")  # no final newline
    (root / "new.py").write_text("y = 2\n")
    (root / "blob.bin").write_bytes(b"\0\3")
    repo.index.remove(["gone.py"], working_tree=True)
    repo.index.add(["a.py", "new.py", "blob.bin"])
    culprit = repo.index.commit("change").hexsha
    return repo, parent, culprit


def test_files_hunks_and_exact_reconstruction(tmp_path: Path) -> None:
    repo, parent, culprit = _repo(tmp_path)
    changes = {c.path: c for c in diff_changes(repo, parent, culprit)}
    assert {p: c.status for p, c in changes.items()} == {
        "a.py": "M", "blob.bin": "M", "gone.py": "D", "new.py": "A"}
    a = changes["a.py"]
    assert len(a.hunks) == 2 and not changes["blob.bin"].hunks  # binary: one item
    assert a.before is not None and a.after is not None
    assert apply_hunks(a.before, a.after, {0, 1}) == a.after
    assert apply_hunks(a.before, a.after, {1}) == b"one\ntwo\nthree\nfour\nFIVE\nsix"
    assert apply_hunks(a.before, a.after, ()) == a.before
    assert python_only(list(changes.values()))

    s = Scratch(repo, parent, list(changes.values()))
    everything = s.commit(parent, {p: None for p in changes}, "all")
    assert repo.commit(everything).tree == repo.commit(culprit).tree
    assert repo.commit(everything).parents[0].hexsha == parent
    only = s.commit(parent, {"a.py": frozenset({0})}, "hunk 0")
    assert repo.git.show(f"{only}:a.py") == "ONE\ntwo\nthree\nfour\nfive"
    assert "gone.py" in repo.git.ls_tree("--name-only", only)
    reverted = s.commit(culprit, invert(list(changes.values()), {"a.py": frozenset({1})}),
                        "revert hunk 1")
    assert repo.git.show(f"{reverted}:a.py") == "ONE\ntwo\nthree\nfour\nfive"
    assert repo.git.show(f"{reverted}:new.py") == "y = 2"
    assert "gone.py" not in repo.git.ls_tree("--name-only", reverted)
    # deterministic (the cache key of a subset) and kept alive by a ref
    again = Scratch(repo, parent, list(changes.values())).commit(
        parent, {"a.py": frozenset({0})}, "hunk 0")
    assert again == only and repo.git.rev_parse(REF_PREFIX + only) == only
    assert repo.head.commit.hexsha == culprit and not repo.is_dirty()
