"""deps on culprits that bump pins: a real PEP 503 index on 127.0.0.1 serving five
setuptools-built versions of a tiny package (1.3 carries the regression) and two of a
harmless one, real venv builds that resolve them there, the simulator reading the installed
package."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.isolate.helpers import source_spec
from vllm_bisect.isolate import pkgindex
from vllm_bisect.isolate.studies import run_studies
from vllm_bisect.sim.package_index import PackageIndex, build_package
from vllm_bisect.sim.synth import dependency_history

VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
OTHER = ("2.0", "2.1")  # aiodep: installed beside tinydep, never imported (harmless)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PackageIndex]:
    tmp = tmp_path_factory.mktemp("index")
    dist = tmp / "dist"
    for v in VERSIONS:
        cap = "128" if v >= "1.3" else "None"
        build_package("tinydep", v, f'"""tinydep {v}"""\nSPEC_OUTPUT_CAP = {cap}\n', dist)
    for v in OTHER:
        build_package("aiodep", v, f'"""aiodep {v}"""\n', dist)
    with pytest.MonkeyPatch.context() as mp, PackageIndex(dist) as idx:
        mp.setenv("UV_CACHE_DIR", str(tmp / "uv-cache"))  # nothing from earlier runs
        yield idx


def test_index_lists_the_versions(index: PackageIndex) -> None:
    got = [str(v) for v in pkgindex.versions(index.url, "TinyDep")]
    assert got == list(VERSIONS)
    assert pkgindex.versions(index.url, "absent") == []


def test_swaps_tell_vllm_code_from_the_dependency(tmp_path: Path, index: PackageIndex) -> None:
    # the culprit bumps tinydep 1.0 -> 1.1 (harmless) and the Dockerfile's CUDA_VERSION, and
    # caps outputs in its own code: the swaps exchange the pip pins only; the base version is
    # reported as a dependency change that cannot be swapped or bisected
    h = dependency_history(tmp_path / "vllm", "tinydep", "1.0", "1.1", before=0, after=0,
                           code_cap=True, cuda=("12.8.1", "12.9.1"))
    res = run_studies(tmp_path / "session", tmp_path / "cache", isolate=False,
                      spec=source_spec(h, index.url), culprit=h.planted["length"])["deps"]
    assert res["parent_with_new_pins"].startswith("good")
    assert res["culprit_with_old_pins"].startswith("bad")
    assert res["conclusion"] == "vllm code" and res["packages"] == []
    assert res["changes"] == ["tinydep ==1.0 -> ==1.1 (requirements/common.txt)"]
    assert res["base_changes"] == ["CUDA_VERSION 12.8.1 -> 12.9.1 (docker/Dockerfile)"]
    assert "not pip-installable" in res["base_note"]


def test_two_packages_bumped_at_once(tmp_path: Path, index: PackageIndex) -> None:
    # one commit bumps aiodep 2.0 -> 2.1 (harmless) and tinydep 1.0 -> 1.4 (1.3 is bad), and
    # nothing else: the dependency check names tinydep and 1.3
    h = dependency_history(tmp_path / "vllm", "tinydep", "1.0", "1.4", before=0, after=0,
                           also={"aiodep": ("2.0", "2.1")})
    session = tmp_path / "session"
    res = run_studies(session, tmp_path / "cache", isolate=False, spec=source_spec(h, index.url),
                      culprit=h.planted["length"])["deps"]
    assert res["changes"] == ["aiodep ==2.0 -> ==2.1 (requirements/common.txt)",
                              "tinydep ==1.0 -> ==1.4 (requirements/common.txt)"]
    assert res["base_changes"] == [] and res["base_note"] == ""
    # only pins changed: the swaps are the endpoints themselves (no build)
    assert res["parent_with_new_pins"].startswith("bad (the culprit itself")
    assert res["conclusion"] == "dependency"
    aio, tiny = res["packages"]
    assert aio["name"] == "aiodep" and aio["single_verdict"] == "bad"
    assert aio["first_bad_version"] is None and "alone does not flip" in aio["note"]
    assert tiny["name"] == "tinydep" and tiny["single_verdict"] == "good"
    assert tiny["first_bad_version"] == "1.3"
    assert [t["version"] for t in tiny["tested"]] == ["1.2", "1.3"]
    assert [t["verdict"] for t in tiny["tested"]] == ["good", "bad"]
    assert res["strategy"] == "threshold"
    saved = json.loads((session / "deps.json").read_text())
    assert saved["packages"][1]["first_bad_version"] == "1.3"
    print("two packages: fresh builds", res["fresh_builds"])


def test_only_a_base_version_changed(tmp_path: Path, index: PackageIndex) -> None:
    # tinydep unchanged, only CUDA_VERSION: nothing pip-installable to swap, nothing built
    h = dependency_history(tmp_path / "vllm", "tinydep", "1.0", "1.0", before=0, after=0,
                           cuda=("12.8.1", "13.0.1"))
    res = run_studies(tmp_path / "session", tmp_path / "cache", isolate=False,
                      spec=source_spec(h, index.url), culprit=h.planted["length"])["deps"]
    assert res["changes"] == [] and res["conclusion"] == "base versions"
    assert res["base_changes"] == ["CUDA_VERSION 12.8.1 -> 13.0.1 (docker/Dockerfile)"]
    assert res["fresh_builds"] == 0 and res["packages"] == []
