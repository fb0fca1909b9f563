"""Precompiled source builds: which commits may reuse a wheel's compiled parts."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from tests.helpers import history
from vllm_bisect.bisect.range import open_repo
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.builders.precompiled import BuildMode, compiled_changes, plan_source_build
from vllm_bisect.builders.source import SourceBuilder
from vllm_bisect.builders.wheel_index import has_wheel_fn
from vllm_bisect.envinfo import Platform
from vllm_bisect.errors import ArtifactUnavailable
from vllm_bisect.sim.wheel_index import IndexServer, build_wheel, publish
from vllm_bisect.spec import SourceBuild

HOST = Platform(machine="x86_64", glibc=(2, 36))


def small_repo(path: Path) -> list[str]:
    """0 base, 1 python, 2 csrc, 3 python, 4 CMakeLists, 5 python."""
    repo = git.Repo.init(path, initial_branch="main")
    shas = []
    changes = [("vllm/a.py", "0"), ("vllm/a.py", "1"), ("csrc/k.cu", "2"), ("vllm/b.py", "3"),
               ("CMakeLists.txt", "4"), ("vllm/a.py", "5")]
    for i, (rel, text) in enumerate(changes):
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
        repo.index.add([rel])
        shas.append(repo.index.commit(f"change {i}").hexsha)
    return shas


def test_plan_follows_compiled_changes(tmp_path: Path) -> None:
    shas = small_repo(tmp_path / "r")
    repo = git.Repo(tmp_path / "r")
    wheels = {shas[0], shas[3]}

    def plan(i: int, full: bool = True) -> tuple[BuildMode, str | None]:
        p = plan_source_build(repo, shas[i], wheels.__contains__, full)
        return p.mode, p.base

    assert plan(1) == (BuildMode.PRECOMPILED, shas[0])
    assert plan(2) == (BuildMode.FULL, shas[0])           # csrc/ changed since the wheel
    assert plan(2, full=False) == (BuildMode.SKIP, shas[0])
    assert plan(3) == (BuildMode.PRECOMPILED, shas[3])    # its own wheel
    assert plan(4) == (BuildMode.FULL, shas[3])           # CMakeLists.txt changed
    assert plan(5) == (BuildMode.FULL, shas[3])           # ... and is still in base..5
    none = plan_source_build(repo, shas[5], lambda s: False, full_build=False)
    assert none.mode is BuildMode.SKIP and "no wheel" in none.reason
    assert "csrc/k.cu" in plan_source_build(repo, shas[2], wheels.__contains__, True).reason


def test_source_build_pins_the_wheel_commit(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=8)
    co = Checkouts(open_repo(h.path), tmp_path / "cache")
    # the first commit whose successor changes only Python: publish a wheel for it
    i = next(i for i in range(1, 8) if not compiled_changes(co.repo, h.shas[i], h.shas[i + 1]))
    root = tmp_path / "index"
    whl = build_wheel(co.get(h.shas[i]), tmp_path / "w", "cp38-abi3-manylinux_2_28_x86_64")
    publish(root, h.shas[i], {"default": [whl]})
    with IndexServer(root) as url:
        spec = SourceBuild(precompiled=True, full_build=False, index_url=url, variant="default")
        b = SourceBuilder(co, spec, tmp_path / "cache", tmp_path / "logs",
                          has_wheel=has_wheel_fn(url, "default", HOST))
        a = b.prepare(h.shas[i + 1])
        assert "precompiled" in a.identity and h.shas[i][:12] in a.identity
        assert a.venv is not None
        info = next(a.venv.glob("lib/python*/site-packages/vllm/_precompiled.py")).read_text()
        assert info == f"PRECOMPILED_WHEEL_COMMIT = {h.shas[i]!r}\n"
        with pytest.raises(ArtifactUnavailable, match="no wheel within"):
            b.prepare(h.shas[0])  # nothing at or before the base has a wheel


def test_the_early_check_and_the_build_ask_the_index_once(tmp_path: Path) -> None:
    """`run` asks `unbuildable` of its endpoints before building them: the walk back to a
    commit with a wheel (one index request per commit it passes) is made once, not twice."""
    shas = small_repo(tmp_path / "r")
    asked: list[str] = []

    def has_wheel(sha: str) -> bool:
        asked.append(sha)
        return sha == shas[0]

    co = Checkouts(open_repo(tmp_path / "r"), tmp_path / "cache")
    b = SourceBuilder(co, SourceBuild(precompiled=True, full_build=False), tmp_path / "cache",
                      tmp_path / "logs", has_wheel=has_wheel)
    skip = b.unbuildable(shas[3])
    assert skip is not None and "csrc/k.cu" in str(skip)
    walked = list(asked)
    assert walked == [shas[3], shas[2], shas[1], shas[0]]
    with pytest.raises(ArtifactUnavailable, match=r"csrc/k\.cu"):
        b.prepare(shas[3])
    assert asked == walked
