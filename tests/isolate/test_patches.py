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


def test_scratch_commits_reuse_the_parents_wheel(tmp_path: Path) -> None:
    """A wheel session isolates with precompiled source builds: a Python-only subset sits on
    the parent and reuses its wheel; a subset with compiled source is a skip."""
    from vllm_bisect.builders.precompiled import BuildMode, plan_source_build
    from vllm_bisect.errors import SpecError
    from vllm_bisect.isolate.studies import source_build
    from vllm_bisect.spec import parse_spec

    repo, parent, culprit = _repo(tmp_path)
    root = Path(repo.working_dir)
    (root / "csrc").mkdir()
    (root / "csrc" / "k.cu").write_text("// kernel\n")
    repo.index.add(["csrc/k.cu"])
    repo.git.commit("--amend", "-m", "change, with a kernel")
    culprit = repo.head.commit.hexsha
    assert repo.commit(culprit).parents[0].hexsha == parent
    changes = diff_changes(repo, parent, culprit)
    assert not python_only(changes)
    s = Scratch(repo, parent, changes)
    wheels = {parent}.__contains__
    py = s.commit(parent, {"a.py": None}, "python only")
    cu = s.commit(parent, {"csrc/k.cu": None}, "kernel")
    assert plan_source_build(repo, py, wheels, full_build=False).mode is BuildMode.PRECOMPILED
    assert plan_source_build(repo, py, wheels, full_build=False).base == parent
    assert plan_source_build(repo, cu, wheels, full_build=False).mode is BuildMode.SKIP

    wheel = parse_spec({"build": {"kind": "wheel"}})
    b = source_build(wheel).build
    assert b.kind == "source" and b.model_dump()["precompiled"] and not b.model_dump()["full_build"]
    command = parse_spec({"build": {"kind": "command", "serve": "x {port}"}})
    assert source_build(command) is command
    try:
        source_build(parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"}}))
    except SpecError as e:
        assert "cannot build a subset" in e.message
    else:
        raise AssertionError("a url build cannot isolate")
