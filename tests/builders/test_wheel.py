"""The wheel builder against a local server laid out like wheels.vllm.ai."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.bisect.test_driver import run_driver
from tests.helpers import history, make_spec
from vllm_bisect.bisect.range import open_repo
from vllm_bisect.builders.cache import ArtifactCache
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.builders.wheel import WheelBuilder, version_matches
from vllm_bisect.builders.wheel_index import platform_fits
from vllm_bisect.envinfo import Platform
from vllm_bisect.errors import ArtifactUnavailable, SpecError
from vllm_bisect.models import Verdict
from vllm_bisect.sim.history import History
from vllm_bisect.sim.wheel_index import IndexServer, build_wheel, publish
from vllm_bisect.spec import WheelBuild, parse_spec

X86 = "cp38-abi3-manylinux_2_28_x86_64"
ARM = "cp38-abi3-manylinux_2_28_aarch64"
HOST = Platform(machine="x86_64", glibc=(2, 36))


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[History, str, dict[int, str]]]:
    """A 10-commit history with a cap at 6; commits 3 (missing), 4 (aarch64 only),
    5 (wheel of another commit), 8 (HTML error) and 9 (truncated metadata) are broken."""
    h = history(tmp_path, n_commits=10, cap_at=6)
    co = Checkouts(open_repo(h.path), tmp_path / "build-cache")
    root = tmp_path / "index"
    special = {3: "missing", 4: "aarch64 only", 5: "wrong build", 8: "html", 9: "truncated"}
    for i, sha in enumerate(h.shas):
        if special.get(i) == "missing":
            continue
        tag = ARM if special.get(i) == "aarch64 only" else X86
        src = h.shas[2] if special.get(i) == "wrong build" else sha
        whl = build_wheel(co.get(src), tmp_path / "wheels" / str(i), tag)
        cpu = build_wheel(co.get(src), tmp_path / "wheels" / f"{i}-cpu", tag, variant="cpu")
        fault = special.get(i) if special.get(i) in ("html", "truncated") else None
        publish(root, sha, {"default": [whl], "cpu": [cpu]}, fault=fault)
    with IndexServer(root) as url:
        yield h, url, special


def builder(tmp_path: Path, url: str, variant: str = "default") -> WheelBuilder:
    spec = WheelBuild(index_url=url, variant=variant)  # type: ignore[arg-type]
    return WheelBuilder(spec, ArtifactCache(tmp_path / "cache"), tmp_path / "logs", platform=HOST)


def test_index_layout_is_served(index: tuple[History, str, dict[int, str]]) -> None:
    h, url, _ = index
    meta = httpx.get(f"{url}/{h.good}/vllm/metadata.json").json()
    assert meta[0]["platform_tag"] == "manylinux_2_28_x86_64"
    assert meta[0]["path"].startswith("../vllm-") and "%2Bg" in meta[0]["path"]
    assert meta[0]["version"].endswith("+g" + h.good[:9])
    assert "cpu/" in httpx.get(f"{url}/{h.good}/").text
    assert httpx.get(f"{url}/{h.good}/cpu/vllm/metadata.json").json()[0]["version"].endswith(".cpu")


def test_installs_and_verifies_commit(tmp_path: Path,
                                      index: tuple[History, str, dict[int, str]]) -> None:
    h, url, _ = index
    b = builder(tmp_path, url)
    a = b.prepare(h.shas[1])
    assert a.venv is not None and (a.venv / "bin" / "vllm").exists()
    assert "sha256:" in a.identity and not a.cached
    assert b.prepare(h.shas[1]).cached  # idempotent
    cpu = builder(tmp_path, url, "auto").prepare(h.shas[2])  # host has no GPU: cpu variant
    assert "cpu" in cpu.identity


@pytest.mark.parametrize("i,needle", [
    (3, "no default wheels"), (4, "no default wheel for x86_64"),
    (5, "does not carry"), (8, "HTML instead of metadata.json"),
    (9, "malformed or truncated"),
])
def test_broken_commits_are_unavailable(tmp_path: Path, index: tuple[History, str, dict[int, str]],
                                        i: int, needle: str) -> None:
    h, url, _ = index
    with pytest.raises(ArtifactUnavailable, match=needle):
        builder(tmp_path, url).prepare(h.shas[i])


def test_unreachable_index(tmp_path: Path) -> None:
    with pytest.raises(ArtifactUnavailable, match="unreachable"):
        builder(tmp_path, "http://127.0.0.1:9").prepare("a" * 40)


def test_unknown_variant_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"build\.variant"):
        parse_spec({"build": {"kind": "wheel", "variant": "cu999"}})


def test_bisect_through_wheels_skips_broken(tmp_path: Path,
                                            index: tuple[History, str, dict[int, str]]) -> None:
    h, url, _ = index
    spec = make_spec(h, build={"kind": "wheel", "index_url": url, "variant": "default"})
    r = run_driver(spec, tmp_path)
    # 3, 4 and 5 cannot be had and sit right before the culprit (6): any of 3..6 may be first bad
    assert r.first_bad is None
    assert r.candidates == list(h.shas[3:7])
    assert h.planted["length"] == h.shas[6]
    for o in r.probed:
        if h.shas.index(o.commit) in (3, 4, 5, 8, 9):
            assert o.verdict is Verdict.SKIP


def test_platform_and_version_rules() -> None:
    assert platform_fits("manylinux_2_28_x86_64", HOST)
    assert not platform_fits("manylinux_2_39_x86_64", HOST)
    assert not platform_fits("manylinux_2_28_aarch64", HOST)
    assert platform_fits("manylinux2014_aarch64", Platform(machine="aarch64", glibc=(2, 35)))
    assert platform_fits("manylinux_2_17_x86_64.manylinux2014_x86_64", HOST)
    sha = "2f3f441f8" + "0" * 31
    assert version_matches("0.23.1rc1.dev901+g2f3f441f8", sha)
    assert version_matches("0.11.1rc8.dev14+g2f3f441f8.cu130", sha)
    assert not version_matches("0.25.1", sha)
    assert not version_matches("0.23.1rc1.dev901+gaa384b3c0", sha)


def test_prefetch_overlaps_downloads_with_probes(tmp_path: Path) -> None:
    """With a slow index (0.6 s per wheel), the next possible commits' wheels are being fetched
    while a commit is probed: when the driver asks for a commit's artifact, its download has
    already started. (How much wall time that saves is a benchmark's question, not a test's:
    a ratio of two wall times fails on a loaded machine.)"""
    from vllm_bisect.bisect.driver import Driver
    from vllm_bisect.bisect.measurement.evaluate import Evaluator
    from vllm_bisect.bisect.range import commit_range
    from vllm_bisect.bisect.state.journal import ResultCache
    from vllm_bisect.bisect.state.session import Session
    from vllm_bisect.builders.base import Artifact
    from vllm_bisect.builders.prefetch import Prefetcher

    asked: list[tuple[str, bool]] = []  # (commit, its download had started when asked for)

    class Watched(Prefetcher):
        def prepare(self, commit: str) -> Artifact:
            with self.lock:
                f = self.futures.get(commit)
            asked.append((commit, f is not None and (f.running() or f.done())))
            return super().prepare(commit)

    h = history(tmp_path, n_commits=16, cap_at=9)
    co = Checkouts(open_repo(h.path), tmp_path / "bc")
    root = tmp_path / "index"
    for i, sha in enumerate(h.shas):
        publish(root, sha, {"default": [build_wheel(co.get(sha), tmp_path / "w" / str(i), X86)]})
    with IndexServer(root, delay_s=0.6) as url:
        spec = make_spec(h, build={"kind": "wheel", "index_url": url, "variant": "default"},
                         probe={"max_tokens": 160, "requests": 3})
        b = WheelBuilder(spec.build, ArtifactCache(tmp_path / "cache"), tmp_path / "logs",
                         platform=HOST)
        pf = Watched(b)
        try:
            with Session(tmp_path / "s") as s:
                assert s.journal is not None
                ev = Evaluator(spec, pf, s.logs, s.journal, s.id)
                r = Driver(spec, commit_range(co.repo, h.good, h.bad), ev, s.journal,
                           ResultCache(tmp_path / "r.sqlite"), prefetcher=pf).run()
        finally:
            pf.close()
    assert r.first_bad == h.planted["length"]
    interior = [early for c, early in asked if c not in (h.good, h.bad)]
    # (culprit verification asks again for artifacts it has: those are not prefetched)
    assert sum(interior) >= 3, asked


def test_disk_full_while_storing_a_wheel_stops_the_run(
        tmp_path: Path, index: tuple[History, str, dict[int, str]]) -> None:
    from vllm_bisect.errors import HostFault

    h, url, _ = index
    b = builder(tmp_path, url)
    entry_dir = None
    # the first download's target folder; its .part file is made to point at /dev/full
    from vllm_bisect.builders.wheel import part_path
    from vllm_bisect.builders.wheel_index import choose

    e = choose(b.client, url, h.shas[1], "default", HOST)
    import hashlib as _h

    entry_dir = b.cache.path("wheel-" + _h.sha256(e.url.encode()).hexdigest()[:24])
    entry_dir.mkdir(parents=True)
    part_path(entry_dir / e.filename).symlink_to("/dev/full")  # (this process and thread)
    with pytest.raises(HostFault, match="no space left"):
        b.prepare(h.shas[1])


def test_cache_cap_evicts_old_venvs_but_not_endpoints(
        tmp_path: Path, index: tuple[History, str, dict[int, str]]) -> None:
    h, url, _ = index
    cache = ArtifactCache(tmp_path / "cache", max_bytes=1)  # everything is over the cap
    cache.protect([h.shas[0]])
    spec = WheelBuild(index_url=url, variant="default")
    b = WheelBuilder(spec, cache, tmp_path / "logs", platform=HOST)
    for i in (0, 1, 2):
        b.prepare(h.shas[i])
    kept = {e.commit for e in cache.entries()}
    assert h.shas[0] in kept and h.shas[2] in kept  # endpoint, and the one just made
    assert h.shas[1] not in kept


def test_a_useless_running_prefetch_is_stopped(tmp_path: Path,
                                               index: tuple[History, str, dict[int, str]]) -> None:
    import time as _time

    from vllm_bisect.builders.prefetch import Prefetcher

    h, _, _ = index
    with IndexServer(tmp_path / "index", delay_s=0.6) as slow:
        b = builder(tmp_path, slow)
        pf = Prefetcher(b)
        pf.prefetch([h.shas[1]])
        _time.sleep(0.2)  # the download is running (waiting on the slow index)
        pf.keep_only([])  # the verdict made it useless
        assert h.shas[1] in pf.cancelled
        _time.sleep(1.0)
        assert not list((tmp_path / "cache" / "artifacts").glob("wheel-*/*.whl"))  # stopped
        a = pf.prepare(h.shas[1])  # needed after all: prepared directly
        assert a.venv is not None and (a.venv / "bin" / "vllm").exists()
        pf.close()
