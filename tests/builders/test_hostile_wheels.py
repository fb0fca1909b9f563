"""Hostile wheel indexes through `vllm-bisect hook` (real HTTP servers on 127.0.0.1): a
dripping or stalled index, a zip bomb, a wheel naming members outside its root, each ends in
a skip (exit 125) with its reason within a bounded time (the deadlines are the spec's
``[ops]`` keys, set small here), never a hang, and nothing of a refused wheel is installed."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.bisect.test_hook_parity import HOOK, git
from tests.builders.hostile_index import (
    Route,
    RouteServer,
    add_zeros,
    entry,
    make_bomb,
    make_wheel,
    with_member,
)
from tests.helpers import history, make_spec, write_spec
from vllm_bisect.sim.history import History

OPS = {"index_deadline_s": 2.0, "download_deadline_s": 2.0, "retries": 0}


def hook(tmp: Path, h: History, url: str, **ops: object) -> tuple[subprocess.CompletedProcess[str], float]:
    spec = make_spec(h, build={"kind": "wheel", "index_url": url, "variant": "default"},
                     ops={**OPS, **ops})
    path = write_spec(tmp / "spec.toml", spec)
    started = time.monotonic()
    r = subprocess.run([*HOOK, "--spec", str(path), "--cache-dir", str(tmp / "cache")],
                       cwd=h.path, capture_output=True, text=True, timeout=300)
    return r, time.monotonic() - started


def at_head(tmp: Path) -> tuple[History, str]:
    h = history(tmp, n_commits=2)
    git(h.path, "checkout", "-q", h.shas[1])
    return h, h.shas[1]


def publish(srv: RouteServer, wheel: Path, sha: str, version: str, **route: object) -> None:
    srv.routes[f"/{sha}/{wheel.name}"] = Route(wheel.read_bytes(), **route)  # type: ignore[arg-type]
    srv.metadata(sha, [entry(wheel.name, f"../{wheel.name}", version)])


def version_of(sha: str) -> str:
    return f"0.1.0.dev1+g{sha[:9]}"


def test_a_wheel_dripping_a_huge_body_is_a_skip(tmp_path: Path) -> None:
    h, sha = at_head(tmp_path)
    wheel = make_wheel(tmp_path / "w", version_of(sha))
    with RouteServer() as srv:
        publish(srv, wheel, sha, version_of(sha), drip_s=2.0, length=2 << 30)
        r, took = hook(tmp_path, h, srv.url)
    assert r.returncode == 125, r.stderr[-2000:]
    assert "did not answer within 2 s" in r.stderr
    assert took < 120  # without a total deadline: 2 GiB at a byte per 2 s


@pytest.mark.parametrize("how", ["body", "headers"])
def test_dripping_metadata_is_a_skip(tmp_path: Path, how: str) -> None:
    h, sha = at_head(tmp_path)
    with RouteServer() as srv:
        srv.routes[f"/{sha}/vllm/metadata.json"] = (
            Route(b"[", drip_s=0.5, length=100_000) if how == "body"
            else Route(header_drip_s=0.5))
        r, took = hook(tmp_path, h, srv.url)
    assert r.returncode == 125, r.stderr[-2000:]
    assert "did not answer within 2 s" in r.stderr
    assert took < 120


def test_a_zip_bomb_is_refused_before_installing(tmp_path: Path) -> None:
    h, sha = at_head(tmp_path)
    bomb = make_bomb(tmp_path / "w", version_of(sha), 64 << 20)
    assert bomb.stat().st_size < 1 << 20
    with RouteServer() as srv:
        publish(srv, bomb, sha, version_of(sha))
        r, _ = hook(tmp_path, h, srv.url, max_unpacked_size="32M")
    assert r.returncode == 125, r.stderr[-2000:]
    assert "unpacks to more than 33554432 bytes" in r.stderr
    assert not list((tmp_path / "cache" / "artifacts").glob("venv-*/bin"))


def test_a_wheel_larger_than_its_cap_is_refused(tmp_path: Path) -> None:
    h, sha = at_head(tmp_path)
    wheel = make_wheel(tmp_path / "w", version_of(sha))
    with RouteServer() as srv:
        publish(srv, wheel, sha, version_of(sha), length=5 << 30, drip_s=2.0)
        r, _ = hook(tmp_path, h, srv.url, max_wheel_size="1G")
    assert r.returncode == 125, r.stderr[-2000:]
    assert "is larger than 1073741824 bytes" in r.stderr


@pytest.mark.parametrize("member", ["../evil.py", "vllm/../../evil.py", "/tmp/evil.py"])
def test_a_member_outside_the_wheel_root_is_a_skip(tmp_path: Path, member: str) -> None:
    h, sha = at_head(tmp_path)
    wheel = with_member(make_wheel(tmp_path / "w", version_of(sha)), member)
    with RouteServer() as srv:
        publish(srv, wheel, sha, version_of(sha))
        r, _ = hook(tmp_path, h, srv.url)
    assert r.returncode == 125, r.stderr[-2000:]
    assert "outside its root" in r.stderr
    assert not list((tmp_path / "cache" / "artifacts").glob("venv-*/bin"))


def test_a_zip_bomb_under_the_total_cap_is_refused_by_its_ratio(tmp_path: Path) -> None:
    # default caps: 80 MiB of zeros is far under 16G, but packs about 1000:1
    h, sha = at_head(tmp_path)
    bomb = make_bomb(tmp_path / "w", version_of(sha), 80 << 20)
    with RouteServer() as srv:
        publish(srv, bomb, sha, version_of(sha))
        r, _ = hook(tmp_path, h, srv.url)
    assert r.returncode == 125, r.stderr[-2000:]
    assert "(a zip bomb): refused" in r.stderr
    assert not list((tmp_path / "cache" / "artifacts").glob("venv-*/bin"))


def test_a_wheel_whose_pth_hangs_is_a_skip_within_the_deadline(tmp_path: Path) -> None:
    """The installed-version check starts the venv's Python, which runs the wheel's .pth
    files: one that sleeps (here after starting a sleeping child, -S: no .pth of its own)
    held the hook for ever. It has a deadline now (at most
    ops.startup_timeout_s), and the whole process group is killed at it."""
    h, sha = at_head(tmp_path)
    wheel = make_wheel(tmp_path / "w", version_of(sha),
                       pth_code="import time, subprocess, sys; "
                                "subprocess.Popen([sys.executable, '-S', '-c', "
                                "'import time; time.sleep(3601.25)']); time.sleep(3601.25)")
    with RouteServer() as srv:
        publish(srv, wheel, sha, version_of(sha))
        r, took = hook(tmp_path, h, srv.url, startup_timeout_s=3.0)
    assert r.returncode == 125, r.stderr[-2000:]
    said = " ".join(r.stderr.split())
    assert "did not start within 3 s" in said and ".pth" in said, r.stderr[-2000:]
    assert took < 120
    left = [p for p in Path("/proc").glob("[0-9]*") if b"3601.25" in _cmdline(p)]
    assert not left, "the .pth's processes outlived the check"


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


def test_many_members_each_under_the_member_check_are_refused(tmp_path: Path) -> None:
    """Members of 62 MiB of zeros each pass the per-member check (over 64 MiB and 100:1);
    together they unpack 100s of MiB from a few hundred KB: the total ratio refuses them."""
    h, sha = at_head(tmp_path)
    wheel = make_bomb(tmp_path / "w", version_of(sha), 62 << 20, name="vllm/z0.bin")
    for i in range(1, 5):
        add_zeros(wheel, f"vllm/z{i}.bin", 62 << 20)
    assert wheel.stat().st_size < 2 << 20
    with RouteServer() as srv:
        publish(srv, wheel, sha, version_of(sha))
        r, _ = hook(tmp_path, h, srv.url)
    assert r.returncode == 125, r.stderr[-2000:]
    said = " ".join(r.stderr.split())
    m = re.search(r"unpacks to (\d+) bytes from (\d+) packed \(\d+:1 over its \d+ members: a "
                  r"zip bomb\)", said)
    assert m and int(m.group(1)) >= 5 * (62 << 20), r.stderr[-2000:]
    assert not list((tmp_path / "cache" / "artifacts").glob("venv-*/bin"))
