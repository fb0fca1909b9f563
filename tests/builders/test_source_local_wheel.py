"""The ``source`` builder's precompiled path with a local wheel, on the fake vLLM tree: one
slim wheel for every commit, the installed packages reused, the editable install, a version
for a history without tags, and a csrc/ change that is a skip, never a stale binary."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from vllm_bisect.builders import local_wheel_commit, make_builder
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.builders.local_wheel import pretend_version, slim_wheel
from vllm_bisect.builders.source import PARENT_PTH, SourceBuilder
from vllm_bisect.errors import ArtifactUnavailable
from vllm_bisect.sim.fake_vllm_tree import build_fake_wheel, write_fake_vllm_tree
from vllm_bisect.sim.source_history import PlantKind, make_source_history, source_spec_data
from vllm_bisect.spec import parse_spec
from vllm_bisect.spec.build import SourceBuild


def test_slim_wheel_keeps_compiled_parts_once(tmp_path: Path) -> None:
    wheel = build_fake_wheel(tmp_path / "w")
    slim = slim_wheel(wheel, tmp_path / "cache")
    import zipfile

    with zipfile.ZipFile(slim) as z:
        names = z.namelist()
        assert "vllm/_C.abi3.so" in names and "vllm/__init__.py" not in names
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
    mtime = slim.stat().st_mtime_ns
    assert slim_wheel(wheel, tmp_path / "cache") == slim and slim.stat().st_mtime_ns == mtime
    with pytest.raises(ArtifactUnavailable, match="does not exist"):
        slim_wheel(tmp_path / "nope.whl", tmp_path / "cache")


def test_precompiled_build_of_a_real_layout_tree(tmp_path: Path) -> None:
    src = write_fake_vllm_tree(tmp_path / "src")
    h = make_source_history(src, tmp_path / "hist", PlantKind.CSRC, seed=1, n_commits=6)
    wheel = build_fake_wheel(tmp_path / "w")
    repo = git.Repo(h.path)
    assert pretend_version(repo, h.shas[3], "0.25.1") == f"0.25.1.dev3+g{h.shas[3][:9]}"
    spec = SourceBuild(precompiled=True, full_build=False, wheel_location=str(wheel),
                       reuse_installed=True, editable=True)
    base = local_wheel_commit(repo, h.good)
    b = SourceBuilder(Checkouts(repo, tmp_path / "cache"), spec, tmp_path / "cache",
                      tmp_path / "logs", has_wheel=base.__eq__)
    i = h.planted_index - 1  # before the csrc/ change: precompiled from the wheel
    a = b.prepare(h.shas[i])
    assert a.venv is not None and a.checkout is not None and "precompiled" in a.identity
    out = subprocess.run([str(a.venv / "bin" / "python"), "-c",
                          "import vllm; print(vllm.__version__, vllm.__file__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == f"0.25.1.dev{i}+g{h.shas[i][:9]}.precompiled"
    assert Path(out[1]).parent.parent == a.checkout  # editable: the checkout's own Python
    assert (a.checkout / "vllm" / "_C.abi3.so").is_file()
    assert next(a.venv.glob(f"lib/python*/site-packages/{PARENT_PTH}")).is_file()
    log = (tmp_path / "logs" / f"build-{h.shas[i][:12]}.log").read_text()
    assert "--no-build-isolation" in log and "--no-deps" in log and str(wheel) not in log
    assert b.prepare(h.shas[i]).cached
    for j in (h.planted_index, len(h.shas) - 1):  # csrc/ changed since the wheel's commit
        with pytest.raises(ArtifactUnavailable, match=r"csrc/ops.h\) and full_build = false"):
            b.prepare(h.shas[j])


def test_make_builder_takes_the_wheel_commit_from_the_range(tmp_path: Path) -> None:
    src = write_fake_vllm_tree(tmp_path / "src")
    h = make_source_history(src, tmp_path / "hist", PlantKind.CAP, seed=1, n_commits=4)
    spec = parse_spec(source_spec_data(h, "m", str(tmp_path / "x.whl")))
    b = make_builder(spec, git.Repo(h.path), tmp_path / "cache", tmp_path / "logs")
    assert isinstance(b, SourceBuilder)
    plan = b.plan(h.bad)
    assert plan is not None and plan.base == h.good and plan.mode.value == "precompiled"


def test_slim_wheel_made_by_several_bisects_at_once(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Two bisects sharing a cache made the slim copy at once on the H200 and raced on one
    ``.part`` file (one build failed); three on an H100 each made their own copy (~6 min to
    the first server). Four writers at once: one copy is made, each gets it whole, and no
    temporary file is left."""
    import os
    import threading
    import zipfile

    wheel = tmp_path / "vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(6):
            z.writestr(f"vllm/_ext{i}.abi3.so", os.urandom(1 << 20))
        z.writestr("vllm/__init__.py", "")
        z.writestr("vllm-0.25.1.dist-info/METADATA", "Name: vllm\nVersion: 0.25.1\n")
    caplog.set_level("INFO", logger="vllm_bisect.builders.local_wheel")
    start = threading.Barrier(4)
    got: list[Path] = []
    errors: list[BaseException] = []

    def make() -> None:
        start.wait()
        try:
            got.append(slim_wheel(wheel, tmp_path / "cache"))
        except BaseException as err:  # every writer's error is reported
            errors.append(err)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(got)) == 1
    with zipfile.ZipFile(got[0]) as z:
        assert z.testzip() is None
        assert sorted(z.namelist()) == sorted(
            [f"vllm/_ext{i}.abi3.so" for i in range(6)] + ["vllm-0.25.1.dist-info/METADATA"])
    assert not list(got[0].parent.glob("*.part"))
    made = [r for r in caplog.records if r.getMessage().startswith("slim precompiled wheel")]
    assert len(made) == 1  # the other three waited for it
