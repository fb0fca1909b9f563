"""The wheel builder against a hostile index (real HTTP servers on 127.0.0.1): nothing is
written or deleted outside the cache, nothing is fetched from another origin, a wrong hash or
a wrong-version wheel is refused before anything of it is installed or run, and two runs
sharing one cache both succeed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders.hostile_index import Route, RouteServer, entry, make_wheel
from vllm_bisect.builders.cache import ArtifactCache
from vllm_bisect.builders.wheel import WheelBuilder
from vllm_bisect.envinfo import Platform
from vllm_bisect.errors import ArtifactUnavailable
from vllm_bisect.spec import WheelBuild

HOST = Platform(machine="x86_64", glibc=(2, 36))
SHA = "2f3f441f8" + "1" * 31
OTHER = "aa384b3c0" + "2" * 31
GOOD = f"0.1.0.dev1+g{SHA[:9]}"
SRC = os.environ.get("HOSTILE_SRC", str(Path(__file__).resolve().parents[2] / "src"))


def builder(tmp: Path, url: str) -> WheelBuilder:
    spec = WheelBuild(index_url=url, variant="default")
    return WheelBuilder(spec, ArtifactCache(tmp / "cache"), tmp / "logs", platform=HOST)


def publish(srv: RouteServer, wheel: Path, **extra: object) -> None:
    srv.routes[f"/{SHA}/{wheel.name}"] = Route(wheel.read_bytes())
    srv.metadata(SHA, [entry(wheel.name, f"../{wheel.name}", GOOD, **extra)])


def files_outside(root: Path, cache: Path) -> list[Path]:
    return [p for p in root.rglob("*") if cache not in p.parents and p != cache]


@pytest.mark.parametrize("name", ["../../../{out}/pwned.whl", "{out}/pwned.whl",
                                  "..", "vllm-1-py3-none-any.whl/../../x.whl", ".hidden.whl"])
def test_a_filename_that_is_not_a_plain_wheel_name_is_refused(tmp_path: Path, name: str) -> None:
    out = tmp_path / "outside"
    name = name.format(out=str(out).lstrip("/") if name.startswith("..") else out)
    wheel = make_wheel(tmp_path / "w", GOOD)
    with RouteServer() as srv:
        srv.routes[f"/{SHA}/{wheel.name}"] = Route(wheel.read_bytes())
        srv.metadata(SHA, [entry(name, f"../{wheel.name}", GOOD)])
        with pytest.raises(ArtifactUnavailable, match="not a plain wheel file name"):
            builder(tmp_path, srv.url).prepare(SHA)
        assert not any(h.endswith(".whl") for h in srv.hits)  # not even downloaded
    assert not out.exists()
    assert files_outside(tmp_path / "cache", tmp_path / "cache") == []


def test_a_wheel_on_another_origin_is_not_fetched(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", GOOD)
    with RouteServer() as index, RouteServer() as other:  # another port: another origin
        other.routes[f"/{wheel.name}"] = Route(wheel.read_bytes())
        index.metadata(SHA, [entry(wheel.name, f"{other.url}/{wheel.name}", GOOD)])
        with pytest.raises(ArtifactUnavailable, match="not on the wheel index's origin"):
            builder(tmp_path, index.url).prepare(SHA)
        assert other.hits == []


def test_a_redirect_to_another_origin_is_not_followed(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", GOOD)
    with RouteServer() as index, RouteServer() as other:
        other.routes[f"/{wheel.name}"] = Route(wheel.read_bytes())
        index.routes[f"/{SHA}/{wheel.name}"] = Route(
            status=302, headers={"Location": f"{other.url}/{wheel.name}"})
        index.metadata(SHA, [entry(wheel.name, f"../{wheel.name}", GOOD)])
        with pytest.raises(ArtifactUnavailable, match=r"redirect to .* not on the wheel index"):
            builder(tmp_path, index.url).prepare(SHA)
        # metadata.json itself redirected elsewhere: refused too
        index.routes[f"/{SHA}/vllm/metadata.json"] = Route(
            status=301, headers={"Location": f"{other.url}/metadata.json"})
        with pytest.raises(ArtifactUnavailable, match="not on the wheel index's origin"):
            builder(tmp_path, index.url).prepare(SHA)
        assert other.hits == []


@pytest.mark.parametrize("where", ["field", "fragment"])
def test_a_wrong_hash_is_refused_and_nothing_is_kept(tmp_path: Path, where: str) -> None:
    wheel = make_wheel(tmp_path / "w", GOOD)
    wrong = hashlib.sha256(b"something else").hexdigest()
    with RouteServer() as srv:
        srv.routes[f"/{SHA}/{wheel.name}"] = Route(wheel.read_bytes())
        path = f"../{wheel.name}" + (f"#sha256={wrong}" if where == "fragment" else "")
        extra = {"sha256": wrong} if where == "field" else {}
        srv.metadata(SHA, [entry(wheel.name, path, GOOD, **extra)])
        with pytest.raises(ArtifactUnavailable, match="the index says"):
            builder(tmp_path, srv.url).prepare(SHA)
    assert list((tmp_path / "cache" / "artifacts").rglob("*.whl")) == []
    assert list((tmp_path / "cache" / "artifacts").rglob("*.part")) == []


def test_a_wrong_version_wheel_never_runs(tmp_path: Path) -> None:
    """The index lists the right version, but the wheel is another build with a .pth file:
    its METADATA is read first, so nothing of it is installed and the .pth never runs."""
    marker = tmp_path / "pth-ran"
    evil = make_wheel(tmp_path / "w", f"0.1.0.dev1+g{OTHER[:9]}", pth_marker=marker)
    with RouteServer() as srv:
        srv.routes[f"/{SHA}/{evil.name}"] = Route(evil.read_bytes())
        srv.metadata(SHA, [entry(evil.name, f"../{evil.name}", GOOD)])
        with pytest.raises(ArtifactUnavailable, match=r"METADATA says vllm .* does not carry"):
            builder(tmp_path, srv.url).prepare(SHA)
    assert not marker.exists()
    assert not list((tmp_path / "cache" / "artifacts").glob("venv-*"))


def test_a_same_origin_redirect_with_the_right_hash_installs(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", GOOD)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with RouteServer() as srv:
        srv.routes[f"/files/{wheel.name}"] = Route(wheel.read_bytes())
        srv.routes[f"/{SHA}/{wheel.name}"] = Route(
            status=302, headers={"Location": f"/files/{wheel.name}"})
        srv.metadata(SHA, [entry(wheel.name, f"../{wheel.name}#sha256={digest}", GOOD)])
        a = builder(tmp_path, srv.url).prepare(SHA)
    assert a.venv is not None and f"sha256:{digest}" in a.identity


def test_prune_never_deletes_outside_the_cache(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path / "cache")
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "data").write_text("keep me")
    with pytest.raises(ValueError, match="outside the cache"):
        cache.register("wheel-x", victim, commit=None, kind="wheel")
    # records written by an older version or by hand, and a symlink out of the cache
    link = cache.path("wheel-link")
    link.symlink_to(victim)
    with cache.lock:
        for key, loc in (("wheel-old", str(victim)), ("wheel-link", str(link)),
                         ("../../evil", str(victim))):
            cache.con.execute("INSERT INTO artifacts VALUES (?, 'wheel', NULL, 100, 0, ?)",
                              (key, loc))
    evicted = cache.prune(0)
    assert {e.key for e in evicted} == {"wheel-old", "wheel-link", "../../evil"}
    assert (victim / "data").read_text() == "keep me"
    assert cache.entries() == []


SCRIPT = """
import sys
from pathlib import Path
from vllm_bisect.builders.cache import ArtifactCache
from vllm_bisect.builders.wheel import WheelBuilder
from vllm_bisect.envinfo import Platform
from vllm_bisect.spec import WheelBuild
spec = WheelBuild(index_url=sys.argv[1], variant="default")
b = WheelBuilder(spec, ArtifactCache(Path(sys.argv[2])), Path(sys.argv[3]),
                 platform=Platform(machine="x86_64", glibc=(2, 36)))
print(b.prepare(sys.argv[4]).identity)
"""


def test_two_runs_sharing_one_cache_both_succeed(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "w", GOOD)
    env = {**os.environ, "PYTHONPATH": SRC}
    with RouteServer() as srv:
        publish(srv, wheel)
        srv.routes[f"/{SHA}/{wheel.name}"].chunk_delay_s = 0.1  # both download at once
        procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, srv.url, str(tmp_path / "cache"),
                                   str(tmp_path / f"logs{i}"), SHA], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for i in range(2)]
        try:
            outs = [p.communicate(timeout=300) for p in procs]
        finally:
            for p in procs:
                p.kill()
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()[-2000:]
    assert outs[0][0] == outs[1][0] and b"sha256:" in outs[0][0]
    assert list((tmp_path / "cache" / "artifacts").rglob("*.part")) == []
    assert srv.hits.count(f"/{SHA}/{wheel.name}") == 1  # the second waited and reused it
